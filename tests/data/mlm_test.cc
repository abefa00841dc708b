// MLM masking: the 15% / 80-10-10 proportions, labels, untouchable positions, determinism.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "data/mlm.h"

namespace {

TEST(MlmMask, ProportionsLabelsAndDeterminism) {
  const int64_t N = 400000, V = 1000, kMask = 3;
  std::vector<int64_t> original(N), ids(N), labels(N);
  std::vector<uint8_t> maskable(N, 1);
  for (int64_t i = 0; i < N; ++i) original[i] = 10 + i % 900;
  for (int64_t i = 0; i < N; i += 10) maskable[i] = 0;  // e.g. [CLS], [SEP], padding
  ids = original;
  const data::MlmMaskConfig cfg{0.15, 0.8, 0.1, kMask, V, -100};
  data::mlm_mask(ids.data(), labels.data(), maskable.data(), N, cfg, 2021);
  int64_t selected = 0, masked = 0, unchanged = 0, random = 0, eligible = 0;
  for (int64_t i = 0; i < N; ++i) {
    eligible += maskable[i];
    if (labels[i] == -100) {
      EXPECT_EQ(ids[i], original[i]) << "unselected positions are untouched";
      continue;
    }
    ASSERT_TRUE(maskable[i]) << "special tokens are never selected";
    EXPECT_EQ(labels[i], original[i]);
    ++selected;
    if (ids[i] == kMask) {
      ++masked;
    } else if (ids[i] == original[i]) {
      ++unchanged;
    } else {
      ++random;
      EXPECT_GE(ids[i], 0);
      EXPECT_LT(ids[i], V);
    }
  }
  EXPECT_NEAR(static_cast<double>(selected) / eligible, 0.15, 0.003);
  EXPECT_NEAR(static_cast<double>(masked) / selected, 0.8, 0.006);
  // A random draw can hit the original token (1/V): count it with the unchanged ones.
  EXPECT_NEAR(static_cast<double>(random) / selected, 0.1, 0.005);
  EXPECT_NEAR(static_cast<double>(unchanged) / selected, 0.1, 0.005);

  std::vector<int64_t> again = original, labels2(N);
  data::mlm_mask(again.data(), labels2.data(), maskable.data(), N, cfg, 2021);
  EXPECT_EQ(again, ids);
  EXPECT_EQ(labels2, labels);
  again = original;
  data::mlm_mask(again.data(), labels2.data(), maskable.data(), N, cfg, 2022);
  EXPECT_NE(labels2, labels);
}

TEST(MlmMask, RejectsBadConfigs) {
  int64_t ids[1] = {5}, labels[1];
  const uint8_t maskable[1] = {1};
  EXPECT_THROW(data::mlm_mask(ids, labels, maskable, 1, {1.5, 0.8, 0.1, 3, 10, -100}, 1), std::invalid_argument);
  EXPECT_THROW(data::mlm_mask(ids, labels, maskable, 1, {0.15, 0.8, 0.3, 3, 10, -100}, 1), std::invalid_argument);
  EXPECT_THROW(data::mlm_mask(ids, labels, maskable, 1, {0.15, 0.8, 0.1, 10, 10, -100}, 1), std::invalid_argument);
  EXPECT_THROW(data::mlm_mask(ids, labels, maskable, 1, {0.15, 0.8, 0.1, 3, 0, -100}, 1), std::invalid_argument);
}

}  // namespace
