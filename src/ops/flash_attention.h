// Softmax attention as fused kernels in FlashAttention-2's shape, fp32: per (batch, head) and block of
// query rows, a loop over tiles of keys computes the tile's scores with a register-blocked SIMD product
// (Highway, runtime dispatch: AVX-512, AVX2, SSE4, scalar), masks them in the tile, folds them into
// each row's running maximum and sum (online softmax, fp32) and adds their probabilities times the
// tile's values into the block's output rows, which are divided by the sums at the end. No (T, Tk)
// or (rows, Tk) matrix exists: a thread holds its block's queries, one tile of scores and the block's
// outputs (about 50 KB at head dim 64), and from 1,024 queries and keys a head's keys and values
// packed (2·Tk·D floats: 4 MiB at 8,192 keys of 64), memory linear in Tk. The backward has the same shape, the
// probabilities remade per tile from each row's statistics (m, 1/l), which the forward writes for it.
// Semantics are attention_forward's (attention.h) with fp32 products: the same causal mask (with
// q_start), UniLM prefix limits (row_limit), key padding mask, cross-attention (Tk) and cache layout
// (kv_stride), attention dropout with the same counter-based mask (regenerated per tile, in the
// backward too), and a row that sees no key attends uniformly over all Tk keys, as Hugging Face's
// finfo.min mask gives. Results equal attention_forward's and attention_backward's per-
// block path up to fp32 rounding (the sums are accumulated in another order), not bit for bit. A
// bf16-product variant of both (flash_attention_forward_bf16, flash_attention_backward_bf16) serves
// bf16 inference and training on CPUs with AVX512-BF16 (their products on AMX tiles where asked for:
// flash_attention_amx_enabled).
#pragma once

#include <cstdint>

#include "attention.h"

namespace ops {

// out (B, T, H·D) written = softmax(q·kᵀ/√D + mask)·v per head, for q (B, T, H·D) and k, v
// (B, kv_stride, H·D) with rows [0, Tk) used; key_mask (B, Tk): 1 = real token, 0 = padding, or null
// (all real). out may be q itself: each block of query rows is read before its output rows are
// written. For training (s.saved = row_stats) stats (B, H, T, 2) written with each row's largest
// visible score and 1/Σexp ((0, 1) for a row that sees no key), null otherwise. Throws
// std::invalid_argument unless flash_attention_applies(s) and stats is given exactly when s keeps row
// statistics.
void flash_attention_forward(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                             const AttentionShape& s, float* stats = nullptr);

// Its backward: dq (B, T, H·D), dk, dv (B, kv_stride, H·D) += the gradients given dout, the forward's
// out and stats (FlashAttention-2's: the probabilities remade per tile, never kept; Δ = rowsum(dO ⊙ out)).
// Equal to attention_backward's per-block fp32 path up to rounding, for stats from either forward.
// Throws std::invalid_argument unless flash_attention_applies(s) with s.saved = row_stats.
void flash_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* stats,
                              const float* q, const float* k, const float* v, const int64_t* key_mask,
                              const AttentionShape& s);

// Whether flash_attention_forward (and, with row statistics, flash_attention_backward) take s: fp32
// products, nothing saved (inference) or row statistics (training), fewer than 2^31 keys. attention_forward<float> and attention_backward<float> (given the forward's output) run such
// shapes of 16 query rows or more through them (fewer leave most of their vector lanes, which hold
// query rows, idle).
bool flash_attention_applies(const AttentionShape& s);

// The same forward with bf16 products (AttentionShape::bf16_products: queries times 1/√D, keys, values
// and the probabilities rounded to bf16, fp32 accumulation; softmax and outputs fp32) on AVX512-BF16's
// dot products (flash_attention_bf16.cc). Its results equal the per-block bf16 path's
// (attention_forward_blocks with bf16_products) up to rounding: that path rounds the normalised
// probabilities, this one exp(score − running maximum) before the final division. The same arguments,
// and for training (s.saved = row_stats) stats (B, H, T, 2) written with each row's largest visible
// score and 1/Σexp, null otherwise; throws std::invalid_argument unless flash_attention_bf16_applies(s)
// and stats is given exactly when s keeps row statistics. out16 (B, T, H·D), when given: out rounded to
// bf16 as well (vmath.h's bf16_from_f32 bits), each row as it is written, for the product that reads it next.
void flash_attention_forward_bf16(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                                  const AttentionShape& s, float* stats = nullptr, uint16_t* out16 = nullptr);

