// The fine-tuning task (src/train/classify_task.cc): epoch orders visit every example once and group
// lengths; batches are padded to their own longest row; the three problem types' losses equal their
// formulas on the model's class logits; and loss_and_grad's gradient is the loss's derivative (a
// directional finite difference along the gradient itself).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "base/random.h"
#include "train/classify_task.h"
#include "train/train_testing.h"

namespace {

using train::ClassifyTask;
using train::ClassifyTaskConfig;
using train::TokenizedExample;

constexpr int64_t kClassifyVocab = 30;

std::vector<TokenizedExample> examples(int64_t n, int64_t labels, const std::string& problem, uint64_t seed) {
  std::vector<TokenizedExample> out;
  for (int64_t i = 0; i < n; ++i) {
    TokenizedExample e;
    const int64_t len = 3 + static_cast<int64_t>(base::mix64(seed + i) % 9);
    for (int64_t t = 0; t < len; ++t) {
      e.ids.push_back(t == 0 ? 2 : 5 + static_cast<int64_t>(base::mix64(seed * 31 + i * 17 + t) % (kClassifyVocab - 5)));
      e.types.push_back(t > len / 2);
    }
    if (problem == "single_label_classification") {
      e.label = static_cast<int64_t>(base::mix64(seed ^ i) % labels);
    } else {
      for (int64_t k = 0; k < labels; ++k) {
        e.values.push_back(problem == "regression" ? static_cast<float>(base::uniform01(seed, i) * 4 - 2)
                                                   : static_cast<float>(base::mix64(seed + 7 * i + k) % 2));
      }
    }
    out.push_back(e);
  }
  return out;
}

model::RoFormerConfig classifier(const std::string& problem, int64_t labels) {
  model::RoFormerConfig c = train_testing::tiny_config(kClassifyVocab, 16);
  c.set_head("text-classification");
  c.problem_type = model::parse_problem_type(problem);
  for (int64_t k = 0; k < labels; ++k) c.labels.push_back(std::string(1, static_cast<char>('A' + k)));
  return c;
}

TEST(ClassifyTask, EpochsVisitEveryExampleOnceInLengthGroupedBatches) {
  const auto train = examples(130, 3, "single_label_classification", 1);
  ClassifyTask task(train, examples(7, 3, "single_label_classification", 2), {model::ProblemType::single_label_classification, 3, 2, 0, 9});
  EXPECT_EQ(task.steps_per_epoch(), 65);
  const auto e0 = task.epoch_order(0), e1 = task.epoch_order(1);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), 130u);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, ClassifyTask(train, {}, {model::ProblemType::single_label_classification, 3, 2, 0, 9}).epoch_order(0));
  // Mega-batches of 50 batches (100 examples) are sorted by length, longest first.
  for (size_t i = 1; i < 100; ++i) EXPECT_GE(train[e0[i - 1]].ids.size(), train[e0[i]].ids.size());
  // Step s of epoch 1 is batch s − 65 of epoch 1's order; rows padded to the batch's longest.
  const train::Batch b = task.train_batch(65 + 3);
  EXPECT_EQ(b.B, 2);
  EXPECT_EQ(b.row0, 6);
  const auto& x = train[e1[6]];
  EXPECT_EQ(b.T, static_cast<int64_t>(std::max(x.ids.size(), train[e1[7]].ids.size())));
  EXPECT_TRUE(std::equal(x.ids.begin(), x.ids.end(), b.ids.begin()));
  EXPECT_EQ(b.targets[0], x.label);
  EXPECT_EQ(std::accumulate(b.attention_mask.begin(), b.attention_mask.begin() + b.T, int64_t{0}),
            static_cast<int64_t>(x.ids.size()));
  // The last batch of an epoch holds the remainder; validation keeps the file order.
  EXPECT_EQ(task.validation_batches().size(), 4u);
  EXPECT_EQ(task.validation_batches().back().B, 1);
}

