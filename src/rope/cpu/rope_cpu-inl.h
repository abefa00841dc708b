// SIMD kernels (Google Highway), compiled once per target by rope_cpu.cc's foreach_target.
//  - CosSinExact: cos/sin of m·θ in float64 lanes: exact two-product, Cody–Waite reduction by π/2
//    with a two-double π/2, fdlibm minimax polynomials, quadrant fix-up, rounded to fp32.
//  - ApplyRows: per row, per-pair cos/sin (table or on the fly) folded with scale and sign into
//    the shapes each kernel reads (TokenCosSin); then the row's heads one after the other, each
//    head's vectors in order: interleaved f32/f16 in the complex-multiply form, half split as lo/hi
//    vectors, all in fp32 lanes, with a tile of cos/sin in registers (cache-resident calls) or read
//    from L1 (calls streamed from DRAM). bf16 works in u32 lanes (a pair per lane): the native
//    AVX512-BF16 conversion where the CPU has it (bf16_avx512.cc), integer round-to-nearest-even
//    otherwise (cos/sin loaded with each vector).
// Include guard per target, as Highway requires.
#if defined(ROPE_CPU_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ROPE_CPU_INL_H_
#undef ROPE_CPU_INL_H_
#else
#define ROPE_CPU_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../apply.h"
#include "../convert.h"
#include "row.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace rope {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// a·b = p + e exactly.
template <class D, class V = hn::Vec<D>>
HWY_INLINE void TwoProd(D d, V a, V b, V& p, V& e) {
  p = hn::Mul(a, b);
#if HWY_NATIVE_FMA
  (void)d;
  e = hn::MulSub(a, b, p);
#else
  // Dekker/Veltkamp split: exact without FMA for |a·b| far from overflow.
  const V split = hn::Set(d, 134217729.0);  // 2^27 + 1
  const V ca = hn::Mul(a, split), cb = hn::Mul(b, split);
  const V ah = hn::Sub(ca, hn::Sub(ca, a)), al = hn::Sub(a, ah);
  const V bh = hn::Sub(cb, hn::Sub(cb, b)), bl = hn::Sub(b, bh);
  e = hn::Add(hn::Add(hn::Add(hn::Sub(hn::Mul(ah, bh), p), hn::Mul(ah, bl)), hn::Mul(al, bh)),
              hn::Mul(al, bl));
#endif
}

// cos/sin of pos[i]·theta[i], i < n (arrays padded to a multiple of the lane count), to fp32.
HWY_INLINE void CosSinExact(const double* pos, const double* theta, int64_t n, float* c_out,
                            float* s_out) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;
  using VD = hn::Vec<decltype(dd)>;
  const VD two_over_pi = hn::Set(dd, 0.63661977236758134308);
  const VD pio2_hi = hn::Set(dd, 1.5707963267948966192);   // 0x1.921fb54442d18p+0
  const VD pio2_lo = hn::Set(dd, 6.123233995736766036e-17);  // π/2 − pio2_hi
  // fdlibm __kernel_sin / __kernel_cos coefficients, |r| <= π/4.
  const VD s1 = hn::Set(dd, -1.66666666666666324348e-01), s2 = hn::Set(dd, 8.33333333332248946124e-03),
           s3 = hn::Set(dd, -1.98412698298579493134e-04), s4 = hn::Set(dd, 2.75573137070700676789e-06),
           s5 = hn::Set(dd, -2.50507602534068634195e-08), s6 = hn::Set(dd, 1.58969099521155010221e-10);
  const VD c1 = hn::Set(dd, 4.16666666666666019037e-02), c2 = hn::Set(dd, -1.38888888888741095749e-03),
           c3 = hn::Set(dd, 2.48015872894767294178e-05), c4 = hn::Set(dd, -2.75573143513906633035e-07),
           c5 = hn::Set(dd, 2.08757232129817482790e-09), c6 = hn::Set(dd, -1.13596475577881948265e-11);
  const VD one = hn::Set(dd, 1.0), half = hn::Set(dd, 0.5), quarter = hn::Set(dd, 0.25),
           four = hn::Set(dd, 4.0), two = hn::Set(dd, 2.0);
  const size_t lanes = hn::Lanes(dd);
  for (int64_t i = 0; i < n; i += static_cast<int64_t>(lanes)) {
    VD hi, lo;
    TwoProd(dd, hn::LoadU(dd, pos + i), hn::LoadU(dd, theta + i), hi, lo);
    const VD k = hn::Round(hn::Mul(hi, two_over_pi));
    VD p, e;
    TwoProd(dd, k, pio2_hi, p, e);
    // r = (hi + lo) − k·π/2; hi − p is exact (Sterbenz), the rest are tiny corrections.
    const VD r = hn::Add(hn::Sub(hn::Sub(hi, p), e), hn::NegMulAdd(k, pio2_lo, lo));
    const VD z = hn::Mul(r, r);
    VD ps = hn::MulAdd(z, s6, s5);
    ps = hn::MulAdd(z, ps, s4);
    ps = hn::MulAdd(z, ps, s3);
    ps = hn::MulAdd(z, ps, s2);
    ps = hn::MulAdd(z, ps, s1);
    const VD sin_r = hn::MulAdd(hn::Mul(r, z), ps, r);
    VD pc = hn::MulAdd(z, c6, c5);
    pc = hn::MulAdd(z, pc, c4);
    pc = hn::MulAdd(z, pc, c3);
    pc = hn::MulAdd(z, pc, c2);
    pc = hn::MulAdd(z, pc, c1);
    const VD cos_r = hn::MulAdd(hn::Mul(z, z), pc, hn::NegMulAdd(half, z, one));
    // Quadrant q = k mod 4: (sin, cos) = (s, c), (c, −s), (−s, −c), (−c, s).
    const VD q = hn::Sub(k, hn::Mul(four, hn::Floor(hn::Mul(k, quarter))));
    const auto odd = hn::Or(hn::Eq(q, one), hn::Eq(q, hn::Set(dd, 3.0)));
    const auto sin_neg = hn::Ge(q, two);
    const auto cos_neg = hn::Or(hn::Eq(q, one), hn::Eq(q, two));
    VD sin_a = hn::IfThenElse(odd, cos_r, sin_r);
    VD cos_a = hn::IfThenElse(odd, sin_r, cos_r);
    sin_a = hn::IfThenElse(sin_neg, hn::Neg(sin_a), sin_a);
    cos_a = hn::IfThenElse(cos_neg, hn::Neg(cos_a), cos_a);
    hn::StoreU(hn::DemoteTo(df, cos_a), df, c_out + i);
    hn::StoreU(hn::DemoteTo(df, sin_a), df, s_out + i);
  }
}

