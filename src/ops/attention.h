// Multi-head scaled dot-product attention with a key padding mask and an optional causal mask.
// RoPE is not applied here: the caller rotates q and k (and v with HF's rotary_value) with librope
// before the forward, and rotates dq, dk (dv) back with ROPE_BACKWARD after the backward.
//
// Masked scores get −FLT_MAX added, as Hugging Face adds finfo(float32).min: a row whose keys are all
// masked attends uniformly instead of producing NaN. This first version keeps the probabilities
// (B, H, T, T) for the backward; a tiled (flash-style) version that does not is future work.
// (batch, head) pairs run in parallel on OpenMP, each with single-threaded BLAS calls; blocks of
// query rows skip the key columns none of their rows can see (the causal upper triangle, trailing
// padding), and the backward finds each row's extent from att, so it must get the forward's att.
#pragma once

#include <cstdint>

namespace ops {

struct AttentionShape {
  int64_t B, T, H, D;  // batch, tokens, heads, head dim; q, k, v, out are (B, T, H·D)
  bool causal;         // key s is visible from query t only if s <= t
  // Dropout on the probabilities (HF attention_probs_dropout_prob), with a mask regenerated from
  // the seed in the backward; 0 = none.
  double dropout_p = 0;
  uint64_t dropout_seed = 0;
  // Optional (B, T) prefix limits: key s is visible from query t only if s < row_limit[b, t]. UniLM's
  // seq2seq mask (RoFormer-Sim) is one: cumsum(token_type) is non-decreasing, so the keys a query
  // may see always form a prefix.
  const int64_t* row_limit = nullptr;
};

// out (B, T, H·D) = softmax(q·kᵀ/√D + mask)·v per head; att (B, H, T, T) keeps the probabilities.
// key_mask (B, T): 1 = real token, 0 = padding; may be null (all real).
template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, const int64_t* key_mask,
                       const AttentionShape& s);

// dq, dk, dv (B, T, H·D) += gradients given dout (B, T, H·D) and the forward's att.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k,
                        const T* v, const AttentionShape& s);

}  // namespace ops
