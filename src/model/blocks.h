// The RoFormer blocks, llm.c style: each block is a *_forward / *_backward pair of free functions over
// a params struct (pointers into the parameter arena, params.h) and an activations struct (what the
// backward needs). Models (roformer.h), decoding (generate.h) and the task heads compose these
// blocks; none of them re-implements a block. Every rotation goes through librope.
//
// Conventions. Shapes: B batch rows, T query tokens, Tk key tokens, N = B·T, E embedding size,
// H hidden size, I intermediate size, V vocabulary, n heads of D = H / n. A forward writes its output
// and its activations. A backward WRITES d(input) and ACCUMULATES (+=) into the parameter gradients
// (a params struct pointing into the gradient arena) and into a cross-attention memory's gradient.
// Null parameter pointers mean "absent": no bias without use_bias, no norm weights with RMS norms.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "ops/attention.h"
#include "ops/linear_attention.h"
#include "ops/packed_linear.h"
#include "rope/rope.hpp"

namespace model {

template <typename T>
struct LinearParams {
  T *w = nullptr, *b = nullptr;  // (out, in) PyTorch layout, (out)
  // Inference (RoFormer::pack): the same layer packed for oneDNN, which the forward then runs instead
  // of w and b (fp32 models only). Its epilogue may hold the activation that follows the layer.
  const ops::PackedLinear* packed = nullptr;
  // bf16 mixed-precision training (RoFormer::set_precision): w's bf16 copy, (out, in). When set, the
  // forward and both backward products run ops' bf16 GEMMs (ops/linear.h) on it, fp32 elsewhere.
  const uint16_t* w16 = nullptr;
  // Whether the layer reads its input in bf16: it trains in bf16 (w16) or is packed in bf16.
  bool reads_bf16() const { return w16 || (packed && packed->precision() == ops::Precision::bf16); }
};
template <typename T>
struct NormParams {
  T *w = nullptr, *b = nullptr;  // (C); both null for RoFormer-V2's parameter-free RMS norm
};
template <typename T>
struct EmbeddingParams {
  T *word = nullptr, *token_type = nullptr, *position = nullptr;  // (V, E), (types, E), (P, E) or null
  NormParams<T> norm;                                             // (E)
  LinearParams<T> project;                                        // (H, E) when E != H, else null
};
// Attention and its output sub-layer (HF RoFormerAttention: self + output dense, residual, norm).
template <typename T>
struct AttentionParams {
  LinearParams<T> q, k, v, out;  // (H, H) each
  NormParams<T> norm;            // (H)
  // Inference (RoFormer::pack): q, k and v as one packed (3H, H) layer, so the input is read (and for
  // int8 quantised) once and the GEMM is 3× wider; the three outputs are then split.
  const ops::PackedLinear* qkv = nullptr;
  // The layer that reads the sub-layer's input: qkv when packed, else q (k and v read it alike).
  LinearParams<T> input_dense() const { return qkv ? LinearParams<T>{nullptr, nullptr, qkv, nullptr} : q; }
};
// HF RoFormerIntermediate + RoFormerOutput: dense H → I, activation, dense I → H, residual, norm.
template <typename T>
struct FeedForwardParams {
  LinearParams<T> in, out;  // (I, H), (H, I)
  NormParams<T> norm;       // (H)
};
template <typename T>
struct LayerParams {
  AttentionParams<T> attn;
  AttentionParams<T> cross;  // a decoder's cross-attention (add_cross_attention), else null
  FeedForwardParams<T> ffn;
};
// HF RoFormerLMPredictionHead: dense H → E, activation, norm, decoder tied to the word embeddings.
// RoFormer-V2's head is the tied matmul alone (dense and norm null, decoder_b null).
template <typename T>
struct MlmHeadParams {
  LinearParams<T> dense;  // (E, H)
  NormParams<T> norm;     // (E)
  T *decoder_w = nullptr, *decoder_b = nullptr;  // (V, E) = the word embeddings, (V)
  const ops::PackedLinear* decoder_packed = nullptr;  // inference: decoder_w and decoder_b packed
  const uint16_t* decoder_w16 = nullptr;              // bf16 training: decoder_w's bf16 copy
  LinearParams<T> decoder() const { return {decoder_w, decoder_b, decoder_packed, decoder_w16}; }
};
// RoFormer-Sim's pooler: act(h[:, 0]·Wᵀ + b) with pooler_activation linear or tanh.
template <typename T>
struct PoolerParams {
  LinearParams<T> dense;  // (H, H)
};

// The dropout state of one forward: hidden dropout on the embeddings and on each sub-layer output,
// attention dropout on the probabilities. Masks are keyed by (seed, site, global row), so a row gets
// the same masks however a batch is split. Sites: 0 embeddings; layer l: 1 + 3l probabilities,
// 2 + 3l attention output, 3 + 3l feed-forward output; a decoder's cross-attention in layer l uses
// the sites of layer L + l (its context's `layer`), which no self-attention uses.
struct Dropout {
  double hidden = 0, attention = 0;  // probabilities; 0 = off (inference)
  uint64_t seed = 0;
  int64_t row0 = 0;    // global index of batch row 0
  int64_t tokens = 0;  // tokens per batch row (T)
  uint64_t site_seed(int64_t site) const;
  // The mask counter of element 0 of a (B, T, C) tensor: row0 · T · C.
  uint64_t first(int64_t C) const { return static_cast<uint64_t>(row0 * tokens * C); }
  static Dropout training(const RoFormerConfig& c, uint64_t seed, int64_t row0, int64_t tokens);
};

// Backward scratch shared by the blocks of one model: named buffers (ScratchBuffer below), grown on
// first use and reused every step.
// Sizes an activation buffer for n elements, growing it only: batches of varying length (dynamic
// padding) reuse the largest buffer so far instead of zero-filling, and faulting in, a regrown one
// each step. Every block writes the first n elements before it reads them.
template <typename T>
void grow_to(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// The backward's buffers, named by the function that owns them: a block reuses its own on every
// call but never touches another's, so the gradients a caller holds in its buffers (the model's
// d_out, d_mid, d_in across the layers; attention's d_ctx across attention_output_backward) survive
// the blocks it calls.
enum class ScratchBuffer : size_t {
  embeddings_dropped, embeddings_sum,                                       // embeddings_backward
  attention_output_sum,                                                     // attention_output_backward
  attention_context, attention_query, attention_key, attention_value,      // self/cross_attention_backward
  feed_forward_sum, feed_forward_activation, feed_forward_pre,             // feed_forward_backward
  mlm_head_normed, mlm_head_activation, mlm_head_dense,                    // mlm_head_backward
  model_hidden, model_out, model_mid, model_in, model_recomputed,          // RoFormer::backward*
  count
};

template <typename T>
struct Scratch {
  std::vector<std::vector<T>> bufs = std::vector<std::vector<T>>(static_cast<size_t>(ScratchBuffer::count));
  T* get(ScratchBuffer b, int64_t n) {
    std::vector<T>& v = bufs[static_cast<size_t>(b)];
    if (static_cast<int64_t>(v.size()) < n) v.resize(n);
    return v.data();
  }
};

// Where a block's input is read in bf16 (bf16 training, or a model packed in bf16 for inference), it is
// handed on in bf16 as well: the block that writes x (N, H) writes its bf16 rounding
// (ops::round_to_bf16's bits) in the same pass, its norm's out16 (ops/norm.h), straight into the
// buffer of the block that reads x (AttentionActs::x16, FeedForwardActs::x16, sized by
// bf16_input_buffer), which then rounds nothing itself. The forward functions below take it as:
struct Bf16Handoff {
  uint16_t* out16 = nullptr;  // (N, H): the block's output rounded to bf16 goes here too (the next
                              // block's x16), or null
  bool x16_written = false;   // the block's own x16 holds its input x rounded to bf16 already
};
// The buffer the producer of a block's input writes in bf16: x16, that block's buffer, grown to n when
// p, the dense that reads it, reads bf16 (LinearParams::reads_bf16); else null.
template <typename T>
uint16_t* bf16_input_buffer(std::vector<uint16_t>& x16, const LinearParams<T>& p, int64_t n);

// ---- norm: LayerNorm (mean, rstd kept) or, with norm_type rms_norm, RoFormer-V2's RMS norm ----
template <typename T>
struct NormActs {
  std::vector<T> mean, rstd;  // (N)
};
// out (N, C) = norm(in), and out16 (N, C) = out rounded to bf16 when given (fp32 only). acts hold at
// least N (grow_to).
template <typename T>
void norm_forward(const RoFormerConfig& c, T* out, NormActs<T>& a, const T* in, const NormParams<T>& p, int64_t N,
                  int64_t C, uint16_t* out16 = nullptr);
// din (N, C) written; g.w, g.b += gradients.
template <typename T>
void norm_backward(const RoFormerConfig& c, T* din, const NormParams<T>& g, const T* dout, const T* in,
                   const NormParams<T>& p, const NormActs<T>& a, int64_t N, int64_t C);

// ---- activation (hidden_act): gelu (exact erf) or relu ----
template <typename T>
void activation_forward(const RoFormerConfig& c, T* out, const T* in, int64_t n);
template <typename T>
void activation_backward(const RoFormerConfig& c, T* din, const T* in, const T* dout, int64_t n);  // din written

// ---- embeddings ----
template <typename T>
struct EmbeddingActs {
  std::vector<int64_t> ids, types, positions;  // (N)
  std::vector<T> sum, normed, dropped;         // (N, E): word + type (+ position); norm; dropout
  NormActs<T> norm;
  int64_t chunk_rows = 0;  // inference: rows per pass (kept buffers (chunk, E)); 0: all N at once
};
// out (N, H) = project(dropout(norm(word[ids] + type[types] + position[start + t]))). types may be
// null (all 0). Sinusoidal positions are added from librope's exact table; RoPE adds nothing here.
// out16 (N, H), when given: out rounded to bf16 too (Bf16Handoff), by the norm where out is its output
// (no dropout, no projection), else in a pass of its own.
template <typename T>
void embeddings_forward(const RoFormerConfig& c, T* out, EmbeddingActs<T>& a, const EmbeddingParams<T>& p,
                        const int64_t* ids, const int64_t* types, int64_t B, int64_t T_, int64_t start,
                        const Dropout& d, uint16_t* out16 = nullptr);
// Gradients of the tables (the padding row gets none, as nn.Embedding(padding_idx)) from dout (N, H).
template <typename T>
void embeddings_backward(const RoFormerConfig& c, const EmbeddingParams<T>& g, const T* dout, const EmbeddingActs<T>& a,
                         const EmbeddingParams<T>& p, const Dropout& d, Scratch<T>& s);

// Additive sinusoidal positions start .. start + count − 1, (count, E): the paper's eq. 4 table
// scaled by 1/√E. Vaswani et al. multiply the embeddings by √d_model before adding the table; with
// the embedding LayerNorm that follows, scaling the table by 1/√E is the same network, and keeps the
// positions from drowning token embeddings initialised at N(0, 0.02²).
std::vector<float> sinusoidal_positions(const RoFormerConfig& c, int64_t start, int64_t count);

// ---- attention ----
// The librope configuration of a model's RoPE: head_dim wide, base rope_theta, its layout, scaling.
rope_config rope_settings(const RoFormerConfig& c);
// The linear-attention shape of a model for (B, T) at position start (attention_type linear/performer).
ops::LinearAttentionShape linear_attention_shape(const RoFormerConfig& c, int64_t B, int64_t T, int64_t start);
// The fixed FAVOR+ features of layer l, (performer_features, head_dim).
template <typename T>
std::vector<T> performer_features(const RoFormerConfig& c, int64_t layer);

// Keys and values of one attention layer for decoding, batched: (B, capacity, H) each, already
// rotated; rows [0, length) are filled. Linear attention keeps its recurrent state instead.
template <typename T>
struct KVCache {
  int64_t B = 0, capacity = 0, length = 0;
  std::vector<T> k, v;                     // (B, capacity, H)
  // A self-attention cache in bf16 (fp32 models, softmax attention): k16 and v16 (B, n, capacity, D),
  // head-major so that a decoding step streams each head's keys, hold the keys and values as bfloat16
  // bits, rounded once as they are appended, and k and v stay empty.
  // A decoding step reads them widened in its kernel (half the bytes of an fp32 cache); any other feed
  // widens the rows it attends over first. Every read sees the same rounded values, so a sequence
  // decodes alike in one feed or in chunks, alone or beside others.
  bool bf16 = false;
  std::vector<uint16_t> k16, v16;
  ops::LinearAttentionState<T> linear;     // linear / performer attention
  // Step-level batching (Generator::feed_rows), set for one call: batch row b of the call is cache row
  // rows[b], whose new tokens start at position positions[rows[b]] (each row at its own length); the
  // caller advances positions after the last layer. Null: every row at `length` (softmax attention only).
  const int64_t* rows = nullptr;
  const int64_t* positions = nullptr;
  // With rows: the call is one row of its tokens, count_rows rows one after another, row b's tokens
  // [starts[b], starts[b + 1]) (count_rows + 1 entries; each row's prompt at once). Null: every row of
  // the call holds its T tokens.
  const int64_t* starts = nullptr;
  int64_t count_rows = 0;
  // A cross-attention cache over a padded memory (decoding): cache row r holds lengths[r] real keys,
  // its first ones; the rest is padding no query sees (each source's length, without a key mask). Null:
  // every row holds Tk.
  const int64_t* lengths = nullptr;
};

// What a call of the attention block sees besides its input: the layer's fixed state (rotation,
// FAVOR+ features) and this call's mask and dropout.
template <typename T>
struct AttentionContext {
  const RoFormerConfig* config = nullptr;
  const rope::Plan* rope = nullptr;    // null: no rotation (other position encodings)
  const T* favor = nullptr;            // performer: (features, D)
  int64_t layer = 0;                   // dropout sites 1 + 3l, 2 + 3l
  bool causal = false;                 // key j visible from query t iff j <= start + t
  const int64_t* key_mask = nullptr;   // (B, Tk) 1 real / 0 padding, or null
  const int64_t* row_limit = nullptr;  // (B, T) prefix limits (UniLM), or null
  Dropout dropout;
  // What softmax attention keeps in AttentionActs::att for the backward: the probabilities (B, n, T, Tk)
  // (also the attention maps), two statistics per row (memory linear in T), or nothing (inference:
  // each thread holds one tile of rows).
  ops::AttentionSaved saved = ops::AttentionSaved::probabilities;
  // Inference in reduced precision: attention's two products with bf16 operands (ops::AttentionShape).
  bool bf16_products = false;
};

template <typename T>
struct AttentionActs {
  std::vector<T> q, k, v, ctx, sum;  // (N, H); q, k (v) after RoPE; sum = residual + output dense
  std::vector<T> qkv;                // (N, 3H): a packed qkv layer's output, before the split
  std::vector<T> att;                // softmax: (B, n, T, Tk) probabilities or (B, n, T, 2) row statistics
  std::vector<T> saved;              // linear attention: (B, T, n, 2F + 2)
  // bf16 training: the block input and ctx as the q/k/v and output denses read them (N, H), rounded
  // once in the forward (x16 by the block that wrote x, with Bf16Handoff) and read again by their
  // backward; empty otherwise. Inference in bf16: x16 as the block that wrote x rounded it, and ctx16
  // a pass of rows' context (chunk_rows, H).
  std::vector<uint16_t> x16, ctx16;
  NormActs<T> norm;
  // Inference: the packed q/k/v product and the output dense + norm run over this many rows at a
  // time (qkv (chunk, 3H), sum (chunk, H)), and softmax attention writes its context over q, which
  // nothing reads again (ctx stays empty); 0: all N rows at once, every buffer kept for the backward.
  int64_t chunk_rows = 0;
};

// Self-attention sub-layer (Tk = T, or with a cache, past + T): out (N, H) = norm(x + dropout(
// attend(q(x), k(x), v(x)) · Woᵀ)), queries at positions start .. start + T − 1. With a cache, the
// new keys and values are appended at cache.length (= start) and the queries attend over the whole
// cache; without one, the block keeps what its backward needs. bf16: its input and output in bf16
// (Bf16Handoff; the q/k/v denses read a.x16).
template <typename T>
void self_attention_forward(T* out, AttentionActs<T>& a, const AttentionParams<T>& p, const AttentionContext<T>& ctx,
                            const T* x, int64_t B, int64_t T_, int64_t start, KVCache<T>* cache = nullptr,
                            const Bf16Handoff& bf16 = {});
// dx (N, H) written from dout (N, H); parameter gradients accumulated.
template <typename T>
void self_attention_backward(T* dx, const AttentionParams<T>& g, const T* dout, const AttentionActs<T>& a,
                             const AttentionParams<T>& p, const AttentionContext<T>& ctx, const T* x, int64_t B,
                             int64_t T_, Scratch<T>& s);

// Cross-attention sub-layer: queries from x (B, T, H) over keys and values from memory (B, Tk, H),
// Tk independent of T. Softmax only. ctx.rope, when set, rotates queries at 0..T−1 and keys at
// 0..Tk−1 (off by default in encoder-decoders: two sequences' positions are not comparable). With a
// cache, keys and values are computed from memory once (cache.length == 0) and reused; a cache with
// rows or lengths (KVCache) is a padded memory that decoding reads row by row, each over its own keys.
// out16 (N, H), when given: out rounded to bf16 too (Bf16Handoff::out16).
template <typename T>
void cross_attention_forward(T* out, AttentionActs<T>& a, const AttentionParams<T>& p, const AttentionContext<T>& ctx,
                             const T* x, const T* memory, int64_t B, int64_t T_, int64_t Tk,
                             KVCache<T>* cache = nullptr, uint16_t* out16 = nullptr);
// The keys and values (B, Tk, H) each of a memory (B, Tk, H), rotated when ctx.rope is set: what a
// cross-attention cache holds.
template <typename T>
void cross_attention_memory(std::vector<T>& k, std::vector<T>& v, const AttentionParams<T>& p,
                            const AttentionContext<T>& ctx, const T* memory, int64_t B, int64_t Tk);
// dx (B, T, H) written; dmemory (B, Tk, H) accumulated.
template <typename T>
void cross_attention_backward(T* dx, T* dmemory, const AttentionParams<T>& g, const T* dout, const AttentionActs<T>& a,
                              const AttentionParams<T>& p, const AttentionContext<T>& ctx, const T* x, const T* memory,
                              int64_t B, int64_t T_, int64_t Tk, Scratch<T>& s);

// ---- feed-forward ----
template <typename T>
struct FeedForwardActs {
  std::vector<T> pre, act, sum;  // (N, I), (N, I), (N, H) residual + output dense
  // bf16 training (p.out.w16): act is kept only as the bf16 values the output dense reads, forward
  // and backward alike (the same results as act rounded there, in half the memory); act stays empty.
  // Inference in bf16: the input dense writes act16 (chunk_rows, I) alone, for the output dense.
  std::vector<uint16_t> act16;   // (N, I)
  std::vector<uint16_t> slope16; // (N, I): act'(pre) in bf16, what the backward multiplies by (bf16 training);
                                 // pre stays empty
  std::vector<uint16_t> x16;     // (N, H): the input as the input dense reads it in bf16 (written by the
                                 // block that wrote x, with Bf16Handoff), likewise
  NormActs<T> norm;
  int64_t chunk_rows = 0;        // inference: rows per pass (pre, act (chunk, I)); 0: all N at once
};
// out (N, H) = norm(x + dropout(act(x·W1ᵀ + b1)·W2ᵀ + b2)); dropout site 3 + 3·layer. bf16: its input
// and output in bf16 (Bf16Handoff; the input dense reads a.x16).
template <typename T>
void feed_forward_forward(const RoFormerConfig& c, T* out, FeedForwardActs<T>& a, const FeedForwardParams<T>& p,
                          const T* x, int64_t N, int64_t layer, const Dropout& d, const Bf16Handoff& bf16 = {});
template <typename T>
void feed_forward_backward(const RoFormerConfig& c, T* dx, const FeedForwardParams<T>& g, const T* dout,
                           const FeedForwardActs<T>& a, const FeedForwardParams<T>& p, const T* x, int64_t N,
                           int64_t layer, const Dropout& d, Scratch<T>& s);

// ---- heads ----
template <typename T>
struct MlmHeadActs {
  std::vector<T> dense, act, normed;  // (N, E)
  NormActs<T> norm;
};
// logits (N, V) from h (N, H).
template <typename T>
void mlm_head_forward(const RoFormerConfig& c, T* logits, MlmHeadActs<T>& a, const MlmHeadParams<T>& p, const T* h,
                      int64_t N);
// dh (N, H) written from dlogits (N, V); g.decoder_w (the word embeddings' gradient) accumulated.
template <typename T>
void mlm_head_backward(const RoFormerConfig& c, T* dh, const MlmHeadParams<T>& g, const T* dlogits,
                       const MlmHeadActs<T>& a, const MlmHeadParams<T>& p, const T* h, int64_t N, Scratch<T>& s);

template <typename T>
struct PoolerActs {
  std::vector<T> cls, out;  // (B, H) the first token's state; the pooled output
};
// out (B, H) = act(h[:, 0]·Wᵀ + b) from h (B, T, H).
template <typename T>
void pooler_forward(const RoFormerConfig& c, PoolerActs<T>& a, const PoolerParams<T>& p, const T* h, int64_t B,
                    int64_t T_);
// dh (B, T, H): rows t = 0 accumulated from dout (B, H).
template <typename T>
void pooler_backward(const RoFormerConfig& c, T* dh, const PoolerParams<T>& g, const T* dout, const PoolerActs<T>& a,
                     const PoolerParams<T>& p, int64_t B, int64_t T_);

// ---- the pieces the task heads (model/head.h) are made of ----
// out (N, OC) = x (N, IC)·Wᵀ + b as every block runs a dense layer: in bf16 products when the model
// trains in bf16 (p.w16), else on the arena (heads are never packed).
template <typename T>
void dense_forward(T* out, const T* x, const LinearParams<T>& p, int64_t N, int64_t IC, int64_t OC);
// dx (N, IC) WRITTEN (dx may be null); g.w, g.b accumulated.
template <typename T>
void dense_backward(T* dx, const LinearParams<T>& g, const T* dout, const T* x, const LinearParams<T>& p, int64_t N,
                    int64_t IC, int64_t OC);
// x (count) = dropout(x) in place at hidden dropout site `site` of d, element 0 being mask counter
// `first`; the backward applies the same mask to the gradient (dx and dy may alias).
template <typename T>
void head_dropout_forward(T* x, int64_t count, const Dropout& d, int64_t site, uint64_t first);
template <typename T>
void head_dropout_backward(T* dx, const T* dy, int64_t count, const Dropout& d, int64_t site, uint64_t first);

}  // namespace model
