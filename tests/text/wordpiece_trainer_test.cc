// WordPiece vocabulary learning (src/text/wordpiece_trainer.cc): the merge order worked out by hand on
// the HF course's corpus, min_frequency, determinism, jieba words kept whole, and that every word of
// the training text tokenises without [UNK]. tests/hf/vocab_vs_hf.py checks that transformers'
// RoFormerTokenizer reads the written directory as we do, and compares with HF tokenizers' trainer.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <set>

#include "base/error.h"
#include "temp_files.h"
#include "text/roformer_tokenizer.h"
#include "text/wordpiece.h"
#include "text/wordpiece_trainer.h"

namespace {

using Strings = std::vector<std::string>;
using namespace text;

// hug ×10, pug ×5, pun ×12, bun ×4, hugs ×5.
WordPieceTrainer hug_corpus(WordPieceTrainerOptions o) {
  WordPieceTrainer t(std::move(o));
  for (int i = 0; i < 10; ++i) t.add_line("Hug");  // lower-cased by default
  for (int i = 0; i < 5; ++i) t.add_line("pug, hugs");
  for (int i = 0; i < 12; ++i) t.add_line("pun");
  for (int i = 0; i < 4; ++i) t.add_line(" bun ");
  return t;
}

Strings tail(const Strings& v, size_t from) { return Strings(v.begin() + static_cast<std::ptrdiff_t>(from), v.end()); }

TEST(WordPieceTrainer, MergesTheMostFrequentPairFirst) {
  WordPieceTrainerOptions o;
  o.vocab_size = 100;
  o.min_frequency = 1;
  const Strings v = hug_corpus(o).train();
  // Specials, first characters (b h p , — by code point: "," first), the others, then "##" ones.
  const Strings base = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", "b", "h", "p",
                        "g", "n", "s", "u", "##g", "##n", "##s", "##u"};
  ASSERT_GE(v.size(), base.size());
  EXPECT_EQ(Strings(v.begin(), v.begin() + 17), base);
  // ##u ##g (20) > ##u ##n (16) > h ##ug (15) > p ##un (12) > p ##ug = hug ##s (5: smaller ids first) > b ##un (4).
  EXPECT_EQ(tail(v, 17), (Strings{"##ug", "##un", "hug", "pun", "pug", "hugs", "bun"}));
}

TEST(WordPieceTrainer, StopsAtTheSizeOrTheMinimumFrequency) {
  WordPieceTrainerOptions o;
  o.vocab_size = 20;
  EXPECT_EQ(tail(hug_corpus(o).train(), 17), (Strings{"##ug", "##un", "hug"}));
  o.vocab_size = 100;
  o.min_frequency = 5;  // bun ##un has 4
  EXPECT_EQ(tail(hug_corpus(o).train(), 17), (Strings{"##ug", "##un", "hug", "pun", "pug", "hugs"}));
  o.vocab_size = 16;
  try {
    hug_corpus(o).train();
    FAIL() << "expected an error";
  } catch (const base::Error& e) {
    EXPECT_STREQ(e.what(), "vocabulary size 16 is smaller than the 17 special tokens, characters and Chinese words of the text");
  }
}

TEST(WordPieceTrainer, CasedKeepsCaseAndAccents) {
  WordPieceTrainerOptions o;
  o.vocab_size = 30;
  o.lowercase = false;
  WordPieceTrainer t(o);
  t.add_line("Café café");
  const Strings v = t.train();
  EXPECT_NE(std::find(v.begin(), v.end(), "C"), v.end());
  EXPECT_NE(std::find(v.begin(), v.end(), "##é"), v.end());
  o.lowercase = true;
  WordPieceTrainer u(o);
  u.add_line("Café café");
  // c ##a, ##f ##e, ##a ##f all 2: the smallest ids first (c ##a), then ##f ##e, then ca ##fe.
  EXPECT_EQ(u.train(), (Strings{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "c", "a", "e", "f", "##a", "##e", "##f",
                               "ca", "##fe", "cafe"}));
}

// Random text over a small alphabet with CJK and punctuation: the vocabulary has no duplicates, is
// the same on a second run, and WordPiece finds no [UNK] in any training word.
TEST(WordPieceTrainer, CoversItsTrainingTextDeterministically) {
  std::mt19937 rng(7);
  const Strings alphabet = {"a", "b", "c", "d", "e", "é", "中", "文", "!", " ", " ", " "};
  Strings lines;
  for (int i = 0; i < 300; ++i) {
    std::string line;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int j = 0; j < n; ++j) line += alphabet[rng() % alphabet.size()];
    lines.push_back(line);
  }
  WordPieceTrainerOptions o;
  o.vocab_size = 200;
  o.min_frequency = 2;
  auto train = [&] {
    WordPieceTrainer t(o);
    for (const auto& l : lines) t.add_line(l);
    return t.train();
  };
  const Strings v = train();
  EXPECT_EQ(v, train());
  EXPECT_EQ(std::set<std::string>(v.begin(), v.end()).size(), v.size());
  const auto vocab = std::make_shared<const Vocab>(Vocab::from_tokens(v));
  const WordPiece wp(vocab);
  BasicTokenizerOptions bo;
  const BasicTokenizer basic(bo);
  for (const auto& l : lines) {
    for (const auto& word : basic.tokenize(std::string_view(l))) {
      for (const auto& piece : wp.tokenize(word)) EXPECT_NE(piece, "[UNK]") << l;
    }
  }
}

TEST(WordPieceTrainer, AddsFrequentJiebaWordsWhole) {
  // 今天 (100) 天气 (200) 非常 (300) 好 (300): 今天天气非常好 → 今天 | 天气 | 非常 | 好.
  const std::string dict = test_files::write("wp_dict.txt", "今天 100\n天气 200\n非常 300\n好 300\n");
  WordPieceTrainerOptions o;
  o.vocab_size = 100;
  o.chinese_words = 2;
  o.jieba_dict = dict;
  WordPieceTrainer t(o);
  for (int i = 0; i < 3; ++i) t.add_line("今天天气非常好");
  t.add_line("天气非常");
  t.add_line("非常");
  // 非常 ×5 and 天气 ×4 are kept (the two most frequent), 今天 ×3 is not.
  const Strings v = t.train();
  const Strings chars = {"今", "天", "好", "常", "气", "非"};  // by code point
  EXPECT_EQ(Strings(v.begin() + 5, v.begin() + 11), chars);
  EXPECT_EQ(tail(v, 11), (Strings{"非常", "天气"}));
  // RoFormerTokenizer (jieba on) keeps them whole.
  const std::string dir = test_files::temp_dir() + "wp_tok/";
  std::string text;
  for (const auto& s : v) text += s + "\n";
  test_files::write("wp_tok/vocab.txt", text);
  LoadOptions lo;
  lo.jieba_dict = dict;
  lo.use_jieba = true;
  const auto tok = RoFormerTokenizer::load(dir, lo);
  EXPECT_EQ(tok.tokenize("今天天气非常好"), (Strings{"今", "天", "天气", "非常", "好"}));
}

}  // namespace