// Stores a whole vector: non-temporal when asked and the address is aligned to the vector.
template <class D, typename T>
HWY_INLINE void StoreOut(D d, hn::Vec<D> v, T* p, bool stream) {
  if (stream && reinterpret_cast<uintptr_t>(p) % (hn::Lanes(d) * sizeof(T)) == 0) {
    hn::Stream(v, d, p);
  } else {
    hn::StoreU(v, d, p);
  }
}

// ---- fp32 lanes from/to f32 and f16 storage (bf16 has kernels of its own, below).
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF(DF df, const float* p) {
  return hn::LoadU(df, p);
}
template <class DF>
HWY_INLINE hn::Vec<DF> LoadF(DF df, const hwy::float16_t* p);  // after kNativeF16
template <class DF>
HWY_INLINE void StoreF(DF df, hn::Vec<DF> v, float* p, bool stream) {
  StoreOut(df, v, p, stream);
}
// Highway 1.0's f16 emulation (targets without F16C or a native conversion) truncates on the way
// down and loses NaN on the way up; those targets convert each lane with the scalar routines.
#if (HWY_ARCH_X86 && HWY_TARGET > HWY_AVX2) || HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR
inline constexpr bool kNativeF16 = false;
#else
inline constexpr bool kNativeF16 = true;
#endif

template <class DF>
HWY_INLINE hn::Vec<DF> LoadF(DF df, const hwy::float16_t* p) {
  if constexpr (kNativeF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
  } else {  // the emulated promotion loses NaN
    HWY_ALIGN float lanes[hn::MaxLanes(df)];
    for (size_t i = 0; i < hn::Lanes(df); ++i) {
      uint16_t h;
      std::memcpy(&h, p + i, 2);
      lanes[i] = f16_to_f32(h);
    }
    return hn::Load(df, lanes);
  }
}

template <class DF>
HWY_INLINE void StoreF(DF df, hn::Vec<DF> v, hwy::float16_t* p, bool stream) {
  if constexpr (kNativeF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    StoreOut(dh, hn::DemoteTo(dh, v), p, stream);
  } else {
    HWY_ALIGN float lanes[hn::MaxLanes(df)];
    hn::Store(v, df, lanes);
    for (size_t i = 0; i < hn::Lanes(df); ++i) {
      const uint16_t h = f32_to_f16(lanes[i]);
      std::memcpy(p + i, &h, 2);
    }
  }
}
HWY_INLINE float ScalarLoad(const float* p) { return *p; }
HWY_INLINE float ScalarLoad(const hwy::float16_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return f16_to_f32(b);
}
HWY_INLINE float ScalarLoad(const hwy::bfloat16_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return bf16_to_f32(b);
}
HWY_INLINE void ScalarStore(float v, float* p) { *p = v; }
HWY_INLINE void ScalarStore(float v, hwy::float16_t* p) {
  const uint16_t b = f32_to_f16(v);
  std::memcpy(p, &b, 2);
}
HWY_INLINE void ScalarStore(float v, hwy::bfloat16_t* p) {
  const uint16_t b = f32_to_bf16(v);
  std::memcpy(p, &b, 2);
}

