// Corpus BLEU exactly as sacreBLEU 2.x computes it with its defaults (Post 2018): the 13a tokeniser
// (mteval-v13a's, on Unicode code points), mixed case, n-grams up to 4, the closest reference length
// (ties: the shorter), the brevity penalty, and 'exp' smoothing (NIST: the k-th order without a match
// gets precision 1 / (2^k · total)). Several references per segment take each n-gram's largest count.
// chrF as sacreBLEU's CHRF() defaults compute it (Popović 2015): character n-grams of orders 1..6
// over each segment with whitespace removed, β = 2, statistics summed over the corpus, precision and
// recall averaged over the orders where both sides have n-grams ("eff:yes"); with several references
// a segment takes the reference of best segment-level chrF.
// Checked against the sacrebleu package on random and real cases (tests/cli/bleu_vs_sacrebleu.py).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace text {

// sacreBLEU's Tokenizer13a (with TokenizerRegexp): unescapes &quot; &amp; &lt; &gt;, drops
// "<skipped>", splits off punctuation and symbols, periods and commas not between digits, and dashes
// after digits; returns the tokens joined by single spaces.
std::string tokenize_13a(std::string_view line);

struct BleuScore {
  double score = 0;                    // 0..100
  std::array<double, 4> precisions{};  // per order, percent (after smoothing)
  std::array<int64_t, 4> correct{}, total{};
  double bp = 0;
  int64_t sys_len = 0, ref_len = 0;
  // sacreBLEU's text line: "BLEU|nrefs:1|...|version:2.6.0 = 27.50 60.0/33.3/20.0/10.0 (BP = 1.000 ...)".
  std::string format(int64_t n_refs) const;
};

// The signature sacreBLEU prints for these defaults and n_refs references.
std::string bleu_signature(int64_t n_refs);

// Corpus BLEU of hypotheses against references: refs[r][i] is reference r of segment i (every
// refs[r] as long as hyps; std::invalid_argument otherwise). Lines are rstrip()ped of whitespace.
BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs);

struct ChrfScore {
  double score = 0;  // 0..100
  // sacreBLEU's text line: "chrF2|nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0 = 52.40".
  std::string format(int64_t n_refs) const;
};

// Corpus chrF2 (refs as for corpus_bleu).
ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs);

}  // namespace text
