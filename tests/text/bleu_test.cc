// sacreBLEU-exact BLEU (src/text/bleu.cc): the 13a tokeniser on cases whose output sacrebleu 2.6.0
// printed, BLEU's edge cases (no match, empty output, brevity, several references) and the text line.
// tests/cli/bleu_vs_sacrebleu.py compares `roformer bleu` with the package on 153 corpora.
#include <gtest/gtest.h>

#include <cmath>

#include "text/bleu.h"

namespace {

TEST(Bleu, Tokenizer13aMatchesSacreBleu) {
  EXPECT_EQ(text::tokenize_13a("Hello, world!"), "Hello , world !");
  EXPECT_EQ(text::tokenize_13a("It costs $3.50, or 1,000-2,000 yen."), "It costs $ 3.50 , or 1,000 - 2,000 yen .");
  EXPECT_EQ(text::tokenize_13a("e-mail &quot;quoted&quot; &amp; <skipped>x"), "e-mail \" quoted \" & x");
  EXPECT_EQ(text::tokenize_13a("U.S.A. 9. .5 a.b"), "U . S . A . 9 . . 5 a . b");
  EXPECT_EQ(text::tokenize_13a("naïve café—日本語。"), "naïve café—日本語。");
  EXPECT_EQ(text::tokenize_13a("end-\nline"), "endline");
  EXPECT_EQ(text::tokenize_13a("a\u00a0b\u2028c"), "a b c");  // Python's str.split() whitespace
}

TEST(Bleu, CorpusScoresAndEdgeCases) {
  const auto s = text::corpus_bleu({"The cat sat on the mat.", "Hello, world!"},
                                   {{"The cat is on the mat.", "Hello world!"}});
  EXPECT_EQ(s.format(1), "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0 = 40.15 "
                         "81.8/55.6/28.6/20.0 (BP = 1.000 ratio = 1.100 hyp_len = 11 ref_len = 10)");
  EXPECT_DOUBLE_EQ(text::corpus_bleu({"a b c d"}, {{"a b c d"}}).score, 100.0);
  EXPECT_EQ(text::corpus_bleu({"aaa bbb"}, {{"ccc ddd"}}).score, 0.0);
  EXPECT_EQ(text::corpus_bleu({""}, {{"a b"}}).score, 0.0);
  const auto short_hyp = text::corpus_bleu({"a b c d"}, {{"a b c d e f g h"}});
  EXPECT_NEAR(short_hyp.bp, std::exp(1 - 8.0 / 4), 1e-15);
  // Two references: each n-gram's largest count, the closest length (ties: shorter).
  const auto two = text::corpus_bleu({"x y z"}, {{"x y"}, {"y z w v"}});
  EXPECT_EQ(two.ref_len, 2);
  EXPECT_EQ(two.correct[0], 3);
  EXPECT_THROW(text::corpus_bleu({"a"}, {{"a", "b"}}), std::invalid_argument);
}

}  // namespace
