// LayerNorm and RMSNorm, forward and backward (see norm.h). Rows are independent: OpenMP over N.
// Statistics accumulate in double whatever T is, so fp32 rows of thousands of channels keep their
// precision. fp32 rows sum into 8 running partial sums combined in a fixed order (the loops
// vectorise, and the result does not depend on the thread count); fp64 keeps one running sum.
// The parameter gradients reduce over rows: each thread takes a band of channels and walks the
// rows in order, reading a contiguous segment of each (same sums as one channel at a time).
#include "norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace ops {
namespace {

constexpr int64_t kParallelMin = 1 << 15;  // elements below which a loop stays on one thread

// Running partial sums per row: 8 for fp32, 1 (the plain sequential sum) for fp64.
template <typename T>
constexpr int kSums = std::is_same_v<T, float> ? 8 : 1;

// Σ_{c < C} f(c) in double with K partial sums: sums[k] takes c ≡ k (mod K) up to the last whole
// group, the tail goes to sums[0..], and the partial sums combine pairwise in a fixed order.
template <int K, class F>
double row_sum(int64_t C, const F& f) {
  double s[K] = {};
  int64_t c = 0;
  for (; c + K <= C; c += K) {
    for (int k = 0; k < K; ++k) s[k] += f(c + k);
  }
  for (int k = 0; c < C; ++c, ++k) s[k] += f(c);
  for (int w = K / 2; w >= 1; w /= 2) {
    for (int k = 0; k < w; ++k) s[k] += s[k + w];
  }
  return s[0];
}

// Channel bands for the parameter-gradient reductions: about one per thread, 16-aligned.
struct Bands {
  Bands(int64_t N, int64_t C) : parallel(N * C >= kParallelMin) {
    const int64_t threads = parallel ? omp_get_max_threads() : 1;
    width = std::max<int64_t>(16, ((C + threads - 1) / threads + 15) & ~int64_t{15});
    count = (C + width - 1) / width;
  }
  bool parallel;
  int64_t width, count;
};

// One row of layernorm_forward.
template <typename T>
void layernorm_row(T* y, T* mean, T* rstd, const T* x, const T* weight, const T* bias, int64_t C, double eps) {
  constexpr int K = kSums<T>;
  const double m = row_sum<K>(C, [&](int64_t c) { return static_cast<double>(x[c]); }) / C;
  const double var = row_sum<K>(C, [&](int64_t c) { return (x[c] - m) * (x[c] - m); });
  const double s = 1.0 / std::sqrt(var / C + eps);
  if (bias) {
    for (int64_t c = 0; c < C; ++c) y[c] = static_cast<T>((x[c] - m) * s * weight[c] + bias[c]);
  } else {
    for (int64_t c = 0; c < C; ++c) y[c] = static_cast<T>((x[c] - m) * s * weight[c] + T(0));
  }
  *mean = static_cast<T>(m);
  *rstd = static_cast<T>(s);
}

// One row of rmsnorm_forward.
template <typename T>
void rmsnorm_row(T* y, T* rrms, const T* x, const T* weight, int64_t C, double eps) {
  constexpr int K = kSums<T>;
  const double sq = row_sum<K>(C, [&](int64_t c) { return static_cast<double>(x[c]) * x[c]; });
  const double r = 1.0 / std::sqrt(sq / C + eps);
  for (int64_t c = 0; c < C; ++c) y[c] = static_cast<T>(x[c] * r * (weight ? weight[c] : T(1)));
  *rrms = static_cast<T>(r);
}

template <typename T>
void add_row(T* x, const T* residual, int64_t C) {
  for (int64_t c = 0; c < C; ++c) x[c] += residual[c];
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                       int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C, eps);
}

