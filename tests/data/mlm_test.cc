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

// Whole-word masking: a word's tokens are selected together; the per-token rate is still ~15%; the
// selection of a word is its first token's draw, so a slice starting at a word start masks as the whole.
TEST(MlmMask, WholeWordsAreSelectedTogether) {
  const int64_t N = 200000, V = 1000, kMask = 3;
  std::vector<int64_t> original(N), ids(N), labels(N);
  std::vector<uint8_t> maskable(N, 1), word_start(N);
  for (int64_t i = 0; i < N; ++i) {
    original[i] = 10 + i % 900;
    word_start[i] = (i * 7919) % 5 < 2;  // words of 1 to several tokens
  }
  ids = original;
  const data::MlmMaskConfig cfg{0.15, 0.8, 0.1, kMask, V, -100};
  data::mlm_mask(ids.data(), labels.data(), maskable.data(), N, cfg, 7, 0, word_start.data());
  int64_t selected = 0, masked = 0, words = 0, split_words = 0;
  for (int64_t i = 0; i < N;) {
    int64_t j = i + 1;
    while (j < N && !word_start[j]) ++j;
    int64_t in_word = 0;
    for (int64_t k = i; k < j; ++k) in_word += labels[k] != -100;
    split_words += in_word != 0 && in_word != j - i;
    selected += in_word;
    ++words;
    i = j;
  }
  for (int64_t i = 0; i < N; ++i) masked += ids[i] == kMask;
  EXPECT_EQ(split_words, 0) << "of " << words << " words";
  EXPECT_NEAR(static_cast<double>(selected) / N, 0.15, 0.006);
  EXPECT_NEAR(static_cast<double>(masked) / selected, 0.8, 0.01);
  // A slice from a word start, with its offset as the first counter, gets the whole array's masks.
  int64_t from = 1000;
  while (!word_start[from]) ++from;
  std::vector<int64_t> slice(original.begin() + from, original.begin() + from + 500), slice_labels(500);
  data::mlm_mask(slice.data(), slice_labels.data(), maskable.data(), 500, cfg, 7, static_cast<uint64_t>(from),
                 word_start.data() + from);
  EXPECT_EQ(slice, std::vector<int64_t>(ids.begin() + from, ids.begin() + from + 500));
  EXPECT_EQ(slice_labels, std::vector<int64_t>(labels.begin() + from, labels.begin() + from + 500));
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
