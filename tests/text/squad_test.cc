// SQuAD's answer metrics (src/text/squad.cc) against the official evaluation scripts: every expected
// value below is what evaluate-v1.1.py's and evaluate-v2.0.py's functions (normalize_answer,
// exact_match_score / f1_score; compute_exact / compute_f1 with v2.0's gold filtering) return for
// the same strings under Python 3.11.
#include <gtest/gtest.h>

#include "text/squad.h"

namespace {

struct Case {
  const char* prediction;
  std::vector<std::string> golds;
  const char* normalised;
  double v1_exact, v1_f1, v2_exact, v2_f1;
};

TEST(Squad, MatchesTheOfficialScripts) {
  const Case cases[] = {
      {"The Cat, sat.", {"the cat sat"}, "cat sat", 1, 1, 1, 1},
      {"an apple a day", {"apple day", "An Apple"}, "apple day", 1, 1, 1, 1},
      {"the", {"the"}, "", 1, 0, 1, 1},  // v1.1: no tokens, F1 0; v2.0: both empty, F1 1
      {"", {"x"}, "", 0, 0, 0, 0},
      {"", {"the", ""}, "", 1, 0, 1, 1},  // v2.0: no non-empty gold answer reads as ""
      {"Éclair über straße", {"éclair Über STRASSE"}, "éclair über straße", 0, 2.0 / 3, 0, 2.0 / 3},
      {"a_the theatre", {"the atre a_the"}, "athe theatre", 0, 0.5, 0, 0.5},  // '_' is string.punctuation
      {"北京 大学", {"北京大学", "北京 大学 的"}, "北京 大学", 0, 0.8, 0, 0.8},
      {"cat cat dog", {"cat dog dog"}, "cat cat dog", 0, 2.0 / 3, 0, 2.0 / 3},  // multiset overlap
      {"«the» end", {"end"}, "« » end", 0, 0.5, 0, 0.5},  // « is no ASCII punctuation, but a word boundary
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.prediction);
    EXPECT_EQ(text::squad_normalize(c.prediction), c.normalised);
    EXPECT_EQ(text::squad_exact(c.prediction, c.golds, false), c.v1_exact);
    EXPECT_NEAR(text::squad_f1(c.prediction, c.golds, false), c.v1_f1, 1e-15);
    EXPECT_EQ(text::squad_exact(c.prediction, c.golds, true), c.v2_exact);
    EXPECT_NEAR(text::squad_f1(c.prediction, c.golds, true), c.v2_f1, 1e-15);
  }
}

TEST(Squad, ScoresArePercentagesWithV2Splits) {
  const auto v1 = text::squad_scores({"cat sat", "dog"}, {{"the cat sat"}, {"a bird"}}, false);
  EXPECT_DOUBLE_EQ(v1.at("exact_match"), 50);
  EXPECT_DOUBLE_EQ(v1.at("f1"), 50);
  EXPECT_EQ(v1.count("HasAns_f1"), 0u);
  const auto v2 = text::squad_scores({"cat sat", "", "x"}, {{"the cat sat"}, {}, {}}, true);
  EXPECT_DOUBLE_EQ(v2.at("exact_match"), 200.0 / 3);
  EXPECT_DOUBLE_EQ(v2.at("HasAns_exact"), 100);
  EXPECT_DOUBLE_EQ(v2.at("NoAns_exact"), 50);
  EXPECT_DOUBLE_EQ(v2.at("NoAns_f1"), 50);
  EXPECT_THROW(text::squad_scores({"a"}, {}, false), std::invalid_argument);
}

}  // namespace
