// Linear layer y = x·Wᵀ + b with PyTorch's weight layout W (out_features, in_features), on BLAS.
// Forward writes, backward accumulates.
#pragma once

#include <cstdint>

namespace ops {

// out (N, OC) = inp (N, IC) · weightᵀ (OC, IC) + bias (OC); bias may be null.
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t IC, int64_t OC);

// dinp (N, IC) += dout (N, OC) · weight (OC, IC); dweight (OC, IC) += doutᵀ · inp;
// dbias (OC) += Σ_n dout. Any of dinp, dbias may be null (not needed).
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t IC, int64_t OC);

}  // namespace ops
