// Additive sinusoidal positions (src/ops/position.cc): the table is Vaswani et al.'s formula.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/position.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Ops, SinusoidalTableIsVaswaniEq) {
  const int64_t P = 50, C = 16;
  std::vector<float> table(P * C);
  ops::sinusoidal_table(table.data(), P, C);
  for (int64_t m = 0; m < P; ++m) {
    for (int64_t i = 0; i < C / 2; ++i) {
      const double angle = m / std::pow(10000.0, 2.0 * i / C);
      EXPECT_NEAR(table[m * C + 2 * i], std::sin(angle), 1e-7);
      EXPECT_NEAR(table[m * C + 2 * i + 1], std::cos(angle), 1e-7);
    }
  }
  std::vector<float> x(2 * 3 * C, 1.0f);
  ops::add_positions(x.data(), table.data(), 2, 3, C);
  EXPECT_FLOAT_EQ(x[(1 * 3 + 2) * C + 1], 1.0f + table[2 * C + 1]);  // batch 1, token 2
  EXPECT_THROW(ops::sinusoidal_table(table.data(), P, 15), std::invalid_argument);
}

}  // namespace
