// GELU and ReLU, forward and backward (see activation.h), and the vectorised fp32 math of vmath.h
// (elementary functions, quantisation, bf16 rounding, the AdamW step).
// fp32 GELU runs on SIMD lanes (vmath-inl.h's NormalCdf and Exp, dispatched at run time to the
// best target), split across OpenMP threads in fixed chunks; fp64 keeps std::erf/std::exp for the
// gradient checks.
#include "activation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "vmath.h"

namespace ops {
void bf16_from_f32_avx512(uint16_t* out, const float* x, int64_t n, float scale);  // below; x86-64 only
}  // namespace ops

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/activation.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "ops/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ops {
namespace HWY_NAMESPACE {

void ExpKernel(float* out, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) { StorePart(d, Exp(d, LoadPart(d, x + i, c)), out + i, c); });
}

void ErfKernel(float* out, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    hn::Vec<decltype(d)> erf, erfc;
    ErfAndErfc(d, LoadPart(d, x + i, c), erf, erfc);
    StorePart(d, erf, out + i, c);
  });
}

void ErfcKernel(float* out, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    hn::Vec<decltype(d)> erf, erfc;
    ErfAndErfc(d, LoadPart(d, x + i, c), erf, erfc);
    StorePart(d, erfc, out + i, c);
  });
}

// out = x·Φ(x).
void GeluForwardKernel(float* out, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    const auto v = LoadPart(d, x + i, c);
    StorePart(d, hn::Mul(v, NormalCdf(d, v)), out + i, c);
  });
}

// out = x·Φ(x) and slope = Φ(x) + x·φ(x): GeluForwardKernel's values and GeluBackwardKernel's factor,
// bit for bit, with Φ computed once.
void GeluWithSlopeKernel(float* out, float* slope, const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    const auto v = LoadPart(d, x + i, c);
    const auto cdf = NormalCdf(d, v);
    const auto pdf = hn::Mul(Exp(d, hn::Mul(hn::Mul(v, v), hn::Set(d, -0.5f))), hn::Set(d, 0.398942280401432678f));
    StorePart(d, hn::Mul(v, cdf), out + i, c);
    StorePart(d, hn::MulAdd(v, pdf, cdf), slope + i, c);
  });
}

// out = x · s, s given as bf16 bits (widened exactly).
void MulBf16Kernel(float* out, const float* x, const uint16_t* s16, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) { StorePart(d, hn::Mul(LoadPart(d, x + i, c), LoadPart(d, s16 + i, c)), out + i, c); });
}

void F32FromBf16Kernel(float* out, const uint16_t* x, int64_t n) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) { StorePart(d, LoadPart(d, x + i, c), out + i, c); });
}

// dx += dy · (Φ(x) + x·φ(x)), φ(x) = e^(−x²/2)/√(2π); dx = that without accumulate.
void GeluBackwardKernel(float* dx, const float* x, const float* dy, int64_t n, bool accumulate) {
  const hn::ScalableTag<float> d;
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    const auto v = LoadPart(d, x + i, c);
    const auto pdf = hn::Mul(Exp(d, hn::Mul(hn::Mul(v, v), hn::Set(d, -0.5f))), hn::Set(d, 0.398942280401432678f));
    const auto grad = hn::MulAdd(v, pdf, NormalCdf(d, v));
    const auto g = LoadPart(d, dy + i, c);
    StorePart(d, accumulate ? hn::MulAdd(g, grad, LoadPart(d, dx + i, c)) : hn::Mul(g, grad), dx + i, c);
  });
}

bool FiniteRangeKernel(const float* x, int64_t n, float* lo, float* hi) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto vlo = hn::Set(d, HUGE_VALF), vhi = hn::Set(d, -HUGE_VALF), vbad = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    vlo = hn::Min(vlo, v);
    vhi = hn::Max(vhi, v);
    vbad = hn::Add(vbad, hn::Mul(v, hn::Zero(d)));  // x·0 is NaN for NaN and ±inf
  }
  float l = hn::GetLane(hn::MinOfLanes(d, vlo)), h = hn::GetLane(hn::MaxOfLanes(d, vhi));
  float bad = hn::GetLane(hn::SumOfLanes(d, vbad));
  for (; i < n; ++i) l = std::min(l, x[i]), h = std::max(h, x[i]), bad += x[i] * 0.0f;
  *lo = l, *hi = h;
  return bad == 0.0f;
}