// Its backward, fused the same way (FlashAttention-2's: the probabilities remade per tile from the
// row statistics, never kept; Δ = rowsum(dO ⊙ out) from the forward's output): dq (B, T, H·D), dk, dv
// (B, kv_stride, H·D) += the gradients given dout, the forward's out and stats, with the per-block bf16
// backward's roundings (q, k, v, dout, the probabilities and the scaled score gradients in bf16, fp32
// accumulation). Equal to attention_backward's bf16 path up to rounding, for stats from either forward.
// Throws std::invalid_argument unless flash_attention_bf16_applies(s) with s.saved = row_stats.
void flash_attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                   const float* stats, const float* q, const float* k, const float* v,
                                   const int64_t* key_mask, const AttentionShape& s);

// The products the bf16 kernels take on (the forward's scores and p·v; the backward's scores, dP,
// dV, dK and dQ): AVX512-BF16's dot products (the default), AMX-BF16's tiles (Sapphire Rapids and
// later; where flash_attention_amx_enabled()), or, for tests of the tile kernels' layouts and padding
// on CPUs without AMX, the same tile kernels with their tile operations emulated in scalar code
// (slow): as the SDM gives TDPBF16PS (each pair's even product added first), or in VDPBF16PS's order
// (odd first), which gives the dot products' bits.
enum class Bf16Products { dot, amx, amx_emulated, amx_emulated_in_dot_order };

// flash_attention_forward_bf16 on the products named, to compare them: the same arguments and checks;
// Bf16Products::amx throws std::invalid_argument unless flash_attention_amx_available(). Each agrees
// with the others up to the order of fp32 sums.
void flash_attention_forward_bf16_with(Bf16Products products, float* out, const float* q, const float* k,
                                       const float* v, const int64_t* key_mask, const AttentionShape& s,
                                       float* stats = nullptr, uint16_t* out16 = nullptr);

// flash_attention_backward_bf16 on the products named, the same way.
void flash_attention_backward_bf16_with(Bf16Products products, float* dq, float* dk, float* dv, const float* dout,
                                        const float* out, const float* stats, const float* q, const float* k,
                                        const float* v, const int64_t* key_mask, const AttentionShape& s);

// Whether the CPU and OS let the bf16 kernels take their products on AMX tiles: CPUID's AMX-TILE and
// AMX-BF16 beside AVX512-BF16, and Linux granting the process the tile data state (arch_prctl).
bool flash_attention_amx_available();

// Whether flash_attention_forward_bf16 and flash_attention_backward_bf16 do: where AMX is available
// and the environment sets ROFORMER_AMX_ATTENTION=1 (read once). Off by default until the tile path
// has been validated and timed on AMX hardware; AVX512-BF16's dot products stay the default everywhere.
bool flash_attention_amx_enabled();

// Whether flash_attention_forward_bf16 takes s: bf16 products, nothing saved (inference) or row
// statistics (training; the backward too), fewer than 2^31 keys, on a CPU with AVX512-BF16
// (never true elsewhere). attention_forward<float> and attention_backward<float> (given the forward's
// output) run such shapes of 16 query rows or more through them.
bool flash_attention_bf16_applies(const AttentionShape& s);

// attention_forward's fp32 inference without the fused kernel: per block of 64 query rows, the scores'
// product (oneDNN's or OpenBLAS's sgemm), softmax and p·v product, as attention_forward ran it before
// (attention.cc), to compare the two; with bf16_products, the per-block bf16 path (oneDNN's bf16
// matmuls, attention_bf16.h) that flash_attention_forward_bf16 replaces. Any shape that saves nothing
// (attention dropout too); std::invalid_argument otherwise.
void attention_forward_blocks(float* out, const float* q, const float* k, const float* v, const int64_t* key_mask,
                              const AttentionShape& s);

}  // namespace ops
