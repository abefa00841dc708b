// Inverted dropout (src/ops/dropout.cc): the kept fraction, the scale, the mask regenerated in the
// backward, the identity at p = 0, and the vectorised mask equal to base::Keep's element by element
// on every SIMD target.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "base/random.h"
#include "ops/dropout.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Ops, DropoutKeepsTheRightFractionAndRegeneratesItsMask) {
  const int64_t n = 200000;
  const double p = 0.1;
  std::vector<float> x(n, 1.0f), y(n), dx(n, 0.0f), g(n, 2.0f);
  ops::dropout_forward(y.data(), x.data(), n, p, 42);
  ops::dropout_backward(dx.data(), g.data(), n, p, 42);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(y[i], 1.0f / 0.9f);
      EXPECT_FLOAT_EQ(dx[i], 2.0f / 0.9f);  // the backward regenerates the same mask
    } else {
      EXPECT_EQ(dx[i], 0.0f);
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.9, 0.005);
  std::vector<float> y2(n);
  ops::dropout_forward(y2.data(), x.data(), n, p, 43);
  EXPECT_NE(y, y2) << "another seed, another mask";
  ops::dropout_forward(y2.data(), x.data(), n, 0.0, 7);
  EXPECT_EQ(y2, x) << "p = 0 is the identity";
}

// The integer keep decision is uniform01(seed, i) >= p, on random draws and on draws exactly at p
// (p = k·2^-53 for the k of a draw, and one step either side of it).
TEST(Ops, KeepIsTheUniformDrawAgainstP) {
  std::mt19937_64 rng(5);
  for (double p : {0.0, 0.1, 0.5, 0.9, 1.0 / 3.0}) {
    const base::Keep keep(77, p);
    for (uint64_t i = 0; i < 100000; ++i) ASSERT_EQ(keep(i), base::uniform01(77, i) >= p) << "p " << p << " i " << i;
  }
  for (int trial = 0; trial < 1000; ++trial) {
    const uint64_t seed = rng(), i = rng();
    const uint64_t k = base::mix64(base::mix64(seed) ^ i) >> 11;
    for (uint64_t t : {k - 1, k, k + 1}) {
      const double p = std::ldexp(static_cast<double>(t), -53);
      ASSERT_EQ(base::Keep(seed, p)(i), base::uniform01(seed, i) >= p) << "k " << k << " t " << t;
    }
  }
}

// The fp32 path decides eight or sixteen elements at a time: its outputs equal base::Keep's decision
// applied one element at a time, bit for bit, for random seeds, rates, counter offsets (up to 2^64 − 1,
// where the counter wraps) and lengths with tails, forward (written) and backward (accumulated; a
// dropped element keeps its value, −0 included), on every SIMD target.
TEST(Ops, VectorisedDropoutMaskIsKeepsElementByElement) {
  std::mt19937_64 rng(8);
  std::normal_distribution<float> z;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
    const double p = trial % 5 == 0 ? 0.5 : std::uniform_real_distribution<double>(0.01, 0.95)(rng);
    const uint64_t seed = rng(), first = trial % 4 == 0 ? ~uint64_t{0} - rng() % 200 : rng() % 100000;
    std::vector<float> x(n), acc0(n);
    for (float& v : x) v = z(rng);
    for (float& v : acc0) v = trial % 3 == 0 ? -0.0f : z(rng);
    const base::Keep keep(seed, p);
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    std::vector<float> want(n), want_acc = acc0;
    for (int64_t i = 0; i < n; ++i) {
      const bool kept = keep(first + static_cast<uint64_t>(i));
      want[i] = kept ? x[i] * scale : 0.0f;
      if (kept) want_acc[i] += x[i] * scale;
    }
    for_each_simd_target([&] {
      SCOPED_TRACE(testing::Message() << "n " << n << " p " << p << " first " << first);
      std::vector<float> got(n, 9.0f), got_acc = acc0;
      ops::dropout_apply(got.data(), x.data(), n, p, seed, first, false);
      ops::dropout_apply(got_acc.data(), x.data(), n, p, seed, first, true);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::signbit(got[i]), std::signbit(want[i])) << i;
        ASSERT_EQ(got[i], want[i]) << i;
        ASSERT_EQ(std::signbit(got_acc[i]), std::signbit(want_acc[i])) << i;
        ASSERT_EQ(got_acc[i], want_acc[i]) << i;
      }
      std::vector<float> whole(n);  // the parallel forward: the same mask
      ops::dropout_forward(whole.data(), x.data(), n, p, seed, first);
      ASSERT_EQ(whole, want);
    });
  }
}

}  // namespace