// Scalar pairs [first, n_pairs) of every head, any layout (tails and single-lane targets).
template <typename T>
HWY_INLINE void RotatePairsScalar(const Heads& heads, int32_t offset, int32_t first, int32_t n_pairs,
                                  bool interleaved, const TokenCosSin& cs) {
  for (HeadWalk<T> w(heads, offset); w.n > 0; w.next()) {
    const T* in = w.in;
    T* out = w.out;
    for (int32_t i = first; i < n_pairs; ++i) {
      const int32_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + n_pairs;
      const float xa = ScalarLoad(in + a), xb = ScalarLoad(in + b);
      ScalarStore(xa * cs.pc[i] - xb * cs.ps[i], out + a);
      ScalarStore(xb * cs.pc[i] + xa * cs.ps[i], out + b);
    }
  }
}

// The f32/f16 kernels walk the heads one after the other, each head's vectors in order:
//  - Cache-resident rows hold a tile of cos/sin vectors in registers while the heads pass under it,
//    each head's tile of vectors in order: up to 8 vectors with 32 registers (the whole of a 128-dim
//    f32 head at 512 bits), 4 with 16. (One vector of every head before the next vector strides by
//    a head: a load then meets, every 4096 / head-bytes heads, a store 4 KiB earlier in the store
//    buffer (4K aliasing), and the prefetchers see strides. On Zen 5 that order took 2.6 cycles per
//    64-byte vector of an L2-resident decode; whole heads under a register tile, 1.6.)
//  - Rows streamed from DRAM (Heads::stream_row) read cos/sin from L1 with each vector (a row's are
//    a few hundred bytes), so each tensor is one sequential stream, and use at most 256-bit vectors,
//    also on AVX-512 targets: on Zen 5 the 512-bit loop reached half the in-place floor (prefill f32
//    q+k, one thread: 8.7 ms against 4.4; 72% against 94% with this loop), the 256-bit one 81-88%
//    (docs/perf.md, "librope on CPU").
// Every x is loaded once (LoadedOnce).

// x loaded once (row.h's ROPE_IN_REGISTER); scalar and emulated targets have no vector register.
template <class V>
HWY_INLINE V LoadedOnce(V x) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
  ROPE_IN_REGISTER(x.raw);
#endif
  return x;
}

constexpr int kMaxTile = HWY_MAX_BYTES >= 64 ? 8 : 4;  // cos/sin vectors held in registers

// Runs tile.template operator()<k>(first_vector) over vectors [0, n) in tiles of kMaxTile, then 4,
// 2 and 1 vectors (a 64-dim head in 512-bit vectors is one tile of 4); returns n.
template <class Tile>
HWY_INLINE int32_t ForEachTile(int32_t n, const Tile& tile) {
  int32_t v = 0;
  for (; v + kMaxTile <= n; v += kMaxTile) tile.template operator()<kMaxTile>(v);
  if constexpr (kMaxTile > 4) {
    if (v + 4 <= n) tile.template operator()<4>(v), v += 4;
  }
  if (v + 2 <= n) tile.template operator()<2>(v), v += 2;
  if (v + 1 <= n) tile.template operator()<1>(v), v += 1;
  return v;
}

// Interleaved, the complex-multiply form: y = x·C + Reverse2(x)·S with C = (c0, c0, c1, c1, ...) and
// S = (−s0, s0, −s1, s1, ...) (TokenCosSin::xc, xs), i.e. (x0·c − x1·s, x1·c + x0·s); negating s
// instead of the product is exact.
template <class D, typename T>
HWY_INLINE void RotateInterleavedVector(D df, const T* in, T* out, hn::Vec<D> c, hn::Vec<D> s, bool stream) {
  const auto x = LoadedOnce(LoadF(df, in));
  StoreF(df, hn::MulAdd(x, c, hn::Mul(hn::Reverse2(df, x), s)), out, stream);
}

