// sacreBLEU-exact corpus BLEU (see bleu.h). The regular expressions of sacreBLEU's TokenizerRegexp are
// written out as left-to-right scans with Python re.sub's semantics (non-overlapping matches, each
// replacement resuming after its match), on code points.
#include "bleu.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "base/utf8.h"
#include "text/basic_tokenizer.h"

namespace text {
namespace {

constexpr const char* kSacreBleuVersion = "2.6.0";  // the sacrebleu release these semantics are checked against

bool is_digit(char32_t c) { return c >= U'0' && c <= U'9'; }

// [\{-\~\[-\` -\&\(-\+\:-\@\/]
bool is_13a_symbol(char32_t c) {
  return (c >= U'{' && c <= U'~') || (c >= U'[' && c <= U'`') || (c >= U' ' && c <= U'&') ||
         (c >= U'(' && c <= U'+') || (c >= U':' && c <= U'@') || c == U'/';
}

std::u32string replace_all(std::u32string s, std::u32string_view from, std::u32string_view to) {
  std::u32string out;
  for (size_t pos = 0;;) {
    const size_t at = s.find(from, pos);
    if (at == std::u32string::npos) {
      out.append(s, pos);
      return out;
    }
    out.append(s, pos, at - pos);
    out.append(to);
    pos = at + from.size();
  }
}

std::u32string tokenize_13a_u32(std::u32string line) {
  line = replace_all(std::move(line), U"<skipped>", U"");
  line = replace_all(std::move(line), U"-\n", U"");
  line = replace_all(std::move(line), U"\n", U" ");
  if (line.find(U'&') != std::u32string::npos) {
    line = replace_all(std::move(line), U"&quot;", U"\"");
    line = replace_all(std::move(line), U"&amp;", U"&");
    line = replace_all(std::move(line), U"&lt;", U"<");
    line = replace_all(std::move(line), U"&gt;", U">");
  }
  std::u32string s = U" " + line + U" ", t;
  for (const char32_t c : s) {  // ([\{-\~\[-\` -\&\(-\+\:-\@\/]) → " \1 "
    if (is_13a_symbol(c)) t += U' ', t += c, t += U' ';
    else t += c;
  }
  s.swap(t), t.clear();
  for (size_t i = 0; i < s.size();) {  // ([^0-9])([\.,]) → "\1 \2 "
    if (i + 1 < s.size() && !is_digit(s[i]) && (s[i + 1] == U'.' || s[i + 1] == U',')) {
      t += s[i], t += U' ', t += s[i + 1], t += U' ';
      i += 2;
    } else {
      t += s[i++];
    }
  }
  s.swap(t), t.clear();
  for (size_t i = 0; i < s.size();) {  // ([\.,])([^0-9]) → " \1 \2"
    if (i + 1 < s.size() && (s[i] == U'.' || s[i] == U',') && !is_digit(s[i + 1])) {
      t += U' ', t += s[i], t += U' ', t += s[i + 1];
      i += 2;
    } else {
      t += s[i++];
    }
  }
  s.swap(t), t.clear();
  for (size_t i = 0; i < s.size();) {  // ([0-9])(-) → "\1 \2 "
    if (i + 1 < s.size() && is_digit(s[i]) && s[i + 1] == U'-') {
      t += s[i], t += U' ', t += U'-', t += U' ';
      i += 2;
    } else {
      t += s[i++];
    }
  }
  std::u32string out;
  for (const auto& w : py_split(t)) out += (out.empty() ? U"" : U" ") + w;
  return out;
}

std::u32string rstrip(std::u32string s) {
  while (!s.empty() && is_py_space(s.back())) s.pop_back();
  return s;
}

using Ngrams = std::map<std::u32string, int64_t>;

// Every n-gram of orders 1..4 of the words (keys joined by U+0000), and the word count.
Ngrams ngrams_of(const std::u32string& tokenized, int64_t* length) {
  const auto words = py_split(tokenized);
  *length = static_cast<int64_t>(words.size());
  Ngrams counts;
  for (size_t n = 1; n <= 4; ++n) {
    for (size_t i = 0; i + n <= words.size(); ++i) {
      std::u32string key;
      for (size_t j = i; j < i + n; ++j) key += (j > i ? std::u32string(1, U'\0') : U"") + words[j];
      ++counts[key];
    }
  }
  return counts;
}

size_t order_of(const std::u32string& key) {
  size_t n = 1;
  for (const char32_t c : key) n += c == U'\0';
  return n;
}

}  // namespace

std::string tokenize_13a(std::string_view line) { return base::utf8_encode(tokenize_13a_u32(base::utf8_decode(line))); }

std::string bleu_signature(int64_t n_refs) {
  return "nrefs:" + std::to_string(n_refs) + "|case:mixed|eff:no|tok:13a|smooth:exp|version:" + kSacreBleuVersion;
}

std::string BleuScore::format(int64_t n_refs) const {
  char buf[256];
  std::snprintf(buf, sizeof buf, " = %.2f %.1f/%.1f/%.1f/%.1f (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
                score, precisions[0], precisions[1], precisions[2], precisions[3], bp,
                ref_len ? static_cast<double>(sys_len) / static_cast<double>(ref_len) : 0.0,
                static_cast<long long>(sys_len), static_cast<long long>(ref_len));
  return "BLEU|" + bleu_signature(n_refs) + buf;
}

BleuScore corpus_bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
  if (refs.empty()) throw std::invalid_argument("BLEU needs at least one reference stream");
  for (const auto& r : refs) {
    if (r.size() != hyps.size()) {
      throw std::invalid_argument("the reference stream has " + std::to_string(r.size()) + " lines but the system output has " +
                                  std::to_string(hyps.size()));
    }
  }
  BleuScore s;
  for (size_t i = 0; i < hyps.size(); ++i) {
    Ngrams ref_max;
    std::vector<int64_t> ref_lens;
    for (const auto& stream : refs) {
      int64_t len = 0;
      for (const auto& [g, c] : ngrams_of(tokenize_13a_u32(rstrip(base::utf8_decode(stream[i]))), &len)) {
        ref_max[g] = std::max(ref_max[g], c);
      }
      ref_lens.push_back(len);
    }
    int64_t hyp_len = 0;
    const Ngrams hyp = ngrams_of(tokenize_13a_u32(rstrip(base::utf8_decode(hyps[i]))), &hyp_len);
    int64_t closest = -1, diff = -1;
    for (const int64_t len : ref_lens) {
      const int64_t d = std::llabs(hyp_len - len);
      if (diff == -1 || d < diff || (d == diff && len < closest)) diff = d, closest = len;
    }
    s.sys_len += hyp_len;
    s.ref_len += closest;
    for (const auto& [g, c] : hyp) {
      const size_t n = order_of(g) - 1;
      s.total[n] += c;
      const auto it = ref_max.find(g);
      if (it != ref_max.end()) s.correct[n] += std::min(c, it->second);
    }
  }
  s.bp = s.sys_len < s.ref_len ? (s.sys_len > 0 ? std::exp(1 - static_cast<double>(s.ref_len) / static_cast<double>(s.sys_len)) : 0.0)
                               : 1.0;
  if (s.correct[0] + s.correct[1] + s.correct[2] + s.correct[3] == 0) return s;  // score 0, precisions 0
  double smooth = 1, log_sum = 0;
  for (size_t n = 0; n < 4; ++n) {
    if (s.total[n] == 0) break;  // later orders keep precision 0 (log → −9999999999)
    if (s.correct[n] == 0) {
      smooth *= 2;
      s.precisions[n] = 100.0 / (smooth * static_cast<double>(s.total[n]));
    } else {
      s.precisions[n] = 100.0 * static_cast<double>(s.correct[n]) / static_cast<double>(s.total[n]);
    }
  }
  for (const double p : s.precisions) log_sum += p == 0 ? -9999999999.0 : std::log(p);
  s.score = s.bp * std::exp(log_sum / 4);
  return s;
}


