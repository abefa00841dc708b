// LayerNorm and RMSNorm, forward and backward (see norm.h). Rows are independent: OpenMP over N.
// Statistics accumulate in double whatever T is, so fp32 rows of thousands of channels keep their
// precision. fp32 LayerNorm runs on SIMD lanes of doubles (Google Highway, dispatched at run time):
// each row's sums in two vector accumulators reduced in a fixed order, the element-wise parts in
// double too, so a result depends on the input and the SIMD target only (not the thread count).
// fp64 (the gradient checks' type) and RMSNorm keep the scalar loops: 8 running partial sums for
// fp32, one sequential sum for fp64.
// out16 (bf16 training) rounds each output row right after it is written, while it is in cache.
// The parameter gradients reduce over rows: each thread takes a band of channels and walks the
// rows in order, reading a contiguous segment of each (same sums as one channel at a time).
#include "norm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "base/threads.h"
#include "vmath.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/norm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ops {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DD = hn::ScalableTag<double>;
using DF = hn::Rebind<float, DD>;  // as many floats as DD has doubles

// Σ_{c < C} of a row's terms in double: term_v(c) for whole vectors, into two accumulators combined
// by SumOfLanes, then term_s(c) for the tail, in order.
template <class TermV, class TermS>
HWY_INLINE double RowSum(int64_t C, const TermV& term_v, const TermS& term_s) {
  const DD dd;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd);
  int64_t c = 0;
  for (; c + 2 * L <= C; c += 2 * L) {
    a0 = hn::Add(a0, term_v(c));
    a1 = hn::Add(a1, term_v(c + L));
  }
  if (c + L <= C) {
    a0 = hn::Add(a0, term_v(c));
    c += L;
  }
  double s = hn::GetLane(hn::SumOfLanes(dd, hn::Add(a0, a1)));
  for (; c < C; ++c) s += term_s(c);
  return s;
}

HWY_INLINE hn::Vec<DD> Load(const float* p) { return hn::PromoteTo(DD(), hn::LoadU(DF(), p)); }

// One row of layernorm_forward: y = x̂ · w + b with x̂ = (x − mean) · rstd, all in double.
void LayerNormRowKernel(float* y, float* mean, float* rstd, const float* x, const float* w, const float* b,
                        int64_t C, double eps) {
  const DD dd;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const double m = RowSum(C, [&](int64_t c) { return Load(x + c); }, [&](int64_t c) { return double{x[c]}; }) / C;
  const auto vm = hn::Set(dd, m);
  const double var = RowSum(
      C, [&](int64_t c) { const auto v = hn::Sub(Load(x + c), vm); return hn::Mul(v, v); },
      [&](int64_t c) { return (x[c] - m) * (x[c] - m); });
  const double r = 1.0 / std::sqrt(var / C + eps);
  const auto vr = hn::Set(dd, r);
  int64_t c = 0;
  for (; c + L <= C; c += L) {
    const auto xhat = hn::Mul(hn::Sub(Load(x + c), vm), vr);
    const auto out = hn::MulAdd(xhat, Load(w + c), b ? Load(b + c) : hn::Zero(dd));
    hn::StoreU(hn::DemoteTo(DF(), out), DF(), y + c);
  }
  for (; c < C; ++c) y[c] = static_cast<float>(std::fma((x[c] - m) * r, double{w[c]}, b ? double{b[c]} : 0.0));
  *mean = static_cast<float>(m);
  *rstd = static_cast<float>(r);
}

