// GELU and ReLU, forward and backward (see activation.h).
#include "activation.h"

#include <cmath>
#include <numbers>

namespace ops {

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  constexpr double kInvSqrt2 = 0.70710678118654752440;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = static_cast<T>(0.5 * x * (1.0 + std::erf(x * kInvSqrt2)));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  constexpr double kInvSqrt2 = 0.70710678118654752440;
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    const double cdf = 0.5 * (1.0 + std::erf(x * kInvSqrt2));
    const double pdf = inv_sqrt_2pi * std::exp(-0.5 * x * x);
    dinp[i] += static_cast<T>(dout[i] * (cdf + x * pdf));
  }
}

template <typename T>
void relu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
}

template <typename T>
void relu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (inp[i] > T(0)) dinp[i] += dout[i];
  }
}

#define OPS_INSTANTIATE(T)                                                  \
  template void gelu_forward<T>(T*, const T*, int64_t);                      \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t);           \
  template void relu_forward<T>(T*, const T*, int64_t);                      \
  template void relu_backward<T>(T*, const T*, const T*, int64_t);
OPS_INSTANTIATE(float)
OPS_INSTANTIATE(double)
#undef OPS_INSTANTIATE

}  // namespace ops
