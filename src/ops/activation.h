// Element-wise activations: GELU (exact erf form, as torch.nn.functional.gelu and HF "gelu") and
// ReLU (RoFormer-V2). Forward writes; backward accumulates, or overwrites with Grad::overwrite.
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

}  // namespace ops