// Multiple choice: an example is `group` consecutive rows; batches and epochs move whole examples, the
// label of an example's first row is its target, and global rows count model rows.
TEST(ClassifyTask, MultipleChoiceBatchesKeepAnExamplesChoicesTogether) {
  auto rows = examples(3 * 11, 1, "single_label_classification", 4);
  for (size_t i = 0; i < rows.size(); ++i) rows[i].label = i % 3 == 0 ? static_cast<int64_t>(i / 3 % 3) : -1;
  ClassifyTaskConfig c{model::ProblemType::none, 1, 4, 0, 9};
  c.group = 3;
  ClassifyTask task(rows, std::vector<TokenizedExample>(rows.begin(), rows.begin() + 15), c);
  EXPECT_EQ(task.examples(), 11);
  EXPECT_EQ(task.steps_per_epoch(), 3);
  const auto order = task.epoch_order(0);
  EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), 11u);
  const train::Batch b = task.train_batch(1);
  ASSERT_EQ(b.B, 12);
  EXPECT_EQ(b.row0, 12);
  ASSERT_EQ(b.targets.size(), 4u);
  EXPECT_EQ(task.loss_count(b), 4);
  for (int64_t e = 0; e < 4; ++e) {
    const int64_t example = order[4 + e];
    EXPECT_EQ(b.targets[e], example % 3);
    for (int64_t k = 0; k < 3; ++k) {
      const auto& x = rows[example * 3 + k];
      EXPECT_TRUE(std::equal(x.ids.begin(), x.ids.end(), b.ids.begin() + (e * 3 + k) * b.T));
    }
  }
  ASSERT_EQ(task.validation_batches().size(), 2u);  // 5 examples: 4 + 1
  EXPECT_EQ(task.validation_batches()[1].B, 3);
  EXPECT_EQ(task.validation_batches()[1].row0, 12);
  EXPECT_THROW(ClassifyTask(std::vector<TokenizedExample>(rows.begin(), rows.begin() + 4), {}, c), std::invalid_argument);
}

class ClassifyLoss : public testing::TestWithParam<std::string> {};

TEST_P(ClassifyLoss, EqualsItsFormulaAndItsGradientIsTheDerivative) {
  const std::string problem = GetParam();
  const int64_t labels = problem == "regression" ? 1 : 3;
  const auto cfg = classifier(problem, labels);
  train::Model m(cfg);
  m.init_weights(5);
  for (float& p : m.params) p += static_cast<float>(0.05 * (base::uniform01(11, &p - m.params.data()) - 0.5));
  const auto data = examples(6, labels, problem, 3);
  ClassifyTask task(data, data, {model::parse_problem_type(problem), labels, 6, 0, 1});
  const train::Batch& b = task.validation_batches()[0];
  // The loss against its formula on the class logits, under a normaliser of 4 (Σ / 4).
  const double loss = task.evaluate(m, b, 4).loss;
  const float* z = m.head_logits();
  double expected = 0;
  for (int64_t i = 0; i < b.B; ++i) {
    if (problem == "single_label_classification") {
      double lse = 0;
      for (int64_t k = 0; k < labels; ++k) lse += std::exp(static_cast<double>(z[i * labels + k]));
      expected += std::log(lse) - z[i * labels + b.targets[i]];
    } else if (problem == "regression") {
      expected += std::pow(z[i] - b.values[i], 2);
    } else {
      for (int64_t k = 0; k < labels; ++k) {
        const double p = 1 / (1 + std::exp(-static_cast<double>(z[i * labels + k]))), y = b.values[i * labels + k];
        expected -= (y * std::log(p) + (1 - y) * std::log(1 - p)) / static_cast<double>(labels);
      }
    }
  }
  EXPECT_NEAR(loss, expected / 4, 1e-5 * std::max(1.0, std::fabs(expected)));
  // loss_and_grad's gradient g: (L(θ + εg) − L(θ − εg)) / 2ε ≈ |g|².
  m.zero_grad();
  task.loss_and_grad(m, b, 0, 4);
  const std::vector<float> g = m.grads, theta = m.params;
  double g2 = 0;
  for (float v : g) g2 += static_cast<double>(v) * v;
  ASSERT_GT(g2, 0);
  const double eps = 1e-2 / std::sqrt(g2);
  auto shifted = [&](double s) {
    for (size_t i = 0; i < theta.size(); ++i) m.params[i] = theta[i] + static_cast<float>(s * g[i]);
    return task.evaluate(m, b, 4).loss;
  };
  const double numeric = (shifted(eps) - shifted(-eps)) / (2 * eps);
  EXPECT_NEAR(numeric, g2, 0.02 * g2);
}

INSTANTIATE_TEST_SUITE_P(ProblemTypes, ClassifyLoss,
                         testing::Values("single_label_classification", "regression", "multi_label_classification"));

}  // namespace