namespace {

constexpr int kChrfOrder = 6;
constexpr double kChrfBeta = 2;

// Per order: hypothesis n-grams, reference n-grams, matches (sacreBLEU's [hyp, ref, match] triplets).
using ChrfStats = std::array<int64_t, 3 * kChrfOrder>;

std::vector<std::map<std::u32string, int64_t>> char_ngrams(const std::string& line) {
  std::u32string chars;
  for (const char32_t c : base::utf8_decode(line)) {
    if (!is_py_space(c)) chars.push_back(c);  // ''.join(line.split())
  }
  std::vector<std::map<std::u32string, int64_t>> out(kChrfOrder);
  for (int n = 1; n <= kChrfOrder; ++n) {
    for (size_t i = 0; i + n <= chars.size(); ++i) ++out[n - 1][chars.substr(i, n)];
  }
  return out;
}

double chrf_f_score(const ChrfStats& st) {
  const double eps = 1e-16, factor = kChrfBeta * kChrfBeta;
  double avg_prec = 0, avg_rec = 0;
  int effective = 0;
  for (int i = 0; i < kChrfOrder; ++i) {
    const int64_t n_hyp = st[3 * i], n_ref = st[3 * i + 1], n_match = st[3 * i + 2];
    const double prec = n_hyp > 0 ? static_cast<double>(n_match) / n_hyp : eps;
    const double rec = n_ref > 0 ? static_cast<double>(n_match) / n_ref : eps;
    if (n_hyp > 0 && n_ref > 0) avg_prec += prec, avg_rec += rec, ++effective;
  }
  if (effective == 0) return 0.0;
  avg_prec /= effective, avg_rec /= effective;
  if (avg_prec + avg_rec == 0) return 0.0;
  return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
}

}  // namespace