// q[i] = clamp(nearest-even(x[i]·inv_scale + zero_point), 0, 255), the product and the sum each
// rounded to fp32 (as oneDNN's reorder and the tests' emulation do it).
void QuantizeU8Kernel(const float* x, int64_t n, float inv_scale, float zero_point, uint8_t* q) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<uint8_t, decltype(d)> du8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto scale = hn::Set(d, inv_scale), zero = hn::Set(d, zero_point);
  const auto lo = hn::Zero(d), hi = hn::Set(d, 255.0f);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::Round(hn::Add(hn::Mul(hn::LoadU(d, x + i), scale), zero));
    hn::StoreU(hn::DemoteTo(du8, hn::ConvertTo(di, hn::Min(hn::Max(v, lo), hi))), du8, q + i);
  }
  for (; i < n; ++i) {
    const float scaled = x[i] * inv_scale + zero_point;
    q[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(scaled), 0.0f, 255.0f));
  }
}

// out[i] = bfloat16 bits of x[i]·scale (the product rounded to fp32, then to nearest even); NaN stays
// a quiet NaN of the same sign, ±inf stays ±inf, a subnormal product becomes ±0 (as AVX512-BF16's
// conversion, whose result this portable kernel reproduces bit for bit). The bf16 products' operands.
uint32_t Bf16BitsScalar(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if (std::isnan(v)) return (bits >> 16) | 0x40u;
  if (std::fabs(v) < std::numeric_limits<float>::min()) return (bits >> 16) & 0x8000u;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

void Bf16FromF32Kernel(uint16_t* out, const float* x, int64_t n, float scale) {
#if HWY_TARGET <= HWY_AVX3 && defined(__x86_64__)
  // The AVX-512 targets hand over to AVX512-BF16's own conversion where the CPU has it (tests that
  // narrow Highway's targets run the portable kernel below on every other one).
  static const bool native = __builtin_cpu_supports("avx512bf16");
  if (native) return bf16_from_f32_avx512(out, x, n, scale);
#endif
  const hn::ScalableTag<float> d;
  const hn::RebindToUnsigned<decltype(d)> du;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<uint16_t, decltype(d)> d16;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto vscale = hn::Set(d, scale);
  const auto half = hn::Set(du, 0x7fffu), one = hn::Set(du, 1u), quiet = hn::Set(du, 0x40u);
  const auto sign = hn::Set(du, 0x8000u);
  const auto smallest_normal = hn::Set(d, std::numeric_limits<float>::min());
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::Mul(hn::LoadU(d, x + i), vscale);
    const auto bits = hn::BitCast(du, v), high = hn::ShiftRight<16>(bits);
    const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(bits, half), hn::And(high, one)));
    const auto flushed = hn::IfThenElse(hn::RebindMask(du, hn::Lt(hn::Abs(v), smallest_normal)), hn::And(high, sign),
                                        rounded);
    const auto r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), hn::Or(high, quiet), flushed);
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, r)), d16, out + i);
  }
  for (; i < n; ++i) out[i] = static_cast<uint16_t>(Bf16BitsScalar(x[i] * scale));
}

void CountSmallKernel(const float* x, int64_t n, const float* below, int64_t* counts) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto zero = hn::Zero(d), b0 = hn::Set(d, below[0]), b1 = hn::Set(d, below[1]);
  int64_t c0 = 0, c1 = 0, c2 = 0;
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    const auto nonzero = hn::Not(hn::Eq(v, zero));  // true for NaN, as the scalar tail
    const auto a = hn::Abs(v);
    c0 += static_cast<int64_t>(hn::CountTrue(d, nonzero));
    c1 += static_cast<int64_t>(hn::CountTrue(d, hn::And(nonzero, hn::Lt(a, b0))));
    c2 += static_cast<int64_t>(hn::CountTrue(d, hn::And(nonzero, hn::Lt(a, b1))));
  }
  for (; i < n; ++i) {
    const bool nonzero = x[i] != 0.0f;
    c0 += nonzero;
    c1 += nonzero && std::fabs(x[i]) < below[0];
    c2 += nonzero && std::fabs(x[i]) < below[1];
  }
  counts[0] += c0, counts[1] += c1, counts[2] += c2;
}

