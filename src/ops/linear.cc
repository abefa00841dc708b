// Linear forward/backward on CBLAS (OpenBLAS, OpenMP build: one thread runtime with the rest).
#include "linear.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "blas.h"

namespace ops {
namespace {

// Below this many elements a loop stays on the calling thread: a parallel region costs more.
constexpr int64_t kParallelMin = 1 << 15;

}  // namespace

template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t IC, int64_t OC) {
  T beta = 0;
  if (bias) {
#pragma omp parallel for schedule(static) if (N * OC >= kParallelMin)
    for (int64_t n = 0; n < N; ++n) std::copy(bias, bias + OC, out + n * OC);
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
    // Column sums of dout, rows in order for every column (so the result does not depend on the
    // thread count): each thread takes a band of columns and walks the rows, reading a contiguous
    // segment of each into a band of running sums, instead of striding down one column at a time.
    const bool parallel = N * OC >= kParallelMin;
    const int64_t threads = parallel ? omp_get_max_threads() : 1;
    const int64_t band = std::max<int64_t>(16, ((OC + threads - 1) / threads + 15) & ~int64_t{15});
    const int64_t bands = (OC + band - 1) / band;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < bands; ++i) {
      const int64_t o0 = i * band, width = std::min(OC, o0 + band) - o0;
      std::vector<T> sum(width, T(0));
      for (int64_t n = 0; n < N; ++n) {
        const T* row = dout + n * OC + o0;
        for (int64_t o = 0; o < width; ++o) sum[o] += row[o];
      }
      for (int64_t o = 0; o < width; ++o) dbias[o0 + o] += sum[o];
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
