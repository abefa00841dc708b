// bf16 rotation with AVX512-BF16 (Zen 4, Cooper Lake, Sapphire Rapids): VCVTNE2PS2BF16 rounds two
// fp32 vectors to bf16 (nearest even, NaN quieted) in one instruction, where the portable kernel
// needs ~16 integer ops. Highway 1.0 does not expose it, hence intrinsics behind a CPUID check.
// The instruction flushes denormals, so a vector whose results include one is rounded lane by lane
// (the tests compare every bf16 bit pattern against round-to-nearest-even).
// Layout as in rope_cpu-inl.h: a u32 lane holds elements (2k, 2k+1), even = lane << 16,
// odd = lane & 0xffff0000.
// GCC 12 warns inside avx512fintrin.h (_mm512_slli_epi32 starts from an undefined vector).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "../convert.h"
#include "row.h"

namespace rope {

#if defined(__x86_64__) && defined(__GNUC__)

#define ROPE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

namespace {

// (even, odd) fp32 results of 16 pairs → 32 bf16 in element order. The instruction flushes
// denormals to ±0, so a vector whose words include a zero is tested exactly and, if a result was a
// denormal (rare: |y| < 1.2e-38), rounded lane by lane (a true zero, as in zeroed padding, takes the
// exact test too). kStream: a non-temporal store where `out` is aligned to the vector (Heads::stream).
ROPE_BF16_TARGET inline __m512i to_element_order(__m512i packed) {
  // cvtne2ps: words 0..15 = bf16(even), 16..31 = bf16(odd); interleave them.
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, packed);
}

template <bool kStream>
ROPE_BF16_TARGET inline void store_vector(__m512i v, uint16_t* out) {
  if (kStream && reinterpret_cast<uintptr_t>(out) % 64 == 0) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), v);  // fenced by the caller's FlushStream
  } else {
    _mm512_storeu_si512(out, v);
  }
}

template <bool kStream>
ROPE_BF16_TARGET inline void pack_store(__m512 even, __m512 odd, uint16_t* out) {
  constexpr int kDenormal = 0x20;
  const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
  if (__builtin_expect(_mm512_testn_epi16_mask(packed, _mm512_set1_epi16(0x7fff)) != 0, 0) &&
      !_kortestz_mask16_u8(_mm512_fpclass_ps_mask(even, kDenormal), _mm512_fpclass_ps_mask(odd, kDenormal))) {
    alignas(64) float e[16], o[16];
    _mm512_store_ps(e, even);
    _mm512_store_ps(o, odd);
    for (int k = 0; k < 16; ++k) {
      out[2 * k] = f32_to_bf16(e[k]);
      out[2 * k + 1] = f32_to_bf16(o[k]);
    }
    return;
  }
  store_vector<kStream>(to_element_order(packed), out);
}

// pack_store of kOut vectors (a head's, or a step's), their packed words tested together: a chain
// of masked vptestmw (the lanes with no ±0 word so far) is one op a vector and one branch for all,
// where pack_store's test is a test, a mask test and a branch a vector (on Zen 5 those cost 0.8 of
// a decode's 3.4 µs). Only when some word is ±0 do the vectors take pack_store's exact test.
template <int kOut, bool kStream>
ROPE_BF16_TARGET inline void pack_store_all(const __m512* even, const __m512* odd, uint16_t* const* out) {
  const __m512i magnitude = _mm512_set1_epi16(0x7fff);
  __m512i packed[kOut];
  for (int v = 0; v < kOut; ++v) packed[v] = (__m512i)_mm512_cvtne2ps_pbh(odd[v], even[v]);
  __mmask32 nonzero = _mm512_test_epi16_mask(packed[0], magnitude);
  for (int v = 1; v < kOut; ++v) nonzero = _mm512_mask_test_epi16_mask(nonzero, packed[v], magnitude);
  if (__builtin_expect(!_kortestc_mask32_u8(nonzero, nonzero), 0)) {
    for (int v = 0; v < kOut; ++v) pack_store<kStream>(even[v], odd[v], out[v]);
    return;
  }
  for (int v = 0; v < kOut; ++v) store_vector<kStream>(to_element_order(packed[v]), out[v]);
}

