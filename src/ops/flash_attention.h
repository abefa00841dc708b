// Softmax attention's inference forward as one fused kernel in FlashAttention-2's shape, fp32: per
// (batch, head) and block of query rows, a loop over tiles of keys computes the tile's scores with a
// register-blocked SIMD product (Highway, runtime dispatch), masks them in the tile, folds them into
// each row's running maximum and sum (online softmax, fp32) and adds their probabilities times the
// tile's values into the block's output rows, which are divided by the sums at the end. No (T, Tk)
// or (rows, Tk) matrix exists: a thread holds its block's queries, one tile of scores and the block's
// outputs (about 50 KB at head dim 64), whatever the lengths.
// Semantics are attention_forward's (attention.h) with AttentionSaved::none, no dropout and fp32
// products: the same causal mask (with q_start), UniLM prefix limits (row_limit), key padding mask,
// cross-attention (Tk) and cache layout (kv_stride), and a row that sees no key attends uniformly over
// all Tk keys, as Hugging Face's finfo.min mask gives. Results equal attention_forward's up to fp32
// rounding (the sums are accumulated in another order), not bit for bit.
#pragma once

#include <cstdint>

#include "attention.h"

namespace ops {

// out (B, T, H·D) written = softmax(q·kᵀ/√D + mask)·v per head, for q (B, T, H·D) and k, v
// (B, kv_stride, H·D) with rows [0, Tk) used; key_mask (B, Tk): 1 = real token, 0 = padding, or null
// (all real). out may be q itself: each block of query rows is read before its output rows are
// written. Throws std::invalid_argument unless s.saved is none, s.dropout_p is 0 and s.bf16_products is
// false (what attention_forward routes here).
void flash_attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                             const AttentionShape& s);

// Whether attention_forward runs s through flash_attention_forward: fp32 inference (nothing saved, no
// dropout, fp32 products).
bool flash_attention_applies(const AttentionShape& s);

}  // namespace ops
