// Exactness of the angles: θ_i is the double nearest base^(-2i/d), and cos/sin of m·θ_i are within
// 2e-7 of the exact value for 0 <= m < 2^31 in both the SIMD path (on the fly and table) and the
// scalar reference, measured against __float128.
#include <gtest/gtest.h>

#include <random>

#include "hwy/targets.h"
#include "oracle.h"
#include "rope/angle.h"
#include "rope/cpu/rope_cpu.h"
#include "rope/freqs.h"
#include "rope/plan.h"
#include "rope/rope.hpp"

namespace rope_test {
namespace {

// Positions that stress the reduction: random ones, the ends, powers of two, and m where m·θ_0
// (θ_0 = 1) lands next to a multiple of π/2.
std::vector<int64_t> hard_positions(std::mt19937_64& rng, int n_random) {
  std::vector<int64_t> pos = {0, 1, 2, 3, 4095, 4096, 131071, (int64_t{1} << 31) - 1, (int64_t{1} << 31) - 2};
  for (int e = 0; e < 31; ++e) pos.push_back(int64_t{1} << e);
  // m ≈ k·π/2 for large k: m = round(k·π/2) puts m·1 within 0.5 of a multiple of π/2, and the
  // best rational approximations of π/2 come closer still.
  for (int64_t m : {355LL, 103993LL, 104348LL, 208341LL, 312689LL, 833719LL, 1146408LL, 4272943LL,
                    5419351LL, 80143857LL, 165707065LL, 245850922LL, 411557987LL, 1068966896LL, 2137933792LL}) {
    pos.push_back(m);
  }
  std::uniform_int_distribution<int64_t> u(0, (int64_t{1} << 31) - 1);
  for (int i = 0; i < n_random; ++i) pos.push_back(u(rng));
  return pos;
}

std::vector<double> thetas(double base, int d) { return rope::base_ladder(base, d); }

TEST(RopeExact, ThetaIsTheNearestDouble) {
  for (double base : {10000.0, 500000.0, 1e6, 2.5}) {
    for (int d : {2, 64, 96, 128, 256}) {
      const std::vector<double> theta = thetas(base, d);
      for (int i = 0; i < d / 2; ++i) {
        const quad exact = powq(base, -quad(2 * i) / d);
        const double err = static_cast<double>(fabsq(quad(theta[i]) - exact));
        const double ulp = std::nextafter(theta[i], INFINITY) - theta[i];
        EXPECT_LE(err, 0.5 * ulp * 1.0001) << "base " << base << " d " << d << " i " << i;
      }
    }
  }
}

// Max |cos − exact| and |sin − exact| over positions × pairs for one evaluator.
template <typename Eval>
double max_error(const std::vector<int64_t>& positions, const std::vector<double>& theta, Eval eval) {
  const int n = static_cast<int>(theta.size());
  std::vector<float> c(n + kPairPadding), s(n + kPairPadding);
  double worst = 0;
  for (int64_t m : positions) {
    eval(m, c.data(), s.data());
    for (int i = 0; i < n; ++i) {
      quad ec, es;
      quad_cos_sin(m, theta[i], &ec, &es);
      worst = std::max({worst, static_cast<double>(fabsq(ec - c[i])), static_cast<double>(fabsq(es - s[i]))});
    }
  }
  return worst;
}

TEST(RopeExact, CosSinWithin2e7UpTo2Pow31EveryTarget) {
  std::mt19937_64 rng(2104);
  const std::vector<int64_t> positions = hard_positions(rng, 1500);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (double base : {10000.0, 500000.0, 1e6}) {
      std::vector<double> theta = thetas(base, 128);
      theta.resize(64 + kPairPadding, 0.0);
      const double err = max_error(positions, std::vector<double>(theta.begin(), theta.begin() + 64),
                                   [&](int64_t m, float* c, float* s) {
                                     std::vector<double> pos(theta.size(), static_cast<double>(m));
                                     rope::simd_cos_sin(pos.data(), theta.data(), 64, c, s);
                                   });
      EXPECT_LE(err, 2e-7) << hwy::TargetName(target) << " base " << base;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(RopeExact, ReferenceCosSinWithin2e7) {
  std::mt19937_64 rng(9864);
  const std::vector<int64_t> positions = hard_positions(rng, 1500);
  const std::vector<double> theta = thetas(10000.0, 128);
  const double err = max_error(positions, theta, [&](int64_t m, float* c, float* s) {
    for (size_t i = 0; i < theta.size(); ++i) {
      double dc, ds;
      rope::exact_cos_sin(m, theta[i], &dc, &ds);
      c[i] = static_cast<float>(dc);
      s[i] = static_cast<float>(ds);
    }
  });
  EXPECT_LE(err, 2e-7);
}

TEST(RopeExact, PlanOnTheFlyAndTableAgreeBitwise) {
  // The table is filled by the on-the-fly routine, so every entry is identical.
  rope_config cfg = rope::default_config(128);
  rope::Plan fly(cfg);
  cfg.mode = ROPE_MODE_TABLE;
  cfg.table_positions = 5000;
  rope::Plan table(cfg);
  std::vector<float> c1(64), s1(64);
  for (int64_t m : {0, 1, 17, 4095, 4999}) {
    ASSERT_EQ(rope_plan_cos_sin(fly.get(), m, c1.data(), s1.data()), ROPE_OK);
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(c1[i], table.get()->table_cos[m * 64 + i]);
      EXPECT_EQ(s1[i], table.get()->table_sin[m * 64 + i]);
    }
  }
}

// ROPE_DTYPE_F64 keeps cos/sin in double: rotating the pairs (1, 0) at position m gives
// (cos m·θ_i, sin m·θ_i) within 5e-16 of the exact values up to 2^48, through apply (the public
// path), for an on-the-fly and a TABLE plan alike (fp64 ignores the fp32 table).
TEST(RopeExact, F64RotationCosSinWithin5e16UpTo2Pow48) {
  std::mt19937_64 rng(1648);
  std::vector<int64_t> positions = hard_positions(rng, 300);
  for (int e = 31; e < 48; ++e) positions.push_back((int64_t{1} << e) + static_cast<int64_t>(rng() % 1000));
  positions.push_back(ROPE_MAX_POSITION - 1);
  for (const bool table : {false, true}) {
    rope_config cfg = rope::default_config(128);
    if (table) {
      cfg.mode = ROPE_MODE_TABLE;
      cfg.table_positions = 5000;
    }
    rope::Plan plan(cfg);
    const std::vector<double> theta = plan.inv_freq();
    double worst = 0;
    for (int64_t m : positions) {
      if (table && m >= 5000) continue;
      std::vector<double> x(128, 0.0);
      for (int i = 0; i < 64; ++i) x[2 * i] = 1.0;
      plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, rope::offset_positions(m), rope::bshd(x.data(), ROPE_DTYPE_F64, 1, 1, 1, 128));
      for (int i = 0; i < 64; ++i) {
        quad ec, es;
        quad_cos_sin(m, theta[i], &ec, &es);
        worst = std::max({worst, static_cast<double>(fabsq(ec - x[2 * i])), static_cast<double>(fabsq(es - x[2 * i + 1]))});
      }
    }
    EXPECT_LE(worst, 5e-16) << (table ? "table" : "on the fly");
  }
}

TEST(RopeExact, NaiveFp32AnglesAreFarWorse) {
  // What the issue says everyone else does: m·θ in fp32. At m = 131071 the error is ~1e-2.
  const std::vector<double> theta = thetas(10000.0, 128);
  double worst = 0;
  const int64_t m = 131071;
  for (double t : theta) {
    const float angle = static_cast<float>(m) * static_cast<float>(t);
    quad ec, es;
    quad_cos_sin(m, t, &ec, &es);
    worst = std::max(worst, static_cast<double>(fabsq(ec - std::cos(angle))));
  }
  EXPECT_GT(worst, 1e-3);
}

}  // namespace
}  // namespace rope_test