ROPE_BF16_TARGET inline __m512 even_of(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
ROPE_BF16_TARGET inline __m512 odd_of(__m512i x) {
  return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

// A step is one vector's worth of pairs. tile<kTile> holds the cos/sin of kTile steps in registers
// while every head of the row passes under them, so the inner loop is loads, arithmetic and stores.
// kPrefetch (rows streamed from DRAM, in or out of place): each vector's line 4 KiB ahead is
// prefetched, as rope_cpu-inl.h's PrefetchAhead does (the measurements are there). Without it the
// loads wait on memory: on an Intel Xeon with AMX 70% of this kernel's samples sat on the
// instruction after a load, in place at 3× the time of an in-place scale of the same bytes.
template <bool kPrefetch>
ROPE_BF16_TARGET inline void prefetch_ahead(const uint16_t* p) {
  if constexpr (kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(p) + 4096, _MM_HINT_T0);
}

// Pairs (2i, 2i+1): y_e = x_e·c − x_o·s, y_o = x_o·c + x_e·s, 16 pairs per step.
struct InterleavedSteps {
  static constexpr int32_t kPairs = 16;
  template <int kTile, bool kStream, bool kPrefetch>
  ROPE_BF16_TARGET static void tile(const Heads& heads, int32_t offset, int32_t /*n_pairs*/, int32_t step,
                                    const TokenCosSin& cs) {
    __m512 c[kTile], s[kTile];
    for (int v = 0; v < kTile; ++v) {
      c[v] = _mm512_loadu_ps(cs.pc.data() + kPairs * (step + v));
      s[v] = _mm512_loadu_ps(cs.ps.data() + kPairs * (step + v));
    }
    const int32_t first = offset + 2 * kPairs * step;  // element
    for (HeadWalk<uint16_t> w(heads, first); w.n > 0; w.next()) {
      const uint16_t* in = w.in;
      uint16_t* out = w.out;
      __m512 even[kTile], odd[kTile];
      uint16_t* to[kTile];
#pragma GCC unroll 4  // kTile ≤ 4: cos/sin stay in registers instead of the stack
      for (int v = 0; v < kTile; ++v) {
        prefetch_ahead<kPrefetch>(in + 2 * kPairs * v);
        __m512i x = _mm512_loadu_si512(in + 2 * kPairs * v);
        ROPE_IN_REGISTER(x);  // loaded once, not in both the shift and the mask
        const __m512 xe = even_of(x), xo = odd_of(x);
        even[v] = _mm512_fmsub_ps(xe, c[v], _mm512_mul_ps(xo, s[v]));
        odd[v] = _mm512_fmadd_ps(xo, c[v], _mm512_mul_ps(xe, s[v]));
        to[v] = out + 2 * kPairs * v;
      }
      pack_store_all<kTile, kStream>(even, odd, to);
    }
  }
};

// Pairs (j, j+n): u32 lane k of each half holds pairs 2k and 2k+1; ec/es hold even pairs then odd,
// so a step (16 lanes, 32 pairs) reads four cos/sin vectors.
struct HalfSteps {
  static constexpr int32_t kPairs = 32;
  template <int kTile, bool kStream, bool kPrefetch>
  ROPE_BF16_TARGET static void tile(const Heads& heads, int32_t offset, int32_t n_pairs, int32_t step,
                                    const TokenCosSin& cs) {
    const int32_t n_even = (n_pairs + 1) / 2;
    __m512 ce[kTile], se[kTile], co[kTile], so[kTile];
    for (int v = 0; v < kTile; ++v) {
      const int32_t k = 16 * (step + v);
      ce[v] = _mm512_loadu_ps(cs.ec.data() + k);
      se[v] = _mm512_loadu_ps(cs.es.data() + k);
      co[v] = _mm512_loadu_ps(cs.ec.data() + n_even + k);
      so[v] = _mm512_loadu_ps(cs.es.data() + n_even + k);
    }
    const int32_t first = offset + kPairs * step;  // element of the low half
    for (HeadWalk<uint16_t> w(heads, first); w.n > 0; w.next()) {
      const uint16_t* in = w.in;
      uint16_t* out = w.out;
#pragma GCC unroll 4
      for (int v = 0; v < kTile; ++v) {
        prefetch_ahead<kPrefetch>(in + kPairs * v);
        prefetch_ahead<kPrefetch>(in + n_pairs + kPairs * v);
        __m512i lo = _mm512_loadu_si512(in + kPairs * v), hi = _mm512_loadu_si512(in + n_pairs + kPairs * v);
        ROPE_IN_REGISTER(lo);
        ROPE_IN_REGISTER(hi);
        const __m512 lo_e = even_of(lo), lo_o = odd_of(lo), hi_e = even_of(hi), hi_o = odd_of(hi);
        const __m512 even[2] = {_mm512_fmsub_ps(lo_e, ce[v], _mm512_mul_ps(hi_e, se[v])),
                                _mm512_fmadd_ps(hi_e, ce[v], _mm512_mul_ps(lo_e, se[v]))};
        const __m512 odd[2] = {_mm512_fmsub_ps(lo_o, co[v], _mm512_mul_ps(hi_o, so[v])),
                               _mm512_fmadd_ps(hi_o, co[v], _mm512_mul_ps(lo_o, so[v]))};
        uint16_t* const to[2] = {out + kPairs * v, out + n_pairs + kPairs * v};
        pack_store_all<2, kStream>(even, odd, to);  // a step's low and high halves (a head's would spill)
      }
    }
  }
};

// Every head of the row under each tile of up to four steps; returns the pairs done (whole steps).
// These kernels are bound by arithmetic, not by the order of memory access, and a row is small
// enough (tens of KiB) that a second tile's pass finds it in cache. A call per head instead (for
// rows streamed from DRAM) cost 50% more in prefill on Zen 4: per call the tile's cos/sin set-up
// outweighs four vectors of work.
template <class Steps, bool kStream, bool kPrefetch>
ROPE_BF16_TARGET int32_t rotate_steps(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  const int32_t steps = n_pairs / Steps::kPairs;
  int32_t step = 0;
  for (; step + 4 <= steps; step += 4) Steps::template tile<4, kStream, kPrefetch>(heads, offset, n_pairs, step, cs);
  switch (steps - step) {
    case 3: Steps::template tile<3, kStream, kPrefetch>(heads, offset, n_pairs, step, cs); break;
    case 2: Steps::template tile<2, kStream, kPrefetch>(heads, offset, n_pairs, step, cs); break;
    case 1: Steps::template tile<1, kStream, kPrefetch>(heads, offset, n_pairs, step, cs); break;
    default: break;
  }
  return steps * Steps::kPairs;
}

// Non-temporal stores where Heads::stream says so; a prefetch ahead on rows streamed from DRAM.
template <class Steps>
ROPE_BF16_TARGET int32_t rotate_bf16(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  if (!cpu_has_avx512_bf16()) return 0;
  if (heads.prefetch(true)) {
    return heads.stream ? rotate_steps<Steps, true, true>(heads, offset, n_pairs, cs)
                        : rotate_steps<Steps, false, true>(heads, offset, n_pairs, cs);
  }
  return heads.stream ? rotate_steps<Steps, true, false>(heads, offset, n_pairs, cs)
                      : rotate_steps<Steps, false, false>(heads, offset, n_pairs, cs);
}

}  // namespace

int32_t rotate_interleaved_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  return rotate_bf16<InterleavedSteps>(heads, offset, n_pairs, cs);
}

int32_t rotate_half_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs) {
  return rotate_bf16<HalfSteps>(heads, offset, n_pairs, cs);
}

#else  // not x86-64 GCC/Clang

bool cpu_has_avx512_bf16() { return false; }
int32_t rotate_interleaved_bf16_avx512(const Heads&, int32_t, int32_t, const TokenCosSin&) { return 0; }
int32_t rotate_half_bf16_avx512(const Heads&, int32_t, int32_t, const TokenCosSin&) { return 0; }

#endif

}  // namespace rope