// Rows streamed from DRAM gain from a software prefetch 4 KiB ahead of the loads. f32 and f16 rows
// prefetch in place only: on Zen 5 (prefill f32 q+k interleaved, one thread, `build/rope_callgrind`,
// best of 5–10 alternating runs) in place took 3.97–4.48 ms against 4.39–4.53 with AVX3, 4.14–4.27
// against 4.47–4.59 with AVX2, half 4.73 against 4.79, but out of place 5.93 against 5.59, and on an
// Intel Xeon with AMX (2 vCPUs, `roformer bench rope`, two alternating runs) half out of place took
// 18.8–19.3 ms with out_of_place_too = true against 17.4–17.9. bf16 rows prefetch in and out of place:
// on that Xeon, one thread, against commit f52e28a's kernels (no bf16 prefetch), in place AVX2 took
// 6.0–6.2 ms against 11.1, out of place 5.9–6.5 against 11.7–11.9, with AVX3 (bf16_avx512.cc does the
// same) 2.5–2.8 against 7.8 in place and 5.5–7.3 against 7.3–9.6 out of place, the loads otherwise
// waiting on memory (docs/perf.md). Cache-resident rows never prefetch (Heads::prefetch).
// Calls body(std::true_type{}) to prefetch, body(std::false_type{}) not to.
template <class Body>
HWY_INLINE void WithPrefetchIfStreamed(const Heads& heads, bool out_of_place_too, const Body& body) {
  if (heads.prefetch(out_of_place_too)) {
    body(std::true_type{});
  } else {
    body(std::false_type{});
  }
}
template <bool kPrefetch, typename T>
HWY_INLINE void PrefetchAhead(const T* p) {
  if constexpr (kPrefetch) hwy::Prefetch(reinterpret_cast<const uint8_t*>(p) + 4096);
}

template <typename T>
HWY_INLINE void RotateInterleaved(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  const float *xc = cs.xc.data(), *xs = cs.xs.data();  // locals: the stores may alias cs's members
  int32_t done = 0;  // pairs
  if (heads.stream_row) {
    const hn::CappedTag<float, 8> df;
    const int32_t lanes = static_cast<int32_t>(hn::Lanes(df)), n = 2 * n_pairs - 2 * n_pairs % lanes;
    const bool stream = heads.stream;
    WithPrefetchIfStreamed(heads, false, [&](auto prefetch) {
      for (HeadWalk<T> w(heads, offset); lanes >= 2 && w.n > 0; w.next()) {
        for (int32_t j = 0; j < n; j += lanes) {
          PrefetchAhead<decltype(prefetch)::value>(w.in + j);
          RotateInterleavedVector(df, w.in + j, w.out + j, hn::LoadU(df, xc + j), hn::LoadU(df, xs + j), stream);
        }
      }
    });
    done = lanes >= 2 ? n / 2 : 0;
  } else {
    const hn::ScalableTag<float> df;
    using V = hn::Vec<decltype(df)>;
    const int32_t lanes = static_cast<int32_t>(hn::Lanes(df));
    // A pair must sit inside one vector: single-lane targets take the scalar loop.
    const int32_t vectors = lanes >= 2 ? 2 * n_pairs / lanes : 0;
    done = ForEachTile(vectors, [&]<int kTile>(int32_t v0) {
      V c[kTile], s[kTile];
      for (int v = 0; v < kTile; ++v) {
        c[v] = hn::LoadU(df, xc + (v0 + v) * lanes);
        s[v] = hn::LoadU(df, xs + (v0 + v) * lanes);
      }
      for (HeadWalk<T> w(heads, offset + v0 * lanes); w.n > 0; w.next()) {
        HWY_UNROLL(8)  // kTile <= 8: C and S stay in registers
        for (int v = 0; v < kTile; ++v) RotateInterleavedVector(df, w.in + v * lanes, w.out + v * lanes, c[v], s[v], false);
      }
    }) * lanes / 2;
  }
  RotatePairsScalar<T>(heads, offset, done, n_pairs, true, cs);
}

// Half split: pairs (j, j + n): y_lo = lo·c − hi·s, y_hi = hi·c + lo·s, cos/sin from pc/ps.
template <class D, typename T>
HWY_INLINE void RotateHalfVector(D df, const T* in, T* out, int32_t n_pairs, hn::Vec<D> c, hn::Vec<D> s, bool stream) {
  const auto lo = LoadedOnce(LoadF(df, in)), hi = LoadedOnce(LoadF(df, in + n_pairs));
  StoreF(df, hn::MulSub(lo, c, hn::Mul(hi, s)), out, stream);
  StoreF(df, hn::MulAdd(hi, c, hn::Mul(lo, s)), out + n_pairs, stream);
}

