// The fp32 vector maths (src/ops/vmath.h): exp, erf and erfc against the C library over dense ranges,
// tails, subnormals and specials; quantisation, bf16 rounding and the AdamW step against their scalar
// formulas; on every SIMD target.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/vmath.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Vmath, ErfAndErfcMatchStdOverADenseRangeTailsAndSpecials) {
  for_each_simd_target([] {
    std::vector<float> x;
    for (int64_t i = -100000; i <= 100000; ++i) x.push_back(static_cast<float>(i * 1e-4));  // [-10, 10]
    for (float t : {4.0f, 4.5f, 6.0f, 9.99f, 26.0f, 1e10f, 3.4e38f}) {
      x.push_back(t);
      x.push_back(-t);
    }
    const float tiny[] = {1e-45f, 1e-40f, 1.17549435e-38f, 1e-20f, 1e-7f};  // subnormals to small normals
    for (float t : tiny) {
      x.push_back(t);
      x.push_back(-t);
    }
    std::vector<float> erf(x.size()), erfc(x.size());
    ops::erf_f32(erf.data(), x.data(), static_cast<int64_t>(x.size()));
    ops::erfc_f32(erfc.data(), x.data(), static_cast<int64_t>(x.size()));
    double erf_err = 0, erfc_err = 0, erfc_rel_2 = 0, erfc_rel_4 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double xd = x[i];
      erf_err = std::max(erf_err, std::fabs(erf[i] - std::erf(xd)));
      erfc_err = std::max(erfc_err, std::fabs(erfc[i] - std::erfc(xd)));
      const double rel = std::fabs(erfc[i] - std::erfc(xd)) / std::erfc(xd);
      if (xd >= 0.875 && xd < 2) erfc_rel_2 = std::max(erfc_rel_2, rel);
      if (xd >= 2 && xd < 4) erfc_rel_4 = std::max(erfc_rel_4, rel);
      ASSERT_EQ(std::signbit(erf[i]), std::signbit(x[i])) << x[i];
    }
    EXPECT_LE(erf_err, 1e-7);
    EXPECT_LE(erfc_err, 1.5e-7);
    EXPECT_LE(erfc_rel_2, 1e-5);  // the tail does not cancel: 1 − erf would be off by ~1e-7/erfc
    EXPECT_LE(erfc_rel_4, 2e-4);
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), 0.0f, -0.0f};
    float e[5], c[5];
    ops::erf_f32(e, special, 5);
    ops::erfc_f32(c, special, 5);
    EXPECT_TRUE(std::isnan(e[0]));
    EXPECT_TRUE(std::isnan(c[0]));
    EXPECT_EQ(e[1], 1.0f);
    EXPECT_EQ(c[1], 0.0f);
    EXPECT_EQ(e[2], -1.0f);
    EXPECT_EQ(c[2], 2.0f);
    EXPECT_EQ(e[3], 0.0f);
    EXPECT_FALSE(std::signbit(e[3]));
    EXPECT_TRUE(std::signbit(e[4]));
    EXPECT_EQ(c[3], 1.0f);
    EXPECT_EQ(c[4], 1.0f);
  });
}

TEST(Vmath, ExpMatchesStdExpOverTheFloatRangeAndTails) {
  for_each_simd_target([] {
    std::vector<float> x;
    for (double v = -103.9; v <= 88.72; v += 7.3e-4) x.push_back(static_cast<float>(v));
    for (float t : {-87.0f, -87.33654f, -88.0f, -100.0f, -103.9f, 0.0f, 1e-8f, -1e-8f, 88.72f}) x.push_back(t);
    std::vector<float> y(x.size());
    ops::exp_f32(y.data(), x.data(), static_cast<int64_t>(x.size()));
    double worst_ulp = 0, worst_subnormal = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      const float rf = static_cast<float>(ref);
      if (rf >= std::numeric_limits<float>::min()) {
        const double ulp = std::nextafter(rf, std::numeric_limits<float>::infinity()) - rf;
        worst_ulp = std::max(worst_ulp, std::fabs(y[i] - ref) / ulp);
      } else {  // gradual underflow, in units of the smallest subnormal
        worst_subnormal = std::max(worst_subnormal, std::fabs(y[i] - ref) / 0x1p-149);
      }
    }
    EXPECT_LE(worst_ulp, 2.0);
    EXPECT_LE(worst_subnormal, 8.0);
    // Every length: the partial last vector gives the same values as full vectors.
    for (int64_t n = 1; n <= 40; ++n) {
      std::vector<float> part(x.begin(), x.begin() + n);
      ops::exp_f32(part.data(), part.data(), n);  // in place
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], y[i]) << n;
    }
    const float special[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::infinity(), 88.8f, -104.5f, -1e30f};
    float e[7];
    ops::exp_f32(e, special, 7);
    EXPECT_EQ(e[0], 1.0f);
    EXPECT_TRUE(std::isnan(e[1]));
    EXPECT_EQ(e[2], 0.0f);
    EXPECT_EQ(e[3], std::numeric_limits<float>::infinity());
    EXPECT_EQ(e[4], std::numeric_limits<float>::infinity());
    EXPECT_EQ(e[5], 0.0f);
    EXPECT_EQ(e[6], 0.0f);
  });
}

