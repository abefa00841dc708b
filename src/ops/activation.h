// Element-wise activations: GELU (exact erf form, as torch.nn.functional.gelu and HF "gelu") and
// ReLU (RoFormer-V2). Forward writes; backward accumulates, or overwrites with Grad::overwrite.
// bf16 training keeps an activation's output and its slope in bf16 instead of its input.
#pragma once

#include <cstdint>

#include "gradient.h"

namespace ops {

// out (n) = 0.5·x·(1 + erf(x/√2)).
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);
// dinp (n) += dout · (Φ(x) + x·φ(x)) (= with Grad::overwrite).
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, Grad mode = Grad::accumulate);

// out (n) = max(x, 0).
template <typename T>
void relu_forward(T* out, const T* inp, int64_t n);
// dinp (n) += dout where x > 0 (with Grad::overwrite: dinp = dout there, 0 elsewhere).
template <typename T>
void relu_backward(T* dinp, const T* inp, const T* dout, int64_t n, Grad mode = Grad::accumulate);

// bf16 training: out16 (n) = act(x) and slope16 (n) = act'(x), each rounded to bf16 as vmath.h's
// bf16_from_f32 rounds (the fp32 values gelu_forward writes and gelu_backward multiplies dout by,
// bit for bit before the rounding). The output dense reads out16; its backward multiplies the
// gradient by slope16 (linear.h's linear_backward_bf16_with_slope), so neither x nor a second erf
// is needed. ReLU's slope is 1 where x > 0, else 0.
void gelu_forward_bf16(uint16_t* out16, uint16_t* slope16, const float* inp, int64_t n);
void relu_forward_bf16(uint16_t* out16, uint16_t* slope16, const float* inp, int64_t n);

}  // namespace ops
