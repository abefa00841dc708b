// Vector fp32 exp and erf (Google Highway), compiled once per target by the ops that include it
// (activation.cc, attention.cc) through Highway's foreach_target. Branch-free: every lane takes
// every path and selects, so results depend only on the input and the target (no data-dependent
// control flow), which keeps training runs bit-reproducible on one machine.
//  - Exp: Cody–Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, with a two-part ln2; the Cephes expf
//    minimax polynomial; 2^n applied in two halves so results down to the subnormal range are
//    correctly scaled. ≤ 2 ulp on [-103.9, 88.7]; below → +0, above → +inf, NaN → NaN.
//  - ErfAndErfc: the two-interval minimax form of Arm Optimized Routines' erff (MIT): for
//    |z| < 0.875, erf(z) = z + z·A(z²); for 0.875 ≤ |z| < 4, erfc(|z|) = exp(−|z| − |z|·B(|z|)),
//    so the complement does not cancel in the tail (relative error ≤ 5e-6 up to 2, ≤ 1.5e-4 up
//    to 4, where 1 − erf would be off by 1e-7/erfc); |z| ≥ 4: erf = ±1, erfc = 0 (erfc(4) =
//    1.5e-8 is below half an fp32 ulp of 1). Max abs error of erf and erfc: 7e-8 / 1.2e-7.
// Include guard per target, as Highway requires.
#if defined(OPS_VMATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPS_VMATH_INL_H_
#undef OPS_VMATH_INL_H_
#else
#define OPS_VMATH_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <limits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ops {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Applies fn(i, count) over [0, n) in whole vectors of d, then once for the partial tail
// (count < Lanes(d)); pair with LoadPart/StorePart so lanes past n are never touched.
template <class D, class Fn>
HWY_INLINE void ForEachVector(D d, int64_t n, const Fn& fn) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) fn(i, hn::Lanes(d));
  if (i < n) fn(i, static_cast<size_t>(n - i));
}

// Loads `count` ≤ Lanes(d) lanes from p; the others are `fill`.
template <class D>
HWY_INLINE hn::Vec<D> LoadPart(D d, const float* p, size_t count, float fill = 0.0f) {
  if (count == hn::Lanes(d)) return hn::LoadU(d, p);
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  for (size_t j = 0; j < hn::Lanes(d); ++j) buf[j] = j < count ? p[j] : fill;
  return hn::Load(d, buf);
}

// Loads `count` ≤ Lanes(d) bfloat16 values (their bits) from p, widened exactly to fp32; the other
// lanes are 0.
template <class D>
HWY_INLINE hn::Vec<D> LoadPart(D d, const uint16_t* p, size_t count) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> d16;
  if (count == hn::Lanes(d)) return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
  HWY_ALIGN uint16_t buf[HWY_MAX_BYTES / sizeof(float)];
  for (size_t j = 0; j < hn::Lanes(d); ++j) buf[j] = j < count ? p[j] : 0;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::Load(d16, buf))));
}

// Stores the first `count` ≤ Lanes(d) lanes of v to p.
template <class D>
HWY_INLINE void StorePart(D d, hn::Vec<D> v, float* p, size_t count) {
  if (count == hn::Lanes(d)) return hn::StoreU(v, d, p);
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(v, d, buf);
  for (size_t j = 0; j < count; ++j) p[j] = buf[j];
}

// e^x for fp32 lanes.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V lo = hn::Set(d, -103.972084f);  // below: e^x < 2^-150 rounds to +0
  const V hi = hn::Set(d, 88.7228394f);   // above: e^x > FLT_MAX
  const V xc = hn::Min(hn::Max(x, lo), hi);
  const V n = hn::Round(hn::Mul(xc, hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), xc);  // ln2 = 0.693359375 − 2.12194440e-4
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V p = hn::Set(d, 1.9875691500e-4f);
  p = hn::MulAdd(p, r, hn::Set(d, 1.3981999507e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 8.3334519073e-3f));
  p = hn::MulAdd(p, r, hn::Set(d, 4.1665795894e-2f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.6666665459e-1f));
  p = hn::MulAdd(p, r, hn::Set(d, 5.0000001201e-1f));
  p = hn::MulAdd(p, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  // 2^n = 2^n1 · 2^n2 with n1 = ⌊n/2⌋: each factor is a normal number for n in [-150, 128].
  const auto ni = hn::ConvertTo(di, n);
  const auto n1 = hn::ShiftRight<1>(ni);
  const auto n2 = hn::Sub(ni, n1);
  const auto bias = hn::Set(di, 127);
  const V s1 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n1, bias)));
  const V s2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(n2, bias)));
  V y = hn::Mul(hn::Mul(p, s1), s2);
  y = hn::IfThenZeroElse(hn::Lt(x, lo), y);
  y = hn::IfThenElse(hn::Gt(x, hi), hn::Set(d, std::numeric_limits<float>::infinity()), y);
  return hn::IfThenElse(hn::IsNaN(x), x, y);
}