// Every SIMD target takes the AdamW step as the scalar fp32 formula does, bit for bit (each operation
// rounded to fp32, no fused multiply-add), over lengths with partial vectors; and that formula stays
// within fp32 rounding of the step in double.
TEST(Vmath, AdamWStepIsTheFp32FormulaOnEveryTarget) {
  auto bits_of = [](float v) { uint32_t b; std::memcpy(&b, &v, 4); return b; };
  ops::AdamWStep s{};
  s.decay = 1.0f - 1e-3f * 0.01f, s.beta1 = 0.9f, s.one_minus_beta1 = 0.1f, s.beta2 = 0.999f;
  s.one_minus_beta2 = 0.001f, s.step_size = 1e-3f / 0.19f, s.sqrt_bias_correction2 = std::sqrt(0.002f), s.eps = 1e-8f;
  for_each_simd_target([&] {
    std::mt19937_64 rng(11);
    std::normal_distribution<float> z;
    for (int64_t n : {1, 7, 16, 33, 1000}) {
      std::vector<float> p(n), m(n), v(n), g(n);
      for (int64_t i = 0; i < n; ++i) p[i] = z(rng), m[i] = 0.1f * z(rng), v[i] = 0.01f * std::fabs(z(rng)), g[i] = z(rng);
      if (n > 2) g[0] = 0.0f, v[0] = 0.0f, m[0] = 0.0f;  // a parameter that has never had a gradient
      const std::vector<float> p0 = p, m0 = m, v0 = v;
      ops::adamw_step_f32(p.data(), m.data(), v.data(), g.data(), n, s);
      for (int64_t i = 0; i < n; ++i) {
        SCOPED_TRACE(testing::Message() << "n " << n << " i " << i);
        const float mi = s.beta1 * m0[i] + s.one_minus_beta1 * g[i];
        const float vi = s.beta2 * v0[i] + s.one_minus_beta2 * g[i] * g[i];
        const float pi = p0[i] * s.decay - s.step_size * (mi / (std::sqrt(vi) / s.sqrt_bias_correction2 + s.eps));
        ASSERT_EQ(bits_of(m[i]), bits_of(mi));
        ASSERT_EQ(bits_of(v[i]), bits_of(vi));
        ASSERT_EQ(bits_of(p[i]), bits_of(pi));
        const double md = 0.9 * m0[i] + 0.1 * g[i], vd = 0.999 * v0[i] + 0.001 * double(g[i]) * g[i];
        const double pd = p0[i] * (1 - 1e-5) - 1e-3 / 0.19 * md / (std::sqrt(vd) / std::sqrt(0.002) + 1e-8);
        ASSERT_NEAR(p[i], pd, 1e-6 * std::max(1.0, std::fabs(pd)));
      }
    }
  });
}

// bf16 training's gradient census: nonzero values (NaN included, ±0 not) and those below each bound,
// on every target, for every length (the vector body and the scalar tail), against a plain count.
TEST(Vmath, CountSmallCountsNonzeroValuesBelowEachBound) {
  std::mt19937_64 rng(77);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> x(203);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, 0x1p-149f, -0x1p-127f, 0x1p-126f, -0x1p-30f, 0x1p-24f, 1.5f};
  for (float& v : x) v = specials[pick(rng)];
  const float below[2] = {0x1p-126f, 0x1p-24f};
  for_each_simd_target([&] {
    for (const int64_t n : {0, 1, 15, 16, 17, 64, 203}) {
      int64_t expected[3] = {0, 0, 0}, counts[3] = {1, 2, 3};
      for (int64_t i = 0; i < n; ++i) {
        const bool nonzero = !(x[i] == 0.0f);
        expected[0] += nonzero;
        expected[1] += nonzero && std::fabs(x[i]) < below[0];
        expected[2] += nonzero && std::fabs(x[i]) < below[1];
      }
      ops::count_small_f32(x.data(), n, below, counts);
      EXPECT_EQ(counts[0], 1 + expected[0]) << n;  // added to what counts held
      EXPECT_EQ(counts[1], 2 + expected[1]) << n;
      EXPECT_EQ(counts[2], 3 + expected[2]) << n;
    }
  });
}

}  // namespace

// Every SIMD target quantises as the scalar formula does: x·(1/s) and + z each rounded to fp32, then
// to the nearest integer (ties to even), clamped to [0, 255]; inputs include exact ties, values that
// clamp at both ends, and lengths with partial vectors.
TEST(Vmath, QuantizeU8IsTheRoundedClampedAffineMap) {
  for_each_simd_target([] {
    std::mt19937_64 rng(9);
    std::normal_distribution<float> z(0.2f, 2.0f);
    const float inv_scale = 255.0f / 9.0f, zero_point = 100.0f;
    for (int64_t n : {1, 7, 16, 33, 1000}) {
      std::vector<float> x(n);
      for (float& v : x) v = z(rng);
      if (n > 4) x[0] = 0.5f / inv_scale, x[1] = 1.5f / inv_scale, x[2] = -1e3f, x[3] = 1e3f;  // ties, clamps
      std::vector<uint8_t> q(n);
      ops::quantize_u8_f32(x.data(), n, inv_scale, zero_point, q.data());
      for (int64_t i = 0; i < n; ++i) {
        const float scaled = x[i] * inv_scale;
        const float expected = std::clamp(std::nearbyint(scaled + zero_point), 0.0f, 255.0f);
        ASSERT_EQ(q[i], static_cast<uint8_t>(expected)) << "n " << n << " i " << i << " x " << x[i];
      }
    }
  });
}