template <typename T>
HWY_INLINE void RotateHalf(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  const float *pc = cs.pc.data(), *ps = cs.ps.data();
  int32_t done = 0;
  if (heads.stream_row) {
    const hn::CappedTag<float, 8> df;
    const int32_t lanes = static_cast<int32_t>(hn::Lanes(df)), n = n_pairs - n_pairs % lanes;
    const bool stream = heads.stream;
    WithPrefetchIfStreamed(heads, false, [&](auto prefetch) {
      for (HeadWalk<T> w(heads, offset); w.n > 0; w.next()) {
        for (int32_t j = 0; j < n; j += lanes) {
          PrefetchAhead<decltype(prefetch)::value>(w.in + j);
          RotateHalfVector(df, w.in + j, w.out + j, n_pairs, hn::LoadU(df, pc + j), hn::LoadU(df, ps + j), stream);
        }
      }
    });
    done = n;
  } else {
    const hn::ScalableTag<float> df;
    using V = hn::Vec<decltype(df)>;
    const int32_t lanes = static_cast<int32_t>(hn::Lanes(df));
    done = ForEachTile(n_pairs / lanes, [&]<int kTile>(int32_t v0) {
      V c[kTile], s[kTile];
      for (int v = 0; v < kTile; ++v) {
        c[v] = hn::LoadU(df, pc + (v0 + v) * lanes);
        s[v] = hn::LoadU(df, ps + (v0 + v) * lanes);
      }
      for (HeadWalk<T> w(heads, offset + v0 * lanes); w.n > 0; w.next()) {
        HWY_UNROLL(8)
        for (int v = 0; v < kTile; ++v) RotateHalfVector(df, w.in + v * lanes, w.out + v * lanes, n_pairs, c[v], s[v], false);
      }
    }) * lanes;
  }
  RotatePairsScalar<T>(heads, offset, done, n_pairs, false, cs);  // pairs [done, n_pairs), still (i, i + n_pairs)
}

// ---- bf16 in u32 lanes: lane k holds elements (2k, 2k+1) as (low, high) halves, so the even
// element is lane << 16 and the odd one lane & 0xffff0000 as fp32, and no shuffles are needed.
// fp32 → bf16 with round to nearest even: bits + 0x7fff + (bit 16), the bf16 in the high half
// (the low half is left over). No NaN case: every NaN rounded here is an fp32 result of bf16 inputs
// and finite cos/sin, i.e. the quieted payload of a bf16 input or the default NaN, so its low half
// is zero, the add cannot carry out of it, and the high half already is the quiet NaN that
// f32_to_bf16 gives.
template <class DU>
HWY_INLINE hn::Vec<DU> RoundToBf16High(DU du, hn::Vec<hn::Rebind<float, DU>> v) {
  const auto bits = hn::BitCast(du, v);
  return hn::Add(hn::Add(bits, hn::Set(du, 0x7fffu)), hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u)));
}

// Rounds (even, odd) results and packs them into u32 lanes as bf16 (even low, odd high): the odd
// one's high half and the even one's high half shifted down, merged by a 16-bit blend.
template <class DU>
HWY_INLINE hn::Vec<DU> PackBf16Pairs(DU du, hn::Vec<hn::Rebind<float, DU>> even, hn::Vec<hn::Rebind<float, DU>> odd) {
  const auto hi = RoundToBf16High(du, odd), lo = hn::ShiftRight<16>(RoundToBf16High(du, even));
#if HWY_TARGET == HWY_SCALAR
  return hn::Or(hn::And(hi, hn::Set(du, 0xffff0000u)), lo);  // one lane has no 16-bit view
#else
  const hn::Repartition<uint16_t, DU> d16;
  return hn::BitCast(du, hn::OddEven(hn::BitCast(d16, hi), hn::BitCast(d16, lo)));
#endif
}

// AVX-512 targets use the native bf16 conversion where the CPU has it (bf16_avx512.cc); the pairs
// it leaves (a tail shorter than a vector) continue below.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr bool kTryNativeBf16 = true;
#else
inline constexpr bool kTryNativeBf16 = false;
#endif