// One row of layernorm_backward's input gradient: dx += r · (g − mean(g) − x̂ · mean(g · x̂)), g = dy · w.
void LayerNormBackRowKernel(float* dx, const float* dy, const float* x, const float* w, double mu, double r,
                            int64_t C) {
  const DD dd;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto vmu = hn::Set(dd, mu), vr = hn::Set(dd, r);
  auto g_v = [&](int64_t c) { return hn::Mul(Load(dy + c), Load(w + c)); };
  auto xhat_v = [&](int64_t c) { return hn::Mul(hn::Sub(Load(x + c), vmu), vr); };
  auto g_s = [&](int64_t c) { return double{dy[c]} * w[c]; };
  auto xhat_s = [&](int64_t c) { return (x[c] - mu) * r; };
  const double g_mean = RowSum(C, g_v, g_s) / C;
  const double gx_mean =
      RowSum(C, [&](int64_t c) { return hn::Mul(g_v(c), xhat_v(c)); }, [&](int64_t c) { return g_s(c) * xhat_s(c); }) / C;
  const auto vgm = hn::Set(dd, g_mean), vgxm = hn::Set(dd, gx_mean);
  int64_t c = 0;
  for (; c + L <= C; c += L) {
    const auto d = hn::Mul(vr, hn::Sub(hn::Sub(g_v(c), vgm), hn::Mul(xhat_v(c), vgxm)));
    hn::StoreU(hn::Add(hn::LoadU(DF(), dx + c), hn::DemoteTo(DF(), d)), DF(), dx + c);
  }
  for (; c < C; ++c) dx[c] += static_cast<float>(r * (g_s(c) - g_mean - xhat_s(c) * gx_mean));
}