std::string ChrfScore::format(int64_t n_refs) const {
  char buf[64];
  std::snprintf(buf, sizeof buf, " = %.2f", score);
  return "chrF2|nrefs:" + std::to_string(n_refs) + "|case:mixed|eff:yes|nc:6|nw:0|space:no|version:" +
         kSacreBleuVersion + buf;
}

ChrfScore corpus_chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
  if (refs.empty()) throw std::invalid_argument("chrF needs at least one reference stream");
  for (const auto& r : refs) {
    if (r.size() != hyps.size()) throw std::invalid_argument("every reference stream needs one line per hypothesis");
  }
  ChrfStats total{};
  for (size_t i = 0; i < hyps.size(); ++i) {
    const auto hyp = char_ngrams(hyps[i]);
    ChrfStats best{};
    double best_f = -1;
    for (const auto& stream : refs) {  // the reference of best segment chrF
      const auto ref = char_ngrams(stream[i]);
      ChrfStats st{};
      for (int n = 0; n < kChrfOrder; ++n) {
        int64_t hyp_count = 0, match = 0, ref_count = 0;
        for (const auto& [g, c] : hyp[n]) {
          hyp_count += c;
          const auto it = ref[n].find(g);
          if (it != ref[n].end()) match += std::min(c, it->second);
        }
        for (const auto& [g, c] : ref[n]) ref_count += c;
        st[3 * n] = ref[n].empty() ? 0 : hyp_count;  // sacreBLEU counts no hypothesis n-grams against none
        st[3 * n + 1] = ref_count;
        st[3 * n + 2] = match;
      }
      const double f = chrf_f_score(st);
      if (f > best_f) best_f = f, best = st;
    }
    for (size_t k = 0; k < total.size(); ++k) total[k] += best[k];
  }
  return {chrf_f_score(total)};
}

}  // namespace text