template <typename T>
void residual_layernorm_forward(T* out, T* mean, T* rstd, T* inp, const T* residual, const T* weight, const T* bias,
                                int64_t N, int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    add_row(inp + n * C, residual + n * C, C);
    layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C, eps);
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  constexpr int K = kSums<T>;
  // dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) with g = dout · weight and x̂ the normalised input.
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    const T mu = mean[n];
    const double r = rstd[n];
    const double g_mean = row_sum<K>(C, [&](int64_t c) { return static_cast<double>(dy[c]) * weight[c]; }) / C;
    const double gx_mean =
        row_sum<K>(C, [&](int64_t c) { return static_cast<double>(dy[c]) * weight[c] * ((x[c] - mu) * r); }) / C;
    T* dx = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[c] - mu) * r;
      const double g = static_cast<double>(dy[c]) * weight[c];
      dx[c] += static_cast<T>(r * (g - g_mean - xhat * gx_mean));
    }
  }
  const Bands bands(N, C);
#pragma omp parallel for schedule(static) if (bands.parallel)
  for (int64_t i = 0; i < bands.count; ++i) {
    const int64_t c0 = i * bands.width, width = std::min(C, c0 + bands.width) - c0;
    std::vector<double> dw(width, 0.0), db(width, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C + c0;
      const T* dy = dout + n * C + c0;
      const T mu = mean[n];
      const double r = rstd[n];
      for (int64_t c = 0; c < width; ++c) {
        const double xhat = (x[c] - mu) * r;
        dw[c] += dy[c] * xhat;
        db[c] += dy[c];
      }
    }
    for (int64_t c = 0; c < width; ++c) {
      dweight[c0 + c] += static_cast<T>(dw[c]);
      if (dbias) dbias[c0 + c] += static_cast<T>(db[c]);
    }
  }
}

template <typename T>
void rmsnorm_forward(T* out, T* rrms, const T* inp, const T* weight, int64_t N, int64_t C, double eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) rmsnorm_row(out + n * C, rrms + n, inp + n * C, weight, C, eps);
}

template <typename T>
void residual_rmsnorm_forward(T* out, T* rrms, T* inp, const T* residual, const T* weight, int64_t N, int64_t C,
                              double eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    add_row(inp + n * C, residual + n * C, C);
    rmsnorm_row(out + n * C, rrms + n, inp + n * C, weight, C, eps);
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rrms,
                      int64_t N, int64_t C) {
  constexpr int K = kSums<T>;
  // y = x·r·w, r = (mean(x²) + eps)^(-1/2): dx = r·g − x·r³·mean(g·x) with g = dy·w.
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    const double r = rrms[n];
    const double gx =
        row_sum<K>(C, [&](int64_t c) { return static_cast<double>(dy[c]) * (weight ? weight[c] : T(1)) * x[c]; }) / C;
    T* dx = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const double g = static_cast<double>(dy[c]) * (weight ? weight[c] : T(1));
      dx[c] += static_cast<T>(r * g - x[c] * r * r * r * gx);
    }
  }
  if (!weight) return;
  const Bands bands(N, C);
#pragma omp parallel for schedule(static) if (bands.parallel)
  for (int64_t i = 0; i < bands.count; ++i) {
    const int64_t c0 = i * bands.width, width = std::min(C, c0 + bands.width) - c0;
    std::vector<double> dw(width, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C + c0;
      const T* dy = dout + n * C + c0;
      for (int64_t c = 0; c < width; ++c) dw[c] += static_cast<double>(dy[c]) * x[c] * rrms[n];
    }
    for (int64_t c = 0; c < width; ++c) dweight[c0 + c] += static_cast<T>(dw[c]);
  }
}

#define OPS_INSTANTIATE(T)                                                                              \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double); \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,       \
                                      int64_t, int64_t);                                                  \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);                 \
  template void residual_layernorm_forward<T>(T*, T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,  \
                                              double);                                                    \
  template void residual_rmsnorm_forward<T>(T*, T*, T*, const T*, const T*, int64_t, int64_t, double);    \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
OPS_INSTANTIATE(float)
OPS_INSTANTIATE(double)
#undef OPS_INSTANTIATE

}  // namespace ops