HWY_INLINE void RotateInterleavedBf16(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<float, decltype(du)> df;
  using VF = hn::Vec<decltype(df)>;
  const int32_t lanes = static_cast<int32_t>(hn::Lanes(du));  // pairs per vector
  const auto high = hn::Set(du, 0xffff0000u);
  const auto rotate = [&](const hwy::bfloat16_t* in, hwy::bfloat16_t* out, VF c, VF s) {
    const auto x = LoadedOnce(hn::LoadU(du, reinterpret_cast<const uint32_t*>(in)));
    const auto xe = hn::BitCast(df, hn::ShiftLeft<16>(x)), xo = hn::BitCast(df, hn::And(x, high));
    StoreOut(du, PackBf16Pairs(du, hn::MulSub(xe, c, hn::Mul(xo, s)), hn::MulAdd(xo, c, hn::Mul(xe, s))),
             reinterpret_cast<uint32_t*>(out), heads.stream);
  };
  const int32_t first = kTryNativeBf16 ? rotate_interleaved_bf16_avx512(heads, offset, n_pairs, cs) : 0;
  if (first == n_pairs) return;
  // The rounding arithmetic bounds this kernel once rows from DRAM are prefetched: cos/sin come from
  // L1 with each vector (no tile to set up). (Pointers held in locals: the compiler cannot tell the
  // stores from cs's own members.)
  const float *pc = cs.pc.data(), *ps = cs.ps.data();
  int32_t i = first;
  WithPrefetchIfStreamed(heads, true, [&](auto prefetch) {
    for (HeadWalk<hwy::bfloat16_t> w(heads, offset); w.n > 0; w.next()) {
      const hwy::bfloat16_t* in = w.in;
      hwy::bfloat16_t* out = w.out;
      for (i = first; i + lanes <= n_pairs; i += lanes) {
        PrefetchAhead<decltype(prefetch)::value>(in + 2 * i);
        rotate(in + 2 * i, out + 2 * i, hn::LoadU(df, pc + i), hn::LoadU(df, ps + i));
      }
    }
  });
  RotatePairsScalar<hwy::bfloat16_t>(heads, offset, i, n_pairs, true, cs);
}

HWY_INLINE void RotateHalfBf16(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  const hn::ScalableTag<uint32_t> du;
  const hn::Rebind<float, decltype(du)> df;
  const int32_t lanes = static_cast<int32_t>(hn::Lanes(du));  // u32 lanes; 2 pairs each
  const int32_t n_even = (n_pairs + 1) / 2;                     // ec/es: even pairs then odd pairs
  const auto high = hn::Set(du, 0xffff0000u);
  const int32_t first = kTryNativeBf16 ? rotate_half_bf16_avx512(heads, offset, n_pairs, cs) : 0;
  if (first == n_pairs) return;
  // Heads one after the other, cos/sin from L1 per vector, as RotateInterleavedBf16.
  const float *ec = cs.ec.data(), *es = cs.es.data();
  int32_t k = first / 2;  // u32 lane index within the low half: pairs 2k, 2k+1
  WithPrefetchIfStreamed(heads, true, [&](auto prefetch) {
    for (HeadWalk<hwy::bfloat16_t> w(heads, offset); w.n > 0; w.next()) {
      const hwy::bfloat16_t* in = w.in;
      hwy::bfloat16_t* out = w.out;
      for (k = first / 2; 2 * (k + lanes) <= n_pairs; k += lanes) {
        PrefetchAhead<decltype(prefetch)::value>(in + 2 * k);
        PrefetchAhead<decltype(prefetch)::value>(in + n_pairs + 2 * k);
        const auto ce = hn::LoadU(df, ec + k), se = hn::LoadU(df, es + k);
        const auto co = hn::LoadU(df, ec + n_even + k), so = hn::LoadU(df, es + n_even + k);
        const auto lo = LoadedOnce(hn::LoadU(du, reinterpret_cast<const uint32_t*>(in + 2 * k)));
        const auto hi = LoadedOnce(hn::LoadU(du, reinterpret_cast<const uint32_t*>(in + n_pairs + 2 * k)));
        const auto lo_e = hn::BitCast(df, hn::ShiftLeft<16>(lo)), lo_o = hn::BitCast(df, hn::And(lo, high));
        const auto hi_e = hn::BitCast(df, hn::ShiftLeft<16>(hi)), hi_o = hn::BitCast(df, hn::And(hi, high));
        StoreOut(du, PackBf16Pairs(du, hn::MulSub(lo_e, ce, hn::Mul(hi_e, se)), hn::MulSub(lo_o, co, hn::Mul(hi_o, so))),
                 reinterpret_cast<uint32_t*>(out + 2 * k), heads.stream);
        StoreOut(du, PackBf16Pairs(du, hn::MulAdd(hi_e, ce, hn::Mul(lo_e, se)), hn::MulAdd(hi_o, co, hn::Mul(lo_o, so))),
                 reinterpret_cast<uint32_t*>(out + n_pairs + 2 * k), heads.stream);
      }
    }
  });
  RotatePairsScalar<hwy::bfloat16_t>(heads, offset, 2 * k, n_pairs, false, cs);
}