// One row's share of the parameter gradients over channels [0, width): dw += dy · x̂, db += dy (double).
void LayerNormParamRowKernel(double* dw, double* db, const float* dy, const float* x, double mu, double r,
                             int64_t width) {
  const DD dd;
  const int64_t L = static_cast<int64_t>(hn::Lanes(dd));
  const auto vmu = hn::Set(dd, mu), vr = hn::Set(dd, r);
  int64_t c = 0;
  for (; c + L <= width; c += L) {
    const auto g = Load(dy + c);
    const auto xhat = hn::Mul(hn::Sub(Load(x + c), vmu), vr);
    hn::StoreU(hn::MulAdd(g, xhat, hn::LoadU(dd, dw + c)), dd, dw + c);
    hn::StoreU(hn::Add(hn::LoadU(dd, db + c), g), dd, db + c);
  }
  for (; c < width; ++c) {
    dw[c] = std::fma(double{dy[c]}, (x[c] - mu) * r, dw[c]);
    db[c] += dy[c];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

namespace ops {
HWY_EXPORT(LayerNormRowKernel);
HWY_EXPORT(LayerNormBackRowKernel);
HWY_EXPORT(LayerNormParamRowKernel);

namespace {

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
  Bands(int64_t N, int64_t C) : parallel(N * C >= base::kParallelMinElements) {
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

void layernorm_row(float* y, float* mean, float* rstd, const float* x, const float* weight, const float* bias,
                   int64_t C, double eps) {
  HWY_DYNAMIC_DISPATCH(LayerNormRowKernel)(y, mean, rstd, x, weight, bias, C, eps);
}

// One row of layernorm_backward's dinp (see there).
template <typename T>
void layernorm_back_row(T* dx, const T* dy, const T* x, const T* weight, T mu, double r, int64_t C) {
  constexpr int K = kSums<T>;
  const double g_mean = row_sum<K>(C, [&](int64_t c) { return static_cast<double>(dy[c]) * weight[c]; }) / C;
  const double gx_mean =
      row_sum<K>(C, [&](int64_t c) { return static_cast<double>(dy[c]) * weight[c] * ((x[c] - mu) * r); }) / C;
  for (int64_t c = 0; c < C; ++c) {
    const double xhat = (x[c] - mu) * r;
    const double g = static_cast<double>(dy[c]) * weight[c];
    dx[c] += static_cast<T>(r * (g - g_mean - xhat * gx_mean));
  }
}

void layernorm_back_row(float* dx, const float* dy, const float* x, const float* weight, float mu, double r, int64_t C) {
  HWY_DYNAMIC_DISPATCH(LayerNormBackRowKernel)(dx, dy, x, weight, mu, r, C);
}

// One row's share of the weight and bias gradients over a band of `width` channels.
template <typename T>
void layernorm_param_row(double* dw, double* db, const T* dy, const T* x, T mu, double r, int64_t width) {
  for (int64_t c = 0; c < width; ++c) {
    const double xhat = (x[c] - mu) * r;
    dw[c] += dy[c] * xhat;
    db[c] += dy[c];
  }
}

void layernorm_param_row(double* dw, double* db, const float* dy, const float* x, float mu, double r, int64_t width) {
  HWY_DYNAMIC_DISPATCH(LayerNormParamRowKernel)(dw, db, dy, x, mu, r, width);
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

// The rows of a forward, OpenMP over N: row(n) writes out's row n, which out16 (when given) then
// takes rounded to bf16 while it is in cache.
template <typename T, class Row>
void forward_rows(T* out, uint16_t* out16, int64_t N, int64_t C, const Row& row) {
  if (!std::is_same_v<T, float> && out16) throw std::invalid_argument("norm forward: out16 is for fp32 norms");
#pragma omp parallel for schedule(static) if (N * C >= base::kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    row(n);
    if constexpr (std::is_same_v<T, float>) {
      if (out16) bf16_from_f32(out16 + n * C, out + n * C, C);
    }
  }
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int64_t N,
                       int64_t C, double eps, uint16_t* out16) {
  forward_rows(out, out16, N, C, [&](int64_t n) {
    layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C, eps);
  });
}

template <typename T>
void residual_layernorm_forward(T* out, T* mean, T* rstd, T* inp, const T* residual, const T* weight, const T* bias,
                                int64_t N, int64_t C, double eps, uint16_t* out16) {
  forward_rows(out, out16, N, C, [&](int64_t n) {
    add_row(inp + n * C, residual + n * C, C);
    layernorm_row(out + n * C, mean + n, rstd + n, inp + n * C, weight, bias, C, eps);
  });
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  // dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) with g = dout · weight and x̂ the normalised input.
#pragma omp parallel for schedule(static) if (N * C >= base::kParallelMinElements)
  for (int64_t n = 0; n < N; ++n) {
    layernorm_back_row(dinp + n * C, dout + n * C, inp + n * C, weight, mean[n], rstd[n], C);
  }
  const Bands bands(N, C);
#pragma omp parallel for schedule(static) if (bands.parallel)
  for (int64_t i = 0; i < bands.count; ++i) {
    const int64_t c0 = i * bands.width, width = std::min(C, c0 + bands.width) - c0;
    std::vector<double> dw(width, 0.0), db(width, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      layernorm_param_row(dw.data(), db.data(), dout + n * C + c0, inp + n * C + c0, mean[n], rstd[n], width);
    }
    for (int64_t c = 0; c < width; ++c) {
      dweight[c0 + c] += static_cast<T>(dw[c]);
      if (dbias) dbias[c0 + c] += static_cast<T>(db[c]);
    }
  }
}

template <typename T>
void rmsnorm_forward(T* out, T* rrms, const T* inp, const T* weight, int64_t N, int64_t C, double eps,
                     uint16_t* out16) {
  forward_rows(out, out16, N, C, [&](int64_t n) { rmsnorm_row(out + n * C, rrms + n, inp + n * C, weight, C, eps); });
}

template <typename T>
void residual_rmsnorm_forward(T* out, T* rrms, T* inp, const T* residual, const T* weight, int64_t N, int64_t C,
                              double eps, uint16_t* out16) {
  forward_rows(out, out16, N, C, [&](int64_t n) {
    add_row(inp + n * C, residual + n * C, C);
    rmsnorm_row(out + n * C, rrms + n, inp + n * C, weight, C, eps);
  });
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight, const T* rrms,
                      int64_t N, int64_t C) {
  constexpr int K = kSums<T>;
  // y = x·r·w, r = (mean(x²) + eps)^(-1/2): dx = r·g − x·r³·mean(g·x) with g = dy·w.
#pragma omp parallel for schedule(static) if (N * C >= base::kParallelMinElements)
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
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t, double,    \
                                     uint16_t*);                                                          \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*,       \
                                      int64_t, int64_t);                                                  \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int64_t, int64_t, double, uint16_t*);      \
  template void residual_layernorm_forward<T>(T*, T*, T*, T*, const T*, const T*, const T*, int64_t, int64_t,  \
                                              double, uint16_t*);                                         \
  template void residual_rmsnorm_forward<T>(T*, T*, T*, const T*, const T*, int64_t, int64_t, double,    \
                                             uint16_t*);                                                  \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int64_t, int64_t);
OPS_INSTANTIATE(float)
OPS_INSTANTIATE(double)
#undef OPS_INSTANTIATE

}  // namespace ops
#endif  // HWY_ONCE
