// LayerNorm and RMSNorm, forward and backward (see norm.h). Rows are independent: OpenMP over N.
// Statistics accumulate in double whatever T is, so fp32 rows of thousands of channels keep their
// precision.
#include "norm.h"

#include <cmath>

namespace ops {

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                       int64_t C, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const double m = sum / C;
    double var = 0;
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const double s = 1.0 / std::sqrt(var / C + eps);
    T* y = out + n * C;
    for (int64_t c = 0; c < C; ++c) {
      y[c] = static_cast<T>((x[c] - m) * s * weight[c] + (bias ? bias[c] : T(0)));
    }
    mean[n] = static_cast<T>(m);
    rstd[n] = static_cast<T>(s);
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  // dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) with g = dout · weight and x̂ the normalised input.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    double g_mean = 0, gx_mean = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[n]) * static_cast<double>(rstd[n]);
      const double g = static_cast<double>(dy[c]) * weight[c];
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= C;
    gx_mean /= C;
    T* dx = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const double xhat = (x[c] - mean[n]) * static_cast<double>(rstd[n]);
      const double g = static_cast<double>(dy[c]) * weight[c];
      dx[c] += static_cast<T>(rstd[n] * (g - g_mean - xhat * gx_mean));
    }
  }
  // Parameter gradients reduce over rows: one pass per channel keeps threads off each other's sums.
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double dw = 0, db = 0;
    for (int64_t n = 0; n < N; ++n) {
      const double xhat = (inp[n * C + c] - mean[n]) * static_cast<double>(rstd[n]);
      dw += dout[n * C + c] * xhat;
      db += dout[n * C + c];
    }
    dweight[c] += static_cast<T>(dw);
    if (dbias) dbias[c] += static_cast<T>(db);
  }
}

template <typename T>
void rmsnorm_forward(T* out, T* rrms, const T* inp, const T* weight, int64_t N, int64_t C, double eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    double sq = 0;
    for (int64_t c = 0; c < C; ++c) sq += static_cast<double>(x[c]) * x[c];
    const double r = 1.0 / std::sqrt(sq / C + eps);
    T* y = out + n * C;
    for (int64_t c = 0; c < C; ++c) y[c] = static_cast<T>(x[c] * r * (weight ? weight[c] : T(1)));
    rrms[n] = static_cast<T>(r);
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rrms,
                      int64_t N, int64_t C) {
  // y = x·r·w, r = (mean(x²) + eps)^(-1/2): dx = r·g − x·r³·mean(g·x) with g = dy·w.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;
    const T* dy = dout + n * C;
    const double r = rrms[n];
    double gx = 0;
    for (int64_t c = 0; c < C; ++c) gx += static_cast<double>(dy[c]) * (weight ? weight[c] : T(1)) * x[c];
    gx /= C;
    T* dx = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const double g = static_cast<double>(dy[c]) * (weight ? weight[c] : T(1));
      dx[c] += static_cast<T>(r * g - x[c] * r * r * r * gx);
    }
  }
  if (!weight) return;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double dw = 0;
    for (int64_t n = 0; n < N; ++n) dw += static_cast<double>(dout[n * C + c]) * inp[n * C + c] * rrms[n];
    dweight[c] += static_cast<T>(dw);
  }
}

#define OPS_INSTANTIATE(T)                                                                              \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double); \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,       \
                                      int64_t, int64_t);                                                  \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double);                 \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
OPS_INSTANTIATE(float)
OPS_INSTANTIATE(double)
#undef OPS_INSTANTIATE

}  // namespace ops
