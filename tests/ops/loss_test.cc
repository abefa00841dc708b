// Softmax cross-entropy (src/ops/loss.cc): the loss against its definition, the gradient against
// central differences, the ignore index, label smoothing, extreme logits and out-of-range targets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/loss.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

TEST(Ops, CrossEntropyLossGradientsAndIgnoreIndex) {
  std::mt19937_64 rng(6);
  const int64_t N = 5, V = 7, ignore = -100;
  const std::vector<int64_t> targets = {3, ignore, 0, 6, 3};
  Vec logits = random_vec(rng, N * V, 3.0);
  Vec probs(N * V);
  int64_t counted = 0;
  auto loss = [&] {
    return ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V, ignore, &counted);
  };
  const double l = loss();
  EXPECT_EQ(counted, 4);
  // Against the definition: mean over counted rows of log Σ exp − z_target.
  double expected = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore) continue;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[n * V + v]);
    expected += std::log(sum) - logits[n * V + targets[n]];
  }
  EXPECT_NEAR(l, expected / 4, 1e-12);
  Vec dlogits(N * V, 0.0);
  ops::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, ignore, counted, 1.0);
  expect_gradient("dlogits", logits, dlogits, loss);
  for (int64_t v = 0; v < V; ++v) EXPECT_EQ(dlogits[1 * V + v], 0.0) << "ignored row has no gradient";
  // Extreme logits stay finite (max-subtracted softmax).
  Vec big(V, 0.0);
  big[2] = 1e4;
  const int64_t t[1] = {2};
  EXPECT_NEAR(ops::cross_entropy_forward(probs.data(), big.data(), t, 1, V, ignore, &counted), 0.0, 1e-12);
  const int64_t out_of_range[1] = {V};
  EXPECT_THROW(ops::cross_entropy_forward(probs.data(), big.data(), out_of_range, 1, V, ignore, &counted),
               std::out_of_range);
  const int64_t all_ignored[1] = {ignore};
  EXPECT_EQ(ops::cross_entropy_forward(probs.data(), big.data(), all_ignored, 1, V, ignore, &counted), 0.0);
  EXPECT_EQ(counted, 0);
}

// Label smoothing ε: the loss against its definition (the cross-entropy with the target distribution
// (1 − ε)·onehot + ε/V, PyTorch's label_smoothing) and the gradient against central differences.
TEST(Ops, CrossEntropyWithLabelSmoothing) {
  std::mt19937_64 rng(7);
  const int64_t N = 4, V = 9, ignore = -100;
  const double eps = 0.1;
  const std::vector<int64_t> targets = {8, 0, ignore, 4};
  Vec logits = random_vec(rng, N * V, 3.0);
  Vec probs(N * V);
  int64_t counted = 0;
  auto loss = [&] {
    return ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V, ignore, &counted, eps);
  };
  const double l = loss();
  double expected = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore) continue;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[n * V + v]);
    for (int64_t v = 0; v < V; ++v) {
      const double q = (v == targets[n] ? 1 - eps : 0.0) + eps / V;
      expected -= q * (logits[n * V + v] - std::log(sum));
    }
  }
  EXPECT_NEAR(l, expected / 3, 1e-12);
  Vec dlogits(N * V, 0.0);
  ops::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, ignore, counted, 1.0, eps);
  expect_gradient("dlogits", logits, dlogits, loss);
  EXPECT_THROW(ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V, ignore, &counted, 1.0),
               std::invalid_argument);
}

}  // namespace
