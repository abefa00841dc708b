// Embedding lookup (src/ops/embedding.cc): the table gradient (repeated ids accumulate) against
// central differences, and out-of-range ids rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/embedding.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Ops, EmbeddingGradientsAndRangeCheck) {
  std::mt19937_64 rng(5);
  const int64_t V = 6, C = 3;
  const std::vector<int64_t> ids = {2, 0, 2, 5};  // a repeated id accumulates
  const int64_t N = static_cast<int64_t>(ids.size());
  Vec table = random_vec(rng, V * C);
  const Vec g = random_vec(rng, N * C);
  Vec y(N * C);
  auto loss = [&] {
    ops::embedding_forward(y.data(), ids.data(), table.data(), N, V, C);
    return dot(y, g);
  };
  loss();
  Vec dtable(V * C, 0.0);
  ops::embedding_backward(dtable.data(), g.data(), ids.data(), N, C);
  expect_gradient("dtable", table, dtable, loss);
  const std::vector<int64_t> bad = {1, 6};
  EXPECT_THROW(ops::embedding_forward(y.data(), bad.data(), table.data(), 2, V, C), std::out_of_range);
  const std::vector<int64_t> negative = {-1};
  EXPECT_THROW(ops::embedding_forward(y.data(), negative.data(), table.data(), 1, V, C), std::out_of_range);
}

}  // namespace
