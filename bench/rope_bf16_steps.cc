// What bounds librope's AVX512-BF16 rotation (src/rope/cpu/bf16_avx512.cc) on a given CPU: the
// decode data set (q and k [16 tokens, 32 heads, 128] bf16, 256 KiB, L2-resident), rotated in place
// by the kernel's inner step with parts of it taken away one at a time. Each variant's time per
// 32-element vector bounds what removing that part could gain. Not part of the build
// (docs/perf.md, "bf16 rotation on AVX512-BF16"):
//   g++ -O2 -march=native -std=c++17 bench/rope_bf16_steps.cc -o build/rope_bf16_steps && build/rope_bf16_steps
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

enum class Variant { kShipped, kFpclassCheck, kNoCheck, kNoPermute, kNoConversion };

// Four steps (one 128-element head) per iteration with cos/sin in registers, as the kernel's tile<4>.
template <Variant kVariant>
__attribute__((noinline)) void rotate(uint16_t* data, int64_t n, const __m512* c, const __m512* s) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                         6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const __m512 c0 = c[0], c1 = c[1], c2 = c[2], c3 = c[3], s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
  for (int64_t i = 0; i < n; i += 128) {
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m512 cv = v == 0 ? c0 : v == 1 ? c1 : v == 2 ? c2 : c3;
      const __m512 sv = v == 0 ? s0 : v == 1 ? s1 : v == 2 ? s2 : s3;
      uint16_t* p = data + i + 32 * v;
      const __m512i x = _mm512_loadu_si512(p);
      const __m512 xe = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), xo = _mm512_castsi512_ps(_mm512_and_si512(x, high));
      const __m512 ye = _mm512_fmsub_ps(xe, cv, _mm512_mul_ps(xo, sv)), yo = _mm512_fmadd_ps(xo, cv, _mm512_mul_ps(xe, sv));
      if (kVariant == Variant::kNoConversion) {  // truncation: the high halves, merged by one ternlog
        _mm512_storeu_si512(p, _mm512_ternarylogic_epi32(_mm512_castps_si512(yo),
                                                         _mm512_srli_epi32(_mm512_castps_si512(ye), 16), high, 0xe4));
        continue;
      }
      const __m512i packed = (__m512i)_mm512_cvtne2ps_pbh(yo, ye);
      bool exact_test = false;
      if (kVariant == Variant::kShipped) exact_test = _mm512_testn_epi16_mask(packed, _mm512_set1_epi16(0x7fff)) != 0;
      if (kVariant == Variant::kFpclassCheck) exact_test = true;
      if (exact_test && !_kortestz_mask16_u8(_mm512_fpclass_ps_mask(ye, 0x20), _mm512_fpclass_ps_mask(yo, 0x20))) {
        std::abort();  // the data holds no denormal results
      }
      _mm512_storeu_si512(p, kVariant == Variant::kNoPermute ? packed : _mm512_permutexvar_epi16(order, packed));
    }
  }
}

// The core clock: a chain of dependent integer adds runs at one per cycle.
double clock_ghz() {
  const int64_t adds = 1'000'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t x = 0;
  for (int64_t i = 0; i < adds / 4; ++i) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  return adds / std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

template <Variant kVariant>
void time_variant(const char* name, uint16_t* data, int64_t n, const __m512* c, const __m512* s) {
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<uint16_t>(0x3f00 + (i * 7919) % 256);  // [0.5, 2)
  double best = 1e30;
  for (int r = 0; r < 30; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 1000; ++k) rotate<kVariant>(data, n, c, s);
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 1000);
  }
  std::printf("%-44s %6.2f us  %5.2f ns per vector\n", name, best, best * 1000 / (n / 32));
}

}  // namespace

int main() {
  const int64_t n = 2 * 16 * 32 * 128;  // q and k, bf16
  auto* data = static_cast<uint16_t*>(std::aligned_alloc(64, n * sizeof(uint16_t)));
  __m512 c[4], s[4];
  for (int v = 0; v < 4; ++v) c[v] = _mm512_set1_ps(0.6f), s[v] = _mm512_set1_ps(0.8f);  // a rotation; no |y| is tiny
  std::printf("decode q+k bf16 in place, one thread, best of 30 × 1000; clock %.2f GHz\n", clock_ghz());
  time_variant<Variant::kShipped>("as shipped (zero-word test, exact on a hit)", data, n, c, s);
  time_variant<Variant::kFpclassCheck>("two vfpclassps per vector (before)", data, n, c, s);
  time_variant<Variant::kNoCheck>("no denormal test", data, n, c, s);
  time_variant<Variant::kNoPermute>("no test, no interleaving permute", data, n, c, s);
  time_variant<Variant::kNoConversion>("arithmetic and truncation only", data, n, c, s);
  std::free(data);
}
