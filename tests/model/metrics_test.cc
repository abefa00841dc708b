// Fine-tuning metrics (src/train/metrics.cc) against scikit-learn 1.9.1 and SciPy 1.17.1 on fixed
// vectors. The reference values came from:
//   accuracy_score, f1_score(average="macro"), matthews_corrcoef on T3/P3; f1_score and
//   matthews_corrcoef on TB/PB; scipy.stats.pearsonr and spearmanr (ties) on X/Y.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/metrics.h"

namespace {

const std::vector<int64_t> T3 = {0, 1, 2, 2, 1, 0, 1, 2, 0, 0, 1, 2, 2, 1}, P3 = {0, 2, 2, 1, 1, 0, 0, 2, 0, 1, 1, 2, 0, 1};
const std::vector<int64_t> TB = {1, 0, 1, 1, 0, 0, 1, 0, 1, 1}, PB = {1, 0, 0, 1, 1, 0, 1, 0, 1, 0};
const std::vector<double> X = {0.5, 2.0, -1.0, 3.5, 2.0, 0.0, 4.25, -0.5}, Y = {1.0, 1.5, -2.0, 3.0, 2.5, 0.5, 2.0, 0.0};

TEST(Metrics, MatchScikitLearnAndSciPy) {
  EXPECT_NEAR(model::accuracy(T3, P3), 0.6428571428571429, 1e-15);
  EXPECT_NEAR(model::f1_macro(T3, P3, 3), 0.6444444444444444, 1e-15);
  EXPECT_NEAR(model::matthews(T3, P3, 3), 0.46923076923076923, 1e-15);
  EXPECT_NEAR(model::f1_binary(TB, PB), 0.7272727272727273, 1e-15);
  EXPECT_NEAR(model::matthews(TB, PB, 2), 0.408248290463863, 1e-15);
  EXPECT_NEAR(model::pearson(X, Y), 0.8527086826726235, 1e-15);
  EXPECT_NEAR(model::spearman(X, Y), 0.9101959590540767, 1e-15);
}

TEST(Metrics, DegenerateCasesFollowScikitLearnAndSciPy) {
  EXPECT_EQ(model::matthews({1, 1, 0}, {1, 1, 1}, 2), 0.0);  // a constant prediction
  EXPECT_EQ(model::f1_binary({0, 0}, {0, 0}), 0.0);          // no positive anywhere (zero_division=0)
  EXPECT_TRUE(std::isnan(model::pearson({1, 1, 1}, {1, 2, 3})));
  EXPECT_THROW(model::accuracy({}, {}), std::invalid_argument);
  EXPECT_THROW(model::f1_macro({0, 3}, {0, 1}, 3), std::invalid_argument);
}

TEST(Metrics, ByProblemType) {
  // Two classes from logits: argmax; multi-label: logit > 0; regression: the one output.
  const std::vector<float> logits = {2, 1, 0, 3, -1, 4};
  auto m = model::classification_metrics(model::ProblemType::single_label_classification, 2, logits, {0, 1, 0}, {});
  EXPECT_DOUBLE_EQ(m.at("accuracy"), 2.0 / 3);
  EXPECT_TRUE(m.count("f1") && m.count("f1_macro") && m.count("mcc"));
  // Predicted sets {0, 1}, {1}, {1} against {0}, {1}, {}: one exact match; tp 2, fp 2, fn 0.
  m = model::classification_metrics(model::ProblemType::multi_label_classification, 2, logits, {}, {1, 0, 0, 1, 0, 0});
  EXPECT_DOUBLE_EQ(m.at("accuracy"), 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.at("f1_micro"), 2.0 * 2 / (2 * 2 + 2));
  m = model::classification_metrics(model::ProblemType::regression, 1, {1, 2, 3}, {}, {1, 2, 4});
  EXPECT_NEAR(m.at("mse"), 1.0 / 3, 1e-15);
  EXPECT_NEAR(m.at("spearman"), 1.0, 1e-15);
  EXPECT_TRUE(model::higher_is_better("pearson"));
  EXPECT_FALSE(model::higher_is_better("mse"));
}

}  // namespace