TEST(Vmath, FiniteRangeIsTheMinAndMaxAndFlagsNanAndInfinity) {
  for_each_simd_target([] {
    std::mt19937_64 rng(7);
    std::normal_distribution<float> z(0.5f, 3.0f);
    // Partial vectors at the end; past 16,384 the scan is split into chunks across threads.
    for (int64_t n : {0, 1, 5, 16, 17, 100, 1000, 16385, 70001}) {
      std::vector<float> x(n);
      for (float& v : x) v = z(rng);
      float lo = 0, hi = 0;
      ASSERT_TRUE(ops::finite_range_f32(x.data(), n, &lo, &hi)) << n;
      EXPECT_EQ(lo, n ? *std::min_element(x.begin(), x.end()) : INFINITY) << n;
      EXPECT_EQ(hi, n ? *std::max_element(x.begin(), x.end()) : -INFINITY) << n;
      for (float bad : {NAN, INFINITY, -INFINITY}) {
        for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
          if (n == 0) continue;
          std::vector<float> y = x;
          y[at] = bad;
          EXPECT_FALSE(ops::finite_range_f32(y.data(), n, &lo, &hi)) << n << " at " << at;
        }
      }
    }
  });
}

// Every SIMD target (and AVX512-BF16's conversion, under AVX3 where the CPU has it) rounds x·scale to
// bf16 as an independent rule does: of the two bf16 values around the fp32 product, the nearer, ties
// to the even one; NaN stays a NaN of its sign, ±inf stays, a subnormal product becomes ±0. Inputs
// include exact ties both ways, subnormals, the overflow to infinity and partial vectors.
TEST(Vmath, Bf16FromF32RoundsToNearestEven) {
  auto bits_of = [](float v) { uint32_t b; std::memcpy(&b, &v, 4); return b; };
  auto value_of = [](uint32_t hi16) { const uint32_t b = hi16 << 16; float v; std::memcpy(&v, &b, 4); return v; };
  auto from_bits = [](uint32_t b) { float v; std::memcpy(&v, &b, 4); return v; };
  for_each_simd_target([&] {
    std::mt19937_64 rng(5);
    std::normal_distribution<float> z(0.0f, 3.0f);
    for (int64_t n : {1, 9, 16, 37, 1000}) {
      std::vector<float> x(n);
      for (float& v : x) v = z(rng);
      if (n > 8) {
        x[0] = from_bits(0x3f808000u), x[1] = from_bits(0x3f818000u);  // ties: to 0x3f80 and to 0x3f82
        x[2] = from_bits(0x00012345u), x[3] = std::numeric_limits<float>::max();
        x[4] = -std::numeric_limits<float>::infinity(), x[5] = -std::numeric_limits<float>::quiet_NaN();
        x[6] = from_bits(0x7f800001u), x[7] = -0.0f;  // a signalling NaN; negative zero
        x[8] = from_bits(0x80400000u);                 // a negative subnormal
      }
      for (float scale : {1.0f, 0.125f, 0.3f}) {
        std::vector<uint16_t> out(n);
        ops::bf16_from_f32(out.data(), x.data(), n, scale);
        for (int64_t i = 0; i < n; ++i) {
          const float v = x[i] * scale;
          SCOPED_TRACE(testing::Message() << "n " << n << " i " << i << " scale " << scale << " x " << x[i]);
          if (std::isnan(v)) {
            ASSERT_TRUE(std::isnan(value_of(out[i])));
            ASSERT_EQ(out[i] >> 15, bits_of(v) >> 31);
            continue;
          }
          if (std::fabs(v) < std::numeric_limits<float>::min()) {  // subnormal (or zero): ±0
            ASSERT_EQ(out[i], (bits_of(v) >> 16) & 0x8000u);
            continue;
          }
          const uint32_t down = bits_of(v) >> 16;  // toward zero; up is the next bf16 away from zero
          const double d_down = std::fabs(static_cast<double>(v) - value_of(down));
          // Past the largest finite bf16 the next value would be ±2^128 (it rounds to infinity).
          const double up = ((down + 1) & 0x7fffu) == 0x7f80u ? std::copysign(std::ldexp(1.0, 128), v) : value_of(down + 1);
          const double d_up = std::isinf(v) ? 1e300 : std::fabs(static_cast<double>(v) - up);
          const uint32_t expected = d_down < d_up ? down : d_up < d_down ? down + 1 : (down % 2 == 0 ? down : down + 1);
          ASSERT_EQ(out[i], expected);
        }
      }
    }
  });
}
