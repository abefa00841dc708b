// text::encode_windows (src/text/windows.cc): the windows of a long second text as the tokenizers
// library's only_second truncation with stride and overflowing tokens gives them (the stride is
// checked only when the context needs several windows). The first window is the pair truncated
// only_second to max_length; each window holds W = max_length − |question| − 3
// context tokens, consecutive windows share `stride` of them, the last reaches the end; offsets and
// token types follow the pair encoding; second_spans groups "##" pieces into words.
#include <gtest/gtest.h>

#include <string>

#include "text/windows.h"

namespace {

using namespace text;

const RoFormerTokenizer& bert_tokenizer() {
  static const RoFormerTokenizer t =
      RoFormerTokenizer::load(std::string(ROFORMER_FIXTURES) + "/tokenizer", LoadOptions{"", false});
  return t;
}

TEST(Windows, CoverTheSecondTextWithTheStride) {
  const std::string question = "who said hello?";
  std::string context;
  for (int i = 0; i < 30; ++i) context += (i ? " " : "") + std::string(i % 3 ? "the quick fox" : "jumping dog");
  EncodeOptions plain;
  plain.add_special_tokens = false;
  const Encoding q = bert_tokenizer().encode(question, plain), c = bert_tokenizer().encode(context, plain);
  const int64_t max_length = 24, stride = 5, W = max_length - static_cast<int64_t>(q.size()) - 3;
  const std::vector<Encoding> windows = encode_windows(bert_tokenizer(), question, context, max_length, stride);
  ASSERT_GT(windows.size(), 2u);
  EncodeOptions only_second;
  only_second.truncation = Truncation::OnlySecond;
  only_second.max_length = max_length;
  const Encoding first = bert_tokenizer().encode_pair(question, context, only_second);
  EXPECT_EQ(windows[0].input_ids, first.input_ids);
  EXPECT_EQ(windows[0].token_type_ids, first.token_type_ids);
  EXPECT_EQ(windows[0].offsets, first.offsets);
  int64_t begin = 0;
  for (size_t k = 0; k < windows.size(); ++k, begin += W - stride) {
    const Encoding& w = windows[k];
    const int64_t n = std::min<int64_t>(W, static_cast<int64_t>(c.size()) - begin);
    ASSERT_EQ(static_cast<int64_t>(w.size()), static_cast<int64_t>(q.size()) + 3 + n) << k;
    for (int64_t t = 0; t < n; ++t) {
      const size_t at = q.size() + 2 + static_cast<size_t>(t);
      EXPECT_EQ(w.input_ids[at], c.input_ids[begin + t]);
      EXPECT_EQ(w.offsets[at], c.offsets[begin + t]);
      EXPECT_TRUE(in_second(w, at));
    }
    EXPECT_FALSE(in_second(w, w.size() - 1));  // the closing [SEP]
    EXPECT_FALSE(in_second(w, 1));             // the question
    if (k + 1 == windows.size()) EXPECT_EQ(begin + n, static_cast<int64_t>(c.size()));
  }
  // Words: "jumping" is two pieces (jump ##ing), one word; spans outside the context are -1.
  const SecondSpans s = second_spans(windows[0]);
  const size_t at = q.size() + 2;
  EXPECT_EQ(s.words[0], -1);
  EXPECT_EQ(s.offsets[0], (std::array<int64_t, 2>{-1, -1}));
  EXPECT_EQ(s.words[at], 0);
  size_t t = at + 1;
  while (windows[0].tokens[t].rfind("##", 0) == 0) EXPECT_EQ(s.words[t++], 0);
  EXPECT_GT(t, at + 1);
  EXPECT_EQ(s.words[t], 1);
}

TEST(Windows, AQuestionThatLeavesNoRoomIsRefused) {
  EXPECT_NO_THROW(encode_windows(bert_tokenizer(), "a b", "c d e f g", 9, 3));  // W = 4 > 3
  EXPECT_EQ(encode_windows(bert_tokenizer(), "a b", "c d e", 8, 3).size(), 1u);  // W = 3 holds the context: no stride needed
  try {
    encode_windows(bert_tokenizer(), "a b", "c d e f g", 8, 3);  // W = 3, 5 context tokens
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "the question has 2 tokens, which leaves 3 tokens of the context a window of 8: "
                                     "a window must hold more than the stride of 3");
  }
  EXPECT_THROW(encode_windows(bert_tokenizer(), "a b c d e", "f", 8, 0), std::invalid_argument);  // W = 0
  // An empty context is one window [CLS] q [SEP] [SEP].
  EXPECT_EQ(encode_windows(bert_tokenizer(), "a", "", 8, 2).at(0).size(), 4u);
}

}  // namespace
