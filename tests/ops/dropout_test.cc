// Inverted dropout (src/ops/dropout.cc): the kept fraction, the scale, the mask regenerated in the
// backward, and the identity at p = 0.
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

}  // namespace