// erf(z) and erfc(z) = 1 − erf(z) for fp32 lanes, erfc without cancellation for z ≥ 0.875.
// NaN lanes give NaN in both.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void ErfAndErfc(D d, V z, V& erf, V& erfc) {
  const V one = hn::Set(d, 1.0f);
  const V a = hn::Min(hn::Abs(z), hn::Set(d, 4.0f));
  // |z| < 0.875: erf(z) = z + z·A(z²).
  const V z2 = hn::Mul(a, a);
  V pa = hn::Set(d, -0x1.3a1a82p-11f);
  pa = hn::MulAdd(pa, z2, hn::Set(d, 0x1.473f48p-08f));
  pa = hn::MulAdd(pa, z2, hn::Set(d, -0x1.b68bd2p-06f));
  pa = hn::MulAdd(pa, z2, hn::Set(d, 0x1.ce1a46p-04f));
  pa = hn::MulAdd(pa, z2, hn::Set(d, -0x1.8126e0p-02f));
  pa = hn::MulAdd(pa, z2, hn::Set(d, 0x1.06eba6p-03f));
  const V erf_small = hn::MulAdd(pa, a, a);  // of |z|
  // 0.875 ≤ |z| < 4: erfc(|z|) = exp(−(|z| + |z|·B(|z|))), B by Estrin then Horner.
  V pb = hn::MulAdd(hn::Set(d, 0x1.222900p-16f), a, hn::Set(d, -0x1.91d2ccp-12f));
  const V u = hn::MulAdd(hn::Set(d, 0x1.fd1336p-9f), a, hn::Set(d, -0x1.8d6300p-6f));
  pb = hn::MulAdd(pb, z2, u);
  pb = hn::MulAdd(pb, a, hn::Set(d, 0x1.b55cb0p-4f));
  pb = hn::MulAdd(pb, a, hn::Set(d, 0x1.450aa0p-1f));
  pb = hn::MulAdd(pb, a, hn::Set(d, 0x1.079d0cp-3f));
  pb = hn::MulAdd(pb, a, a);
  V erfc_large = Exp(d, hn::Neg(pb));
  erfc_large = hn::IfThenZeroElse(hn::Ge(hn::Abs(z), hn::Set(d, 4.0f)), erfc_large);
  const auto small = hn::Lt(a, hn::Set(d, 0.875f));
  const V erf_abs = hn::IfThenElse(small, erf_small, hn::Sub(one, erfc_large));
  const V erfc_abs = hn::IfThenElse(small, hn::Sub(one, erf_small), erfc_large);  // erfc(|z|)
  const V erfc_neg = hn::IfThenElse(small, hn::Add(one, erf_small), hn::Sub(hn::Set(d, 2.0f), erfc_large));
  erf = hn::CopySignToAbs(erf_abs, z);
  erfc = hn::IfThenElse(hn::Lt(z, hn::Zero(d)), erfc_neg, erfc_abs);  // erfc(−a) = 1 + erf(a)
  const auto nan = hn::IsNaN(z);
  erf = hn::IfThenElse(nan, z, erf);
  erfc = hn::IfThenElse(nan, z, erfc);
}

// Φ(x) = ½·erfc(−x/√2), the standard normal CDF: within 6e-8 absolute, and without cancellation
// in the lower tail down to x ≈ −5.66 (then 0; Φ(−5.66) = 7.6e-9).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V NormalCdf(D d, V x) {
  V erf, erfc;
  ErfAndErfc(d, hn::Mul(x, hn::Set(d, -0.707106781186547524f)), erf, erfc);
  return hn::Mul(hn::Set(d, 0.5f), erfc);
}

}  // namespace HWY_NAMESPACE
}  // namespace ops
HWY_AFTER_NAMESPACE();

#endif  // OPS_VMATH_INL_H_
