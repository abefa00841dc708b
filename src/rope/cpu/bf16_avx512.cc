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
// denormals, so a vector holding one (rare: |y| < 1.2e-38) is rounded lane by lane instead.
ROPE_BF16_TARGET inline void pack_store(__m512 even, __m512 odd, uint16_t* out, bool stream) {
  constexpr int kDenormal = 0x20;
  if (__builtin_expect(_mm512_fpclass_ps_mask(even, kDenormal) | _mm512_fpclass_ps_mask(odd, kDenormal), 0)) {
    alignas(64) float e[16], o[16];
    _mm512_store_ps(e, even);
    _mm512_store_ps(o, odd);
    for (int k = 0; k < 16; ++k) {
      out[2 * k] = f32_to_bf16(e[k]);
      out[2 * k + 1] = f32_to_bf16(o[k]);
    }
    return;
  }
  // cvtne2ps: words 0..15 = bf16(even), 16..31 = bf16(odd); interleave them.
  const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(odd, even);
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                         23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i result = _mm512_permutexvar_epi16(order, packed);
  if (stream && reinterpret_cast<uintptr_t>(out) % 64 == 0) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(out), result);  // fenced by the caller's FlushStream
  } else {
    _mm512_storeu_si512(out, result);
  }
}

ROPE_BF16_TARGET inline __m512 even_of(__m512i x) { return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)); }
ROPE_BF16_TARGET inline __m512 odd_of(__m512i x) {
  return _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

}  // namespace

// Pairs (2i, 2i+1): y_e = x_e·c − x_o·s, y_o = x_o·c + x_e·s, 16 pairs per vector.
ROPE_BF16_TARGET int32_t rotate_interleaved_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs,
                                                        const TokenCosSin& cs) {
  if (!cpu_has_avx512_bf16()) return 0;
  const int32_t done = n_pairs / 16 * 16;
  for (int64_t h0 = 0; h0 < heads.n; h0 += heads.block) {
    const int64_t h1 = std::min(heads.n, h0 + heads.block);
    for (int32_t i = 0; i < done; i += 16) {
      const __m512 c = _mm512_loadu_ps(cs.pc.data() + i), s = _mm512_loadu_ps(cs.ps.data() + i);
      for (int64_t h = h0; h < h1; ++h) {
        const auto* in = reinterpret_cast<const uint16_t*>(heads.in + h * heads.in_stride) + offset + 2 * i;
        auto* out = reinterpret_cast<uint16_t*>(heads.out + h * heads.out_stride) + offset + 2 * i;
        const __m512i x = _mm512_loadu_si512(in);
        const __m512 xe = even_of(x), xo = odd_of(x);
        const __m512 ye = _mm512_fmsub_ps(xe, c, _mm512_mul_ps(xo, s));
        const __m512 yo = _mm512_fmadd_ps(xo, c, _mm512_mul_ps(xe, s));
        pack_store(ye, yo, out, heads.stream);
      }
    }
  }
  return done;
}

// Pairs (j, j+n): u32 lane k of each half holds pairs 2k and 2k+1; ec/es hold even pairs then odd.
ROPE_BF16_TARGET int32_t rotate_half_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs,
                                                 const TokenCosSin& cs) {
  if (!cpu_has_avx512_bf16()) return 0;
  const int32_t n_even = (n_pairs + 1) / 2;
  const int32_t done = n_pairs / 32 * 32;  // 16 lanes × 2 pairs
  for (int64_t h0 = 0; h0 < heads.n; h0 += heads.block) {
    const int64_t h1 = std::min(heads.n, h0 + heads.block);
    for (int32_t k = 0; 2 * k < done; k += 16) {
      const __m512 ce = _mm512_loadu_ps(cs.ec.data() + k), se = _mm512_loadu_ps(cs.es.data() + k);
      const __m512 co = _mm512_loadu_ps(cs.ec.data() + n_even + k), so = _mm512_loadu_ps(cs.es.data() + n_even + k);
      for (int64_t h = h0; h < h1; ++h) {
        const auto* in = reinterpret_cast<const uint16_t*>(heads.in + h * heads.in_stride) + offset;
        auto* out = reinterpret_cast<uint16_t*>(heads.out + h * heads.out_stride) + offset;
        const __m512i lo = _mm512_loadu_si512(in + 2 * k), hi = _mm512_loadu_si512(in + n_pairs + 2 * k);
        const __m512 lo_e = even_of(lo), lo_o = odd_of(lo), hi_e = even_of(hi), hi_o = odd_of(hi);
        const __m512 ylo_e = _mm512_fmsub_ps(lo_e, ce, _mm512_mul_ps(hi_e, se));
        const __m512 ylo_o = _mm512_fmsub_ps(lo_o, co, _mm512_mul_ps(hi_o, so));
        const __m512 yhi_e = _mm512_fmadd_ps(hi_e, ce, _mm512_mul_ps(lo_e, se));
        const __m512 yhi_o = _mm512_fmadd_ps(hi_o, co, _mm512_mul_ps(lo_o, so));
        pack_store(ylo_e, ylo_o, out + 2 * k, heads.stream);
        pack_store(yhi_e, yhi_o, out + n_pairs + 2 * k, heads.stream);
      }
    }
  }
  return done;
}

#else  // not x86-64 GCC/Clang

bool cpu_has_avx512_bf16() { return false; }
int32_t rotate_interleaved_bf16_avx512(const Heads&, int32_t, int32_t, const TokenCosSin&) { return 0; }
int32_t rotate_half_bf16_avx512(const Heads&, int32_t, int32_t, const TokenCosSin&) { return 0; }

#endif

}  // namespace rope