// Per-thread scratch, grown as needed and kept across calls (decode calls are tiny).
struct RowScratch {
  std::vector<int64_t> axis_pos, pair_pos;
  std::vector<double> pos_d;
  std::vector<float> cos_m, sin_m, scale;
  TokenCosSin cs;
  int32_t n_pairs = -1, n_axes = -1;  // what the buffers are sized for
  void prepare(const rope_plan& plan) {
    // Decode calls repeat one plan's sizes: nothing to do (7% of a one-head call's samples went here).
    if (plan.n_pairs == n_pairs && plan.cfg.n_axes == n_axes) return;
    n_pairs = plan.n_pairs;
    n_axes = plan.cfg.n_axes;
    const size_t padded = static_cast<size_t>(plan.n_pairs) + kPairPadding;
    axis_pos.resize(plan.cfg.n_axes);
    pair_pos.resize(plan.n_pairs);
    pos_d.assign(padded, 0.0);  // the padding stays zero: rows write pairs [0, n_pairs) only
    cos_m.resize(padded);
    sin_m.resize(padded);
    scale.resize(padded);
    cs.resize(padded);
  }
};

// Per-thread scratch behind a call the compiler will not inline, so the TLS address is computed
// once per call instead of being rematerialised (via __tls_get_addr) inside the inner loops.
HWY_NOINLINE RowScratch& ThreadScratch() {
  static thread_local RowScratch scratch;
  return scratch;
}

// Fills cs for one tensor from unscaled cos/sin: scale, direction, and the shapes this layout's
// kernels read (pc/ps always: tails, bf16 interleaved, f32/f16 half).
HWY_INLINE void FoldCosSin(const rope_plan& plan, bool backward, bool complex_form, const float* cos_m,
                           const float* sin_m, const float* scale, TokenCosSin& cs) {
  const int32_t n = plan.n_pairs, n_even = (n + 1) / 2;
  const bool interleaved = plan.cfg.layout == ROPE_LAYOUT_INTERLEAVED;
  float *pc = cs.pc.data(), *ps = cs.ps.data(), *xc = cs.xc.data(), *xs = cs.xs.data();
  // Whole vectors first (cos_m/sin_m may be a table row: nothing past n is read). sin·(±1)·scale
  // has the bits of ±(sin·scale).
  const hn::ScalableTag<float> df;
  const int32_t lanes = static_cast<int32_t>(hn::Lanes(df));
  const auto sign = hn::Set(df, backward ? -1.0f : 1.0f);
  int32_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    auto c = hn::LoadU(df, cos_m + i), s = hn::Mul(hn::LoadU(df, sin_m + i), sign);
    if (scale) {
      const auto k = hn::LoadU(df, scale + i);
      c = hn::Mul(c, k);
      s = hn::Mul(s, k);
    }
    hn::StoreU(c, df, pc + i);
    hn::StoreU(s, df, ps + i);
    if (complex_form) {  // f32/f16 interleaved read (c0, c0, c1, c1, ...) and (−s0, s0, −s1, s1, ...)
      hn::StoreInterleaved2(c, c, df, xc + 2 * i);
      hn::StoreInterleaved2(hn::Neg(s), s, df, xs + 2 * i);
    }
  }
  for (; i < n; ++i) {
    const float c = scale ? cos_m[i] * scale[i] : cos_m[i];
    const float s0 = scale ? sin_m[i] * scale[i] : sin_m[i];
    pc[i] = c;
    ps[i] = backward ? -s0 : s0;
    if (complex_form) {
      xc[2 * i] = xc[2 * i + 1] = c;
      xs[2 * i] = -ps[i];
      xs[2 * i + 1] = ps[i];
    }
  }
  if (!interleaved) {  // bf16 half reads even pairs, then odd pairs
    for (i = 0; i < n; ++i) {
      const int32_t e = (i % 2 == 0) ? i / 2 : n_even + i / 2;
      cs.ec[e] = pc[i];
      cs.es[e] = ps[i];
    }
  }
}

