// Linear forward/backward on CBLAS (OpenBLAS, OpenMP build: one thread runtime with the rest).
#include "linear.h"

#include "blas.h"

namespace ops {

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t IC, int64_t OC) {
  T beta = 0;
  if (bias) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t o = 0; o < OC; ++o) out[n * OC + o] = bias[o];
    }
    beta = 1;
  }
  gemm(false, true, N, OC, IC, T(1), inp, IC, weight, IC, beta, out, OC);  // (N, IC)·(OC, IC)ᵀ
}

template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t IC, int64_t OC) {
  if (dinp) gemm(false, false, N, IC, OC, T(1), dout, OC, weight, IC, T(1), dinp, IC);  // (N, OC)·(OC, IC)
  gemm(true, false, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dweight, IC);             // (N, OC)ᵀ·(N, IC)
  if (dbias) {
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < OC; ++o) {
      T sum = 0;
      for (int64_t n = 0; n < N; ++n) sum += dout[n * OC + o];
      dbias[o] += sum;
    }
  }
}

template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t,
                                     int64_t);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                     int64_t, int64_t);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                      int64_t, int64_t, int64_t);

}  // namespace ops
