// Multi-head scaled dot-product attention with a key padding mask and an optional causal mask.
// Queries (B, T) attend over keys (B, Tk): Tk = T for self-attention over one sequence, any Tk for
// cross-attention, and past + T for decoding with a key/value cache, where query t sits at position
// q_start + t of the keys and k, v rows are strided by the cache's capacity.
// RoPE is not applied here: the caller rotates q and k (and v with HF's rotary_value) with librope
// before the forward, and rotates dq, dk (dv) back with ROPE_BACKWARD after the backward.
//
// Masked scores get −FLT_MAX added, as Hugging Face adds finfo(float32).min: a row whose keys are all
// masked attends uniformly instead of producing NaN. Training keeps, in `saved`, either the
// probabilities (B, H, T, Tk) — the attention maps — or only two statistics per query row, from which
// the backward recomputes the probabilities (memory linear in T: FlashAttention's recomputation);
// inference passes no `saved`. From 16 query rows on, inference and row statistics run
// flash_attention.h's fused kernels (fp32, or bf16 products on AVX512-BF16): the forward, and, given
// the forward's output, the backward, attention dropout included. Otherwise (fp64, fewer rows, kept
// probabilities) blocks of query rows run over all their keys, and the backward remakes each block of
// probabilities from the row statistics bit for bit as the forward made them.
// (batch, head) pairs run in parallel on OpenMP, each with single-threaded products (oneDNN's or
// OpenBLAS's sgemm in fp32 by shape, BLAS in fp64); blocks of query rows skip the key columns none of
// their rows can see (the causal upper triangle, trailing padding), and the backward finds each row's
// extent from att, so it must get the forward's att.
#pragma once

#include <cstdint>