HWY_INLINE void RotateTensorRow(const rope_plan& plan, const TensorJob& tj, int64_t b, int64_t t,
                                int64_t part, int64_t parts, const TokenCosSin& cs) {
  const rope_config& cfg = plan.cfg;
  const size_t es = dtype_size(tj.dtype);
  const int64_t h0 = part_begin(tj.n_heads, part, parts), h1 = part_begin(tj.n_heads, part + 1, parts);
  const Heads heads{tj.in + es * (b * tj.in_batch_stride + t * tj.in_token_stride + h0 * tj.in_head_stride),
                    tj.out + es * (b * tj.out_batch_stride + t * tj.out_token_stride + h0 * tj.out_head_stride),
                    h1 - h0,
                    static_cast<int64_t>(es) * tj.in_head_stride, static_cast<int64_t>(es) * tj.out_head_stride,
                    tj.from_dram, tj.stream_out};
  if (!tj.in_place && cfg.rot_dim != cfg.head_dim) {  // pass-through dims
    const int32_t tail_begin = cfg.rot_offset + cfg.rot_dim;
    for (int64_t h = 0; h < heads.n; ++h) {
      const uint8_t* in = heads.in + h * heads.in_stride;
      uint8_t* out = heads.out + h * heads.out_stride;
      std::memcpy(out, in, es * cfg.rot_offset);
      std::memcpy(out + es * tail_begin, in + es * tail_begin, es * (cfg.head_dim - tail_begin));
    }
  }
  const bool interleaved = cfg.layout == ROPE_LAYOUT_INTERLEAVED;
  const int32_t off = cfg.rot_offset, n = plan.n_pairs;
  switch (tj.dtype) {
    case ROPE_DTYPE_F32:
      interleaved ? RotateInterleaved<float>(heads, off, n, cs) : RotateHalf<float>(heads, off, n, cs);
      break;
    case ROPE_DTYPE_F16:
      interleaved ? RotateInterleaved<hwy::float16_t>(heads, off, n, cs) : RotateHalf<hwy::float16_t>(heads, off, n, cs);
      break;
    case ROPE_DTYPE_BF16:
      interleaved ? RotateInterleavedBf16(heads, off, n, cs) : RotateHalfBf16(heads, off, n, cs);
      break;
    case ROPE_DTYPE_F64:  // never reaches the SIMD backend: apply.cc runs fp64 on the reference
      break;
  }
}

HWY_INLINE void ApplyRowsImpl(const ApplyJob& job, int64_t unit_begin, int64_t unit_end) {
  const rope_plan& plan = *job.plan;
  const rope_config& cfg = plan.cfg;
  const int32_t n_pairs = plan.n_pairs;
  const bool scaled = plan.attention_factor != 1.0 || cfg.xpos.enabled;
  RowScratch& sc = ThreadScratch();  // one TLS lookup per call, not per use
  // xc/xs, the complex-multiply form, only for f32/f16 interleaved tensors (bf16 reads pc/ps).
  bool complex_form = false;
  for (int j = 0; j < job.n_tensors; ++j) complex_form |= job.tensors[j].dtype != ROPE_DTYPE_BF16;
  complex_form &= cfg.layout == ROPE_LAYOUT_INTERLEAVED;
  sc.prepare(plan);

  for (int64_t unit = unit_begin; unit < unit_end; ++unit) {
    const int64_t row = unit / job.head_parts, part = unit % job.head_parts;
    const int64_t b = row / job.n_tokens, t = row % job.n_tokens;
    row_positions(job, b, t, sc.axis_pos.data());
    // cos/sin per pair, unscaled.
    const float* cos_m = sc.cos_m.data();
    const float* sin_m = sc.sin_m.data();
    if (cfg.mode == ROPE_MODE_TABLE && cfg.n_axes == 1) {
      cos_m = &plan.table_cos[sc.axis_pos[0] * n_pairs];
      sin_m = &plan.table_sin[sc.axis_pos[0] * n_pairs];
    } else if (cfg.mode == ROPE_MODE_TABLE) {
      for (int32_t i = 0; i < n_pairs; ++i) {
        const int64_t m = sc.axis_pos[plan.pair_axis[i]];
        sc.cos_m[i] = plan.table_cos[m * n_pairs + i];
        sc.sin_m[i] = plan.table_sin[m * n_pairs + i];
      }
    } else {
      for (int32_t i = 0; i < n_pairs; ++i) sc.pos_d[i] = static_cast<double>(sc.axis_pos[plan.pair_axis[i]]);
      CosSinExact(sc.pos_d.data(), plan.theta.data(), n_pairs, sc.cos_m.data(), sc.sin_m.data());
    }
    if (scaled) {
      for (int32_t i = 0; i < n_pairs; ++i) sc.pair_pos[i] = sc.axis_pos[plan.pair_axis[i]];
    }
    for (int j = 0; j < job.n_tensors; ++j) {
      const TensorJob& tj = job.tensors[j];
      // q and k share cos/sin unless xPos scales them differently.
      if (j == 0 || cfg.xpos.enabled) {
        if (scaled) pair_scales(plan, tj.is_key, sc.pair_pos.data(), sc.scale.data());
        FoldCosSin(plan, job.backward, complex_form, cos_m, sin_m, scaled ? sc.scale.data() : nullptr, sc.cs);
      }
      RotateTensorRow(plan, tj, b, t, part, job.head_parts, sc.cs);
    }
  }
  // Non-temporal stores must be ordered before the caller (or another thread) reads the output.
  if (job.tensors[0].stream_out || (job.n_tensors == 2 && job.tensors[1].stream_out)) hwy::FlushStream();
}

}  // namespace HWY_NAMESPACE
}  // namespace rope
HWY_AFTER_NAMESPACE();

#endif  // ROPE_CPU_INL_H_
