// The RoFormer layer stack: one layer's forward and backward over the blocks of blocks.h, and what
// every layer of a model shares (the RoPE plan, FAVOR+ features, the attention contexts, UniLM's row
// limits). The forward pass (RoFormer::encode, roformer.cc) and cached decoding (Generator::feed,
// generate.cc) run the same layer_forward: decoding passes its caches and its position, the forward
// pass keeps the activations its backward needs.
//
// Shapes as in blocks.h: B batch rows, S new tokens per row at positions start .. start + S − 1,
// N = B·S, Tk memory tokens, H hidden size, L layers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/blocks.h"
#include "model/config.h"
#include "rope/rope.hpp"

namespace model {

// One layer's activations: what layer_backward needs from layer_forward.
template <typename T>
struct LayerActs {
  AttentionActs<T> attn;
  std::vector<T> mid;      // (N, H) the self-attention sub-layer's output, the next sub-layer's input
  AttentionActs<T> cross;
  std::vector<T> crossed;  // (N, H) with cross-attention: its output, the feed-forward's input
  FeedForwardActs<T> ffn;
};

// A decoder's cross-attention memory for one layer: the encoder's states, whose keys and values the
// layer computes (the forward pass), or a cache that holds them already (decoding: set_memory).
template <typename T>
struct CrossMemory {
  const T* states = nullptr;    // (B, Tk, H), or null with a filled cache
  int64_t Tk = 0;
  KVCache<T>* cache = nullptr;  // (B, Tk, H) keys and values, computed once per source
};

// What one forward or one decoding feed adds to the model's fixed attention state.
struct AttentionCall {
  const int64_t* key_mask = nullptr;     // (B, S) self-attention padding, 1 real / 0 padding, or null
  const int64_t* row_limit = nullptr;    // (B, S) UniLM prefix limits (unilm_row_limits), or null
  const int64_t* memory_mask = nullptr;  // (B, Tk) cross-attention padding, or null
  Dropout dropout;                       // off at inference
  ops::AttentionSaved saved = ops::AttentionSaved::probabilities;  // AttentionContext::saved; none: inference
  bool bf16_products = false;            // AttentionContext::bf16_products, self- and cross-attention alike
};

// What every layer of one model reads: the RoPE plan (RoPE models) and each layer's FAVOR+ features
// (performer), and the attention contexts built from them. A RoFormer holds one, and so does each
// Generator (with dynamic NTK its plan's frequencies stay fixed at the generator's capacity).
template <typename T>
class LayerStatics {
 public:
  explicit LayerStatics(const RoFormerConfig& c);  // c must outlive this
  // Dynamic NTK: the frequencies of a context of `length` tokens (the plan changes only when the
  // length does). Other scalings and position encodings ignore it.
  void set_length(int64_t length);
  const rope::Plan* rope() const { return rope_.get(); }
  // Layer l's self-attention: causal for a causal LM (not with UniLM's mask, which row_limit carries).
  AttentionContext<T> self_context(int64_t layer, const AttentionCall& call) const;
  // Layer l's cross-attention: dropout sites of layer L + l, not causal, over call.memory_mask, no
  // FAVOR+ (softmax only), rotated only with rotate_cross_attention.
  AttentionContext<T> cross_context(int64_t layer, const AttentionCall& call) const;

 private:
  const RoFormerConfig* c_;
  std::unique_ptr<rope::Plan> rope_;
  bool rope_dynamic_ = false;
  int64_t rope_length_ = -1;            // the length the dynamic-NTK frequencies are for
  std::vector<std::vector<T>> favor_;   // performer: L × (performer_features, D)
};

// UniLM's seq2seq mask (RoFormer-Sim): query t sees key j iff segment[j] <= segment[t], where
// segment = cumsum(type != 0) along the row, so the keys a query sees are a prefix. segment
// (B, stride) holds each row's segments of positions [0, start); those of the S new tokens (types
// (B, S), null: all 0) are appended at start, and limit (B, S) gets the length of the prefix each
// new token sees among the keys [0, start + S). A whole sequence is start = 0, stride ≥ S; decoding
// extends its rows feed by feed, and gets the whole sequence's limits when each feed ends a segment
// (a type-0 prefix fed at once, then any tokens of type ≠ 0).
void unilm_row_limits(int64_t* limit, int64_t* segment, int64_t stride, const int64_t* types, int64_t B, int64_t S,
                      int64_t start);

// One layer: out (N, H) = feed_forward(cross_attention(self_attention(x))) from x (N, H), the
// cross-attention with add_cross_attention only. The feed-forward's dropout and sites are self's. With
// a self-attention cache (decoding) the new keys and values are appended at cache.length = start and
// the queries attend over the whole cache; without one (the forward pass, start = 0), a keeps what
// layer_backward needs. out may alias x (only the self-attention sub-layer reads x). bf16 training:
// bf16.x16_written when x's producer wrote a.attn.x16, bf16.out16 where out goes in bf16 too
// (Bf16Handoff); inside the layer each sub-layer's norm writes the next one's bf16 input likewise.
template <typename T>
void layer_forward(T* out, LayerActs<T>& a, const LayerParams<T>& p, const AttentionContext<T>& self,
                   const AttentionContext<T>& cross, const T* x, int64_t B, int64_t S, int64_t start,
                   KVCache<T>* cache = nullptr, const CrossMemory<T>& memory = {}, const Bf16Handoff& bf16 = {});
// The backward of an uncached layer_forward: dx (N, H) written from dout (N, H); d_mid (N, H) is
// scratch; dmemory (B, Tk, H) accumulated with cross-attention (memory.states as in the forward); the
// parameter gradients g accumulated.
template <typename T>
void layer_backward(T* dx, T* d_mid, T* dmemory, const LayerParams<T>& g, const T* dout, const LayerActs<T>& a,
                    const LayerParams<T>& p, const AttentionContext<T>& self, const AttentionContext<T>& cross,
                    const T* x, const CrossMemory<T>& memory, int64_t B, int64_t S, Scratch<T>& s);

}  // namespace model
