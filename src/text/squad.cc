// SQuAD v1.1 / v2.0 answer metrics (see squad.h), on code points with utf8proc's Unicode data and
// the tokenizer's Python string helpers (basic_tokenizer.h).
#include "squad.h"

#include <utf8proc.h>

#include <stdexcept>
#include <unordered_map>

#include "base/utf8.h"
#include "text/basic_tokenizer.h"

namespace text {
namespace {

// Python's re \w on str: alphanumerics (categories L*, N*) and the underscore.
bool is_word_char(char32_t c) {
  if (c == U'_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// string.punctuation: !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
bool is_ascii_punctuation(char32_t c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

// normalize_answer's steps up to the final join: lower → remove_punc → remove_articles, then split.
std::vector<std::u32string> normalized_tokens(std::string_view answer) {
  std::u32string s;
  for (const char32_t c : py_lower(base::utf8_decode(answer))) {
    if (!is_ascii_punctuation(c)) s.push_back(c);
  }
  // re.sub(r"\b(a|an|the)\b", " ", s): left to right, an article that starts after a non-word
  // character (or at the start) and ends before one (or at the end) becomes a space.
  static const std::u32string kArticles[] = {U"a", U"an", U"the"};
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    bool replaced = false;
    if (i == 0 || !is_word_char(s[i - 1])) {
      for (const std::u32string& w : kArticles) {
        const size_t end = i + w.size();
        if (s.compare(i, w.size(), w) == 0 && (end == s.size() || !is_word_char(s[end]))) {
          out.push_back(U' ');
          i = end;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out.push_back(s[i++]);
  }
  return py_split(out);
}

double token_f1(const std::vector<std::u32string>& pred, const std::vector<std::u32string>& gold, bool v2) {
  if (v2 && (pred.empty() || gold.empty())) return pred == gold ? 1.0 : 0.0;
  std::unordered_map<std::u32string, int64_t> count;
  for (const auto& t : gold) ++count[t];
  double same = 0;
  for (const auto& t : pred) {
    if (auto it = count.find(t); it != count.end() && it->second > 0) --it->second, same += 1;
  }
  if (same == 0) return 0;
  const double precision = same / static_cast<double>(pred.size()), recall = same / static_cast<double>(gold.size());
  return 2 * precision * recall / (precision + recall);
}

// The gold answers a question is scored against: v2 keeps those whose normalised text is not empty
// and reads none as the one answer "".
std::vector<std::string> golds_of(const std::vector<std::string>& golds, bool v2) {
  if (!v2) return golds;
  std::vector<std::string> out;
  for (const std::string& g : golds) {
    if (!squad_normalize(g).empty()) out.push_back(g);
  }
  if (out.empty()) out.push_back("");
  return out;
}

}  // namespace

std::string squad_normalize(std::string_view answer) {
  std::u32string joined;
  for (const std::u32string& t : normalized_tokens(answer)) {
    if (!joined.empty()) joined.push_back(U' ');
    joined += t;
  }
  return base::utf8_encode(joined);
}

double squad_exact(std::string_view prediction, const std::vector<std::string>& golds, bool v2) {
  const std::string p = squad_normalize(prediction);
  double best = 0;
  for (const std::string& g : golds_of(golds, v2)) best = std::max(best, p == squad_normalize(g) ? 1.0 : 0.0);
  return best;
}

double squad_f1(std::string_view prediction, const std::vector<std::string>& golds, bool v2) {
  const auto p = normalized_tokens(prediction);
  double best = 0;
  for (const std::string& g : golds_of(golds, v2)) best = std::max(best, token_f1(p, normalized_tokens(g), v2));
  return best;
}

std::map<std::string, double> squad_scores(const std::vector<std::string>& predictions,
                                           const std::vector<std::vector<std::string>>& golds, bool v2) {
  if (predictions.size() != golds.size()) throw std::invalid_argument("squad_scores: one prediction per question");
  double exact = 0, f1 = 0, has[3] = {0, 0, 0}, no[3] = {0, 0, 0};  // count, exact, f1
  for (size_t i = 0; i < predictions.size(); ++i) {
    const double e = squad_exact(predictions[i], golds[i], v2), f = squad_f1(predictions[i], golds[i], v2);
    exact += e, f1 += f;
    double* split = golds[i].empty() ? no : has;  // make_qid_to_has_ans: bool(answers["text"])
    split[0] += 1, split[1] += e, split[2] += f;
  }
  const double n = static_cast<double>(predictions.size());
  std::map<std::string, double> out = {{"exact_match", n > 0 ? 100 * exact / n : 0}, {"f1", n > 0 ? 100 * f1 / n : 0}};
  if (v2) {
    for (const auto& [name, s] : {std::pair<const char*, double*>{"HasAns", has}, {"NoAns", no}}) {
      if (s[0] == 0) continue;
      out[std::string(name) + "_exact"] = 100 * s[1] / s[0];
      out[std::string(name) + "_f1"] = 100 * s[2] / s[0];
    }
  }
  return out;
}

}  // namespace text
