// LayerNorm (BERT/RoFormer, biased variance) and RMSNorm (RoFormer-V2: optionally parameter-free).
// llm.c conventions: forward writes, backward accumulates (+=) into the gradients it is given.
// bf16 training: each forward can also write its output rounded to bf16 (out16, (N, C), written),
// each row as vmath.h's bf16_from_f32 rounds it (what linear.h's round_to_bf16 gives, bit for bit),
// in the pass that writes out: the copy the next dense reads. fp32 only (out16 with T = double throws
// std::invalid_argument); null: out alone, as without it.
#pragma once

#include <cstdint>

namespace ops {

// out (N, C) = (inp − mean) · rstd · weight + bias; mean, rstd (N) are kept for the backward.
// weight, bias (C); bias may be null.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                       int64_t C, double eps, uint16_t* out16 = nullptr);

// inp (N, C) += residual (N, C), then out = layernorm_forward(inp): a post-LN block's residual add
// fused with its norm, in one pass over the rows (the same values as adding first). inp is written:
// it is the sum the backward reads.
template <typename T>
void residual_layernorm_forward(T* out, T* mean, T* rstd, T* inp, const T* residual, const T* weight, const T* bias,
                                int64_t N, int64_t C, double eps, uint16_t* out16 = nullptr);

// dinp (N, C), dweight (C), dbias (C, may be null) += the gradients given dout (N, C).
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C);

// out (N, C) = inp · rrms · weight, rrms (N) = 1 / sqrt(mean(inp²) + eps); weight (C) may be null
// (the parameter-free RMS norm of RoFormer-V2).
template <typename T>
void rmsnorm_forward(T* out, T* rrms, const T* inp, const T* weight, int64_t N, int64_t C, double eps,
                     uint16_t* out16 = nullptr);

// inp (N, C) += residual (N, C), then out = rmsnorm_forward(inp), as residual_layernorm_forward.
template <typename T>
void residual_rmsnorm_forward(T* out, T* rrms, T* inp, const T* residual, const T* weight, int64_t N, int64_t C,
                              double eps, uint16_t* out16 = nullptr);

// dinp (N, C), dweight (C, ignored when weight is null) += the gradients given dout (N, C).
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rrms,
                      int64_t N, int64_t C);

}  // namespace ops