void AdamWStepKernel(float* p, float* m, float* v, const float* g, int64_t n, const AdamWStep& s) {
  const hn::ScalableTag<float> d;
  const auto b1 = hn::Set(d, s.beta1), c1 = hn::Set(d, s.one_minus_beta1);
  const auto b2 = hn::Set(d, s.beta2), c2 = hn::Set(d, s.one_minus_beta2);
  const auto decay = hn::Set(d, s.decay), step = hn::Set(d, s.step_size);
  const auto sqrt_bc2 = hn::Set(d, s.sqrt_bias_correction2), eps = hn::Set(d, s.eps);
  ForEachVector(d, n, [&](int64_t i, size_t c) {
    const auto gi = LoadPart(d, g + i, c);
    const auto mi = hn::Add(hn::Mul(b1, LoadPart(d, m + i, c)), hn::Mul(c1, gi));
    const auto vi = hn::Add(hn::Mul(b2, LoadPart(d, v + i, c)), hn::Mul(hn::Mul(c2, gi), gi));
    const auto denom = hn::Add(hn::Div(hn::Sqrt(vi), sqrt_bc2), eps);
    const auto pi = hn::Sub(hn::Mul(LoadPart(d, p + i, c), decay), hn::Mul(step, hn::Div(mi, denom)));
    StorePart(d, mi, m + i, c);
    StorePart(d, vi, v + i, c);
    StorePart(d, pi, p + i, c);
  });
}

const char* TargetKernel() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cmath>
#include <numbers>
#include <type_traits>
#include <vector>

namespace ops {

HWY_EXPORT(ExpKernel);
HWY_EXPORT(ErfKernel);
HWY_EXPORT(ErfcKernel);
HWY_EXPORT(GeluForwardKernel);
HWY_EXPORT(GeluBackwardKernel);
HWY_EXPORT(GeluWithSlopeKernel);
HWY_EXPORT(MulBf16Kernel);
HWY_EXPORT(F32FromBf16Kernel);
HWY_EXPORT(TargetKernel);
HWY_EXPORT(FiniteRangeKernel);
HWY_EXPORT(QuantizeU8Kernel);
HWY_EXPORT(Bf16FromF32Kernel);
HWY_EXPORT(CountSmallKernel);
HWY_EXPORT(AdamWStepKernel);

void exp_f32(float* out, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(ExpKernel)(out, x, n); }
void erf_f32(float* out, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(ErfKernel)(out, x, n); }
void erfc_f32(float* out, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(ErfcKernel)(out, x, n); }
const char* vmath_target() { return HWY_DYNAMIC_DISPATCH(TargetKernel)(); }
bool finite_range_f32(const float* x, int64_t n, float* lo, float* hi) {
  return HWY_DYNAMIC_DISPATCH(FiniteRangeKernel)(x, n, lo, hi);
}
void quantize_u8_f32(const float* x, int64_t n, float inv_scale, float zero_point, uint8_t* q) {
  HWY_DYNAMIC_DISPATCH(QuantizeU8Kernel)(x, n, inv_scale, zero_point, q);
}
#if defined(__x86_64__)
// The AVX512-BF16 conversion (vcvtneps2bf16): one instruction per 16 values where the portable kernel
// takes about ten; the same bits (round to nearest even, quiet NaNs, subnormals to ±0).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void bf16_from_f32_avx512(uint16_t* out, const float* x,
                                                                                         int64_t n, float scale) {
  const __m512 s = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_loadu_ps(x + i), s))));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh r = _mm512_cvtneps_pbh(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s));
    _mm256_mask_storeu_epi16(out + i, m, reinterpret_cast<__m256i>(r));
  }
}
#endif

void bf16_from_f32(uint16_t* out, const float* x, int64_t n, float scale) {
  HWY_DYNAMIC_DISPATCH(Bf16FromF32Kernel)(out, x, n, scale);
}
void count_small_f32(const float* x, int64_t n, const float below[2], int64_t counts[3]) {
  HWY_DYNAMIC_DISPATCH(CountSmallKernel)(x, n, below, counts);
}
void mul_bf16_f32(float* out, const float* x, const uint16_t* s16, int64_t n) {
  HWY_DYNAMIC_DISPATCH(MulBf16Kernel)(out, x, s16, n);
}
void f32_from_bf16(float* out, const uint16_t* x, int64_t n) { HWY_DYNAMIC_DISPATCH(F32FromBf16Kernel)(out, x, n); }
void adamw_step_f32(float* p, float* m, float* v, const float* g, int64_t n, const AdamWStep& s) {
  HWY_DYNAMIC_DISPATCH(AdamWStepKernel)(p, m, v, g, n, s);
}

