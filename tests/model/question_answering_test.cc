// postprocess_qa (src/model/heads/question_answering.cc) on hand-made logits, case by case as
// transformers' utils_qa.postprocess_qa_predictions decides: spans only inside the context, end >=
// start, at most max_answer_length tokens, the n best over all of an example's windows, the v2.0 null
// answer and its threshold, the "empty" placeholder. tests/hf/qa_vs_hf.py checks whole runs against
// a copy of utils_qa.
#include <gtest/gtest.h>

#include <cmath>

#include "model/heads/question_answering.h"

namespace {

using model::SpanFeature;

// A feature of T tokens: [CLS] q [SEP] then context tokens of 3 characters each, then [SEP].
SpanFeature feature(int64_t example, int64_t T, int64_t context_from, int64_t first_char) {
  SpanFeature f;
  f.example = example;
  f.offsets.assign(static_cast<size_t>(T), {-1, -1});
  for (int64_t t = context_from; t < T - 1; ++t) {
    const int64_t c = first_char + 3 * (t - context_from);
    f.offsets[t] = {c, c + 2};
  }
  return f;
}

// (T, 2) logits, all -5 but the given start and end scores.
std::vector<float> logits(int64_t T, std::vector<std::pair<int64_t, float>> starts, std::vector<std::pair<int64_t, float>> ends) {
  std::vector<float> z(static_cast<size_t>(2 * T), -5.0f);
  for (auto [t, v] : starts) z[t * 2] = v;
  for (auto [t, v] : ends) z[t * 2 + 1] = v;
  return z;
}

TEST(PostprocessQa, BestSpanInsideTheContextWithinTheLimits) {
  model::QaPostprocess o;
  o.max_answer_length = 3;
  // The best start is [CLS] (0, outside) and the best end comes before the second start: skipped.
  // Token 4 → 6 is 3 tokens; 4 → 7 would be 4 (too long).
  const auto z = logits(10, {{0, 9}, {4, 3}, {6, 1}}, {{2, 8}, {7, 4}, {6, 2}});
  const auto a = model::postprocess_qa(1, {feature(0, 10, 3, 0)}, {z}, o);
  ASSERT_EQ(a.size(), 1u);
  const model::SpanAnswer& best = a[0].nbest[static_cast<size_t>(a[0].chosen)];
  EXPECT_EQ(best.start, 3);      // token 4 = the context's second token
  EXPECT_EQ(best.end, 3 * 3 + 2);  // token 6's end
  EXPECT_FLOAT_EQ(best.score, 5);
  double total = 0;
  for (const auto& s : a[0].nbest) total += s.probability;
  EXPECT_NEAR(total, 1, 1e-6);
  for (size_t i = 1; i < a[0].nbest.size(); ++i) EXPECT_GE(a[0].nbest[i - 1].score, a[0].nbest[i].score);
}

TEST(PostprocessQa, WindowsOfOneExampleCompete) {
  model::QaPostprocess o;
  const auto a = model::postprocess_qa(
      2, {feature(0, 8, 3, 0), feature(0, 8, 3, 9), feature(1, 8, 3, 0)},
      {logits(8, {{3, 1}}, {{3, 1}}), logits(8, {{4, 6}}, {{5, 1}}), logits(8, {{5, 2}}, {{5, 2}})}, o);
  const model::SpanAnswer& first = a[0].nbest[0];
  EXPECT_EQ(first.start, 9 + 3);  // the second window's token 4
  EXPECT_EQ(first.end, 9 + 6 + 2);
  EXPECT_EQ(a[1].nbest[0].start, 6);
  EXPECT_EQ(static_cast<int64_t>(a[0].nbest.size()), o.n_best);  // 2 windows × (6 × 6 candidates ...) cut to 20
}

TEST(PostprocessQa, NullAnswerAndItsThreshold) {
  model::QaPostprocess o;
  o.version_2 = true;
  // Null score: min over windows of start[0] + end[0] = 2 + 2 = 4; best span 1.5 + 1.5 = 3.
  const std::vector<SpanFeature> f = {feature(0, 6, 3, 0), feature(0, 6, 3, 6)};
  const std::vector<std::vector<float>> z = {logits(6, {{0, 3}, {3, 1.5f}}, {{0, 3}, {3, 1.5f}}),
                                             logits(6, {{0, 2}}, {{0, 2}})};
  auto a = model::postprocess_qa(1, f, z, o);
  EXPECT_EQ(a[0].chosen, -1);  // 4 − 3 = 1 > 0: no answer
  EXPECT_FLOAT_EQ(a[0].null_score_diff, 1);
  EXPECT_TRUE(a[0].nbest[0].null);
  o.null_threshold = 1.5;
  a = model::postprocess_qa(1, f, z, o);
  ASSERT_GE(a[0].chosen, 0);
  EXPECT_EQ(a[0].nbest[a[0].chosen].start, 0);
}

TEST(PostprocessQa, NothingProposedGivesThePlaceholder) {
  model::QaPostprocess o;
  o.max_answer_length = 1;
  // Every context token's start beats its end position: end < start everywhere, or too long.
  SpanFeature f = feature(0, 5, 3, 0);  // one context token (3)
  const auto a = model::postprocess_qa(1, {f}, {logits(5, {}, {})}, o);
  ASSERT_EQ(a[0].nbest.size(), 1u);  // the 1-token span 3 → 3 is proposed
  EXPECT_FALSE(a[0].nbest[0].placeholder);
  f.offsets.assign(5, {-1, -1});  // no context at all
  const auto b = model::postprocess_qa(1, {f}, {logits(5, {}, {})}, o);
  ASSERT_EQ(b[0].nbest.size(), 1u);
  EXPECT_TRUE(b[0].nbest[0].placeholder);
  EXPECT_EQ(b[0].chosen, 0);
  EXPECT_THROW(model::postprocess_qa(1, {f}, {std::vector<float>(3)}, o), std::invalid_argument);
}

}  // namespace