namespace ops {

// What a forward keeps for its backward in `saved` (attention_saved_size elements).
enum class AttentionSaved {
  none,           // inference: no backward, no buffer
  probabilities,  // (B, H, T, Tk) softmax probabilities: the attention maps; memory quadratic in T
  row_stats,      // (B, H, T, 2) each row's largest visible score (q·kᵀ/√D) and 1 / Σ exp(score − largest); the
                  // backward recomputes q·kᵀ once more per block (about a sixth more products)
};

struct AttentionShape {
  int64_t B, T, H, D;  // batch, query tokens, heads, head dim; q, out are (B, T, H·D)
  bool causal;         // key s is visible from query t only if s <= q_start + t
  // Dropout on the probabilities (HF attention_probs_dropout_prob), with a mask regenerated from
  // the seed in the backward; 0 = none.
  double dropout_p = 0;
  uint64_t dropout_seed = 0;
  // Optional (B, T) prefix limits: key s is visible from query t only if s < row_limit[b, t]. UniLM's
  // seq2seq mask (RoFormer-Sim) is one: cumsum(token_type) is non-decreasing, so the keys a query
  // may see always form a prefix.
  const int64_t* row_limit = nullptr;
  int64_t Tk = 0;         // keys per batch row (0: T); k, v are (B, kv_stride, H·D), rows [0, Tk) used
  int64_t kv_stride = 0;  // key rows between batch rows of k and v (0: Tk), e.g. a cache's capacity
  int64_t q_start = 0;    // key position of query 0 (the causal diagonal's offset), e.g. the cache's past
  // Global index of batch row 0: dropout masks are keyed by (seed, global row, head), so they do not
  // depend on how a batch is split into micro-batches or across processes.
  int64_t dropout_row0 = 0;
  // fp32 only: every product, q·kᵀ and p·v and in the backward pᵀ·dout, dout·vᵀ, ds·k and dsᵀ·q,
  // with operands rounded to bf16 (nearest even) and fp32 accumulation; scores, softmax, dropout,
  // outputs and gradients stay fp32 (bf16 inference and bf16 mixed-precision training). The backward
  // must be told what the forward ran. Needs a CPU that multiplies bf16 natively (packed_linear.h's
  // bf16_is_native); several times the fp32 products' speed there at these small shapes.
  bool bf16_products = false;
  AttentionSaved saved = AttentionSaved::probabilities;
  int64_t keys() const { return Tk > 0 ? Tk : T; }
  int64_t key_stride() const { return kv_stride > 0 ? kv_stride : keys(); }
};

// Elements of a forward's `saved` buffer: B·H·T·Tk probabilities, B·H·T·2 row statistics or none.
int64_t attention_saved_size(const AttentionShape& s);

// out (B, T, H·D) = softmax(q·kᵀ/√D + mask)·v per head; saved (attention_saved_size) written with
// what s.saved names, or null: nothing kept. From 16 query rows on, inference and row statistics run
// flash_attention_forward in fp32, or flash_attention_forward_bf16 with bf16 products on a CPU with
// AVX512-BF16 (equal up to rounding; attention dropout with the same mask). Otherwise, unless it keeps the
// probabilities, each thread holds 64 query rows × Tk at a time. out may be q itself (inference: the
// context over the queries, each block reading them first). key_mask (B, Tk): 1 = real token, 0 = padding,
// or null; row_limit (B, T). out16 (B, T, H·D), when given (fp32 only): out rounded to bf16 as well
// (linear.h's round_to_bf16 bits), for a bf16 product that reads it next: written with each row by the
// bf16 fused kernel, else in a pass at the end. A saved buffer with AttentionSaved::none, or fp64
// bf16_products or out16: invalid_argument.
template <typename T>
void attention_forward(T* out, T* saved, const T* q, const T* k, const T* v, const int64_t* key_mask,
                       const AttentionShape& s, uint16_t* out16 = nullptr);

// Decoding: one new query per batch row, each over keys of its own. Row b's query is q (B, H·D)'s
// row b; its keys are rows [0, keys[b]) of cache row kv_rows[b] (b when kv_rows is null) of k and v
// (cache rows kv_stride key rows apart, H·D each). No masks, no dropout, nothing saved: inference.
struct DecodeAttentionShape {
  int64_t B, H, D;
  const int64_t* keys;               // (B) at least 1 each
  const int64_t* kv_rows = nullptr;  // (B) or null
  int64_t kv_stride = 0;             // at least the most keys of a row
  // k, v head-major, (cache rows, H, kv_stride, D): each head's keys D apart, read head by head;
  // false: (cache rows, kv_stride, H·D), a row's heads read together, key after key (each key's H·D
  // values one run), in groups of heads when there are fewer rows than threads. Either way a row's
  // cache is read as sequential runs, and both give the same bits.
  bool heads_major = false;
};

// out (B, H·D) = softmax(q·kᵀ/√D)·v per row and head: attention_forward's result for T = 1 and
// q_start = keys[b] − 1 (causal), up to rounding, but in one parallel region over rows (and heads) with
// the scores in a thread's buffer, instead of two small products per row and head: every row of a
// decoding step (beams, or a server's slots at positions of their own, model::Generator) at once.
template <typename T>
void attention_decode_forward(T* out, const T* q, const T* k, const T* v, const DecodeAttentionShape& s);

// The same over a bf16 key/value cache: k and v hold bfloat16 bits, widened to fp32 exactly as they
// are read, so the result equals the fp32 kernel's over the widened cache bit for bit, with half the
// bytes read. fp32 queries and output.
void attention_decode_forward(float* out, const float* q, const uint16_t* k, const uint16_t* v,
                              const DecodeAttentionShape& s);

// dq (B, T, H·D), dk, dv (B, kv_stride, H·D) += gradients given dout (B, T, H·D) and the forward's
// saved buffer, shape and key_mask (read with row statistics; the probabilities carry the mask).
// out (B, T, H·D), the forward's output, or null: given it, row statistics from 16 query rows on run
// the fused backward (flash_attention_backward, or flash_attention_backward_bf16 for
// bf16 products on AVX512-BF16), as the forward ran the fused forward; otherwise each block of 64 rows
// is remade as the forward made it, bit for bit when the forward was the per-block path.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* saved, const T* q, const T* k,
                        const T* v, const int64_t* key_mask, const AttentionShape& s, const T* out = nullptr);

}  // namespace ops