namespace {

// Element-wise fp32 work in fixed chunks: small arrays stay on the calling thread (a parallel
// region costs more than a few thousand elements), large ones split across the team. Chunk
// boundaries do not change any element's value.
constexpr int64_t kChunk = 16384;

template <class Fn>
void for_chunks(int64_t n, const Fn& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    fn(begin, std::min(n, begin + kChunk) - begin);
  }
}

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    for_chunks(n, [&](int64_t i, int64_t c) { HWY_DYNAMIC_DISPATCH(GeluForwardKernel)(out + i, inp + i, c); });
  } else {
    constexpr double kInvSqrt2 = 0.70710678118654752440;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const double x = inp[i];
      out[i] = static_cast<T>(0.5 * x * (1.0 + std::erf(x * kInvSqrt2)));
    }
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, Grad mode) {
  const bool accumulate = mode == Grad::accumulate;
  if constexpr (std::is_same_v<T, float>) {
    for_chunks(n, [&](int64_t i, int64_t c) {
      HWY_DYNAMIC_DISPATCH(GeluBackwardKernel)(dinp + i, inp + i, dout + i, c, accumulate);
    });
  } else {
    constexpr double kInvSqrt2 = 0.70710678118654752440;
    const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const double x = inp[i];
      const double cdf = 0.5 * (1.0 + std::erf(x * kInvSqrt2));
      const double pdf = inv_sqrt_2pi * std::exp(-0.5 * x * x);
      const T grad = static_cast<T>(dout[i] * (cdf + x * pdf));
      dinp[i] = accumulate ? dinp[i] + grad : grad;
    }
  }
}

template <typename T>
void relu_forward(T* out, const T* inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
}

template <typename T>
void relu_backward(T* dinp, const T* inp, const T* dout, int64_t n, Grad mode) {
  const bool accumulate = mode == Grad::accumulate;
#pragma omp parallel for schedule(static) if (n > kChunk)
  for (int64_t i = 0; i < n; ++i) {
    const T grad = inp[i] > T(0) ? dout[i] : T(0);
    dinp[i] = accumulate ? dinp[i] + grad : grad;
  }
}

// bf16 training's activations: one fp32 chunk of act(x) and act'(x) per thread at a time, rounded
// (bf16_from_f32) while in cache, so neither is ever stored whole in fp32.
template <class Fn>
void activation_with_slope_bf16(uint16_t* out16, uint16_t* slope16, const float* inp, int64_t n, const Fn& fn) {
  for_chunks(n, [&](int64_t i, int64_t c) {
    thread_local std::vector<float> out, slope;
    out.resize(static_cast<size_t>(kChunk));
    slope.resize(static_cast<size_t>(kChunk));
    fn(out.data(), slope.data(), inp + i, c);
    bf16_from_f32(out16 + i, out.data(), c);
    bf16_from_f32(slope16 + i, slope.data(), c);
  });
}

void gelu_forward_bf16(uint16_t* out16, uint16_t* slope16, const float* inp, int64_t n) {
  activation_with_slope_bf16(out16, slope16, inp, n, [](float* out, float* slope, const float* x, int64_t c) {
    HWY_DYNAMIC_DISPATCH(GeluWithSlopeKernel)(out, slope, x, c);
  });
}

void relu_forward_bf16(uint16_t* out16, uint16_t* slope16, const float* inp, int64_t n) {
  activation_with_slope_bf16(out16, slope16, inp, n, [](float* out, float* slope, const float* x, int64_t c) {
    for (int64_t j = 0; j < c; ++j) {
      out[j] = x[j] > 0.0f ? x[j] : 0.0f;
      slope[j] = x[j] > 0.0f ? 1.0f : 0.0f;
    }
  });
}

#define OPS_INSTANTIATE(T)                                                  \
  template void gelu_forward<T>(T*, const T*, int64_t);                      \
  template void gelu_backward<T>(T*, const T*, const T*, int64_t, Grad);     \
  template void relu_forward<T>(T*, const T*, int64_t);                      \
  template void relu_backward<T>(T*, const T*, const T*, int64_t, Grad);
OPS_INSTANTIATE(float)
OPS_INSTANTIATE(double)
#undef OPS_INSTANTIATE

}  // namespace ops
#endif  // HWY_ONCE
