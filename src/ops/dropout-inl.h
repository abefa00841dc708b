// Dropout's keep decision (base::Keep: SplitMix64's finaliser of stream ^ index, its top 53 bits
// against ⌈p·2^53⌉) on vectors of indices (Google Highway), compiled once per target by the ops that
// include it (dropout.cc, flash_attention.cc) through Highway's foreach_target: the same mask as
// base::Keep bit for bit, which the dropout tests check on every target. AVX2 and SSE4 have no 64-bit
// multiply, so it is built from 32-bit ones.
// Include guard per target, as Highway requires.
#if defined(OPS_DROPOUT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef OPS_DROPOUT_INL_H_
#undef OPS_DROPOUT_INL_H_
#else
#define OPS_DROPOUT_INL_H_
#endif

#include <cstdint>

#include "base/random.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace ops {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR  // one lane: no 64-bit half of a vector to work in

// The low 64 bits of a · c per 64-bit lane.
template <class V>
HWY_INLINE V Mul64(V a, V c) {
#if HWY_TARGET <= HWY_AVX3
  return hn::Mul(a, c);
#else
  const hn::Repartition<uint32_t, hn::DFromV<V>> d32;
  const auto lo = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, c));  // lo(a)·lo(c), 64 bits
  const auto cross = hn::Add(hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(a)), hn::BitCast(d32, c)),
                             hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, hn::ShiftRight<32>(c))));
  return hn::Add(lo, hn::ShiftLeft<32>(cross));
#endif
}

// All ones where base::Keep keeps element `index` (one per 64-bit lane), else zero.
template <class D64>
HWY_INLINE hn::Vec<D64> KeepLanes(D64 d64, hn::Vec<D64> index, uint64_t stream, uint64_t threshold) {
  auto x = hn::Add(hn::Xor(index, hn::Set(d64, stream)), hn::Set(d64, 0x9e3779b97f4a7c15ull));
  x = Mul64(hn::Xor(x, hn::ShiftRight<30>(x)), hn::Set(d64, 0xbf58476d1ce4e5b9ull));
  x = Mul64(hn::Xor(x, hn::ShiftRight<27>(x)), hn::Set(d64, 0x94d049bb133111ebull));
  x = hn::ShiftRight<11>(hn::Xor(x, hn::ShiftRight<31>(x)));  // < 2^53: compares as signed
  const hn::RebindToSigned<D64> di;  // x ≥ threshold ⟺ x > threshold − 1 (threshold ≤ 2^53)
  const auto above = hn::Gt(hn::BitCast(di, x), hn::Set(di, static_cast<int64_t>(threshold) - 1));
  return hn::BitCast(d64, hn::VecFromMask(di, above));
}

// The fp32 lanes' mask from two vectors of 64-bit flags: lo's lanes, then hi's, in element order.
template <class DF, class V64>
HWY_INLINE hn::Mask<DF> KeepFloats(DF df, V64 lo, V64 hi) {
  const hn::Repartition<uint32_t, DF> d32;
  return hn::MaskFromVec(hn::BitCast(df, hn::ConcatEven(d32, hn::BitCast(d32, hi), hn::BitCast(d32, lo))));
}

#endif  // HWY_TARGET != HWY_SCALAR

// Whether base::Keep keeps elements first + lane·stride, one per fp32 lane of df.
template <class DF>
HWY_INLINE hn::Mask<DF> KeepStrided(DF df, uint64_t first, uint64_t stride, uint64_t stream, uint64_t threshold) {
#if HWY_TARGET == HWY_SCALAR  // one lane: element `first` only
  (void)df, (void)stride;
  return hn::Mask<DF>::FromBool((base::mix64(stream ^ first) >> 11) >= threshold);
#else
  const hn::Repartition<uint64_t, DF> d64;  // half as many lanes
  const auto lo = hn::Add(hn::Set(d64, first), Mul64(hn::Iota(d64, 0), hn::Set(d64, stride)));
  const auto hi = hn::Add(lo, hn::Set(d64, static_cast<uint64_t>(hn::Lanes(d64)) * stride));
  return KeepFloats(df, KeepLanes(d64, lo, stream, threshold), KeepLanes(d64, hi, stream, threshold));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace ops
HWY_AFTER_NAMESPACE();

#endif  // OPS_DROPOUT_INL_H_
