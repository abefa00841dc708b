// BERT's BasicTokenizer and the Python-compatible Unicode helpers (see basic_tokenizer.h).
#include "text/basic_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

namespace text {

// ---- character classes ----

namespace {
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool is_py_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

bool is_bert_whitespace(char32_t c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  return category(c) == UTF8PROC_CATEGORY_ZS;
}

bool is_bert_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

bool is_bert_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_cjk_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_nonspacing_mark(char32_t c) { return c >= 0x300 && category(c) == UTF8PROC_CATEGORY_MN; }

// ---- case and normalisation ----

std::u32string py_lower(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (c == 0x130) {  // the one unconditional multi-character lower-case mapping (SpecialCasing.txt)
      out.push_back(U'i');
      out.push_back(0x307);
    } else {
      out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

namespace {
std::u32string normalize(std::u32string_view s, utf8proc_option_t options) {
  bool trivial = true;  // below U+00C0 nothing decomposes or composes
  for (char32_t c : s) trivial = trivial && c < 0xC0;
  if (trivial) return std::u32string(s);
  const std::string in = base::utf8_encode(s);
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(in.data()),
                                          static_cast<utf8proc_ssize_t>(in.size()), &dst, options);
  if (n < 0) throw std::runtime_error(std::string("utf8proc: ") + utf8proc_errmsg(n));
  std::u32string out = base::utf8_decode(std::string_view(reinterpret_cast<const char*>(dst), static_cast<size_t>(n)));
  std::free(dst);
  return out;
}
}  // namespace

std::u32string nfc(std::u32string_view s) {
  return normalize(s, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
}

std::u32string nfd(std::u32string_view s) {
  return normalize(s, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
}

std::u32string strip_accents(std::u32string_view s) {
  std::u32string out;
  for (char32_t c : nfd(s))
    if (!is_nonspacing_mark(c)) out.push_back(c);
  return out;
}

namespace {
// [start, end) of a run of characters.
using Run = std::pair<size_t, size_t>;

// py_split's words as runs of s.
std::vector<Run> split_runs(std::u32string_view s) {
  std::vector<Run> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_py_space(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !is_py_space(s[i])) ++i;
    if (i > start) out.emplace_back(start, i);
  }
  return out;
}
}  // namespace

std::vector<std::u32string> py_split(std::u32string_view s) {
  std::vector<std::u32string> out;
  for (const auto& [start, end] : split_runs(s)) out.emplace_back(s.substr(start, end - start));
  return out;
}

// ---- origins ----

namespace {

// The smallest span holding spans[0..n), n >= 1.
CharSpan join(const CharSpan* spans, size_t n) {
  CharSpan out = spans[0];
  for (size_t i = 1; i < n; ++i) out = {std::min(out.first, spans[i].first), std::max(out.second, spans[i].second)};
  return out;
}

// The origins of `to`, a normalisation of `from` (origins from_spans), when no finer rule applies:
// the common prefix and suffix keep their characters' origins and the changed middle spans the middle
// of `from` it replaced (an empty one: the character before it, else after it, else `whole`).
std::vector<CharSpan> align_by_diff(std::u32string_view from, const CharSpan* from_spans, std::u32string_view to,
                                    CharSpan whole) {
  size_t pre = 0, suf = 0;
  while (pre < from.size() && pre < to.size() && from[pre] == to[pre]) ++pre;
  while (suf < from.size() - pre && suf < to.size() - pre && from[from.size() - 1 - suf] == to[to.size() - 1 - suf]) ++suf;
  std::vector<CharSpan> out(from_spans, from_spans + pre);
  const size_t from_mid = from.size() - pre - suf;
  const CharSpan mid = from_mid > 0 ? join(from_spans + pre, from_mid)
                       : pre > 0    ? from_spans[pre - 1]
                       : suf > 0    ? from_spans[from.size() - suf]
                                    : whole;
  out.insert(out.end(), to.size() - pre - suf, mid);
  out.insert(out.end(), from_spans + from.size() - suf, from_spans + from.size());
  return out;
}

// c lower-cased and/or accent-stripped on its own (no NFC), appended to *out.
void transform_char(char32_t c, bool lower, bool strip, std::u32string* out) {
  if (c < 0x80) {
    out->push_back(lower && c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
  const bool lowers = lower && p->lowercase_seqindex != UINT16_MAX;
  const bool decomposes = strip && (p->decomp_seqindex != UINT16_MAX || (c >= 0xAC00 && c <= 0xD7A3) ||  // Hangul
                                    p->category == UTF8PROC_CATEGORY_MN);
  if (!lowers && !decomposes) {
    out->push_back(c);
    return;
  }
  std::u32string s(1, c);
  if (lower) s = py_lower(s);
  if (strip) s = strip_accents(s);
  *out += s;
}

// Whether c starts a new cluster for NFC: a starter that composes with nothing before it (Hangul
// vowel and trailing jamo compose with the syllable before them).
bool starts_cluster(char32_t c) {
  if ((c >= 0x1161 && c <= 0x1175) || (c >= 0x11A8 && c <= 0x11C2)) return false;
  return c < 0x300 || utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class == 0;
}

// Where each character of `token` came from: `token` is the BasicTokenizer's word made of the cleaned
// characters seg (origins seg_spans): NFC of seg, then, when `transform`, lower-cased (lower) and
// accent-stripped (strip). Returns seg_spans itself when token is seg character for character (ASCII
// lower-cased or not, most words), else *buf, set to the first of these that gives `token` back:
//  1. seg character by character without NFC, as HF's fast BertNormalizer (which has no NFC) does:
//     each produced character keeps its source's origin, a stripped mark is part of no character;
//  2. seg's clusters (a starter and what follows it up to the next) normalised one by one: a
//     character found in 1's output for the cluster keeps its origin (marks NFC reorders), a
//     composed one spans the characters it replaced (in cased text e + U+0301 composed to é: both);
//  3. align_by_diff from 1's output.
const CharSpan* word_origins(std::u32string_view seg, const CharSpan* seg_spans, std::u32string_view token,
                             bool transform, bool lower, bool strip, std::vector<CharSpan>* buf) {
  const size_t n = seg.size();
  bool same = n == token.size();
  for (size_t i = 0; same && i < n; ++i) {
    const char32_t c = seg[i];
    same = token[i] == c || (transform && lower && c >= 'A' && c <= 'Z' && token[i] == c + 32);
  }
  if (same) return seg_spans;
  std::u32string f;
  std::vector<CharSpan> f_spans;
  std::vector<size_t> f_start(n + 1);  // where seg[i]'s characters start in f
  for (size_t i = 0; i < n; ++i) {
    f_start[i] = f.size();
    if (transform) {
      transform_char(seg[i], lower, strip, &f);
    } else {
      f.push_back(seg[i]);
    }
    f_spans.resize(f.size(), seg_spans[i]);
  }
  f_start[n] = f.size();
  if (f == token) {
    *buf = std::move(f_spans);
    return buf->data();
  }
  std::u32string g;
  std::vector<CharSpan> g_spans;
  for (size_t a = 0, b; a < n; a = b) {
    for (b = a + 1; b < n && !starts_cluster(seg[b]);) ++b;
    std::u32string c = nfc(seg.substr(a, b - a));
    if (transform && lower) c = py_lower(c);
    if (transform && strip) c = strip_accents(c);
    g += c;
    // Each character of c takes the origin of the first unused equal character of 1's output for
    // the cluster (marks NFC reordered keep theirs); the others (composed) span those left over.
    const size_t from = f_start[a], to = f_start[b], first = g_spans.size();
    std::vector<bool> used(to - from, false);
    std::vector<size_t> composed;
    for (size_t k = 0; k < c.size(); ++k) {
      size_t j = 0;
      while (j < to - from && (used[j] || f[from + j] != c[k])) ++j;
      if (j < to - from) {
        used[j] = true;
        g_spans.push_back(f_spans[from + j]);
      } else {
        composed.push_back(first + k);
        g_spans.emplace_back();
      }
    }
    if (!composed.empty()) {
      std::vector<CharSpan> left;
      for (size_t j = 0; j < to - from; ++j)
        if (!used[j]) left.push_back(f_spans[from + j]);
      const CharSpan rest = left.empty() ? join(seg_spans + a, b - a) : join(left.data(), left.size());
      for (size_t k : composed) g_spans[k] = rest;
    }
  }
  *buf = g == token ? std::move(g_spans) : align_by_diff(f, f_spans.data(), token, join(seg_spans, n));
  return buf->data();
}

}  // namespace

// ---- BasicTokenizer ----

BasicTokenizer::BasicTokenizer(BasicTokenizerOptions options)
    : options_(std::move(options)), never_split_(options_.never_split.begin(), options_.never_split.end()) {}

std::vector<std::string> BasicTokenizer::tokenize(std::string_view utf8,
                                                  const std::unordered_set<std::string>* extra) const {
  std::vector<std::string> out;
  for (const std::u32string& w : tokenize(base::utf8_decode(utf8), extra)) out.push_back(base::utf8_encode(w));
  return out;
}

std::vector<std::u32string> BasicTokenizer::tokenize(std::u32string_view text,
                                                     const std::unordered_set<std::string>* extra) const {
  return tokenize(text, extra, nullptr);
}

std::vector<std::u32string> BasicTokenizer::tokenize(std::u32string_view text, const std::unordered_set<std::string>* extra,
                                                     Origins* origins) const {
  const bool track = origins != nullptr && origins->in != nullptr;
  if (origins) origins->out.clear();
  auto never = [&](std::u32string_view w) {
    if (never_split_.empty() && (!extra || extra->empty())) return false;
    const std::string u = base::utf8_encode(w);
    return never_split_.count(u) != 0 || (extra && extra->count(u) != 0);
  };
  const bool lower = options_.do_lower_case;
  const bool strip = strips_accents();
  // _clean_text, then _tokenize_chinese_chars (with track: cleaned_spans[k] is where cleaned[k] came from).
  std::u32string cleaned;
  cleaned.reserve(text.size());
  std::vector<CharSpan>* cleaned_spans = track ? &origins->cleaned : nullptr;
  if (track) cleaned_spans->clear();
  auto keep = [&](char32_t c, size_t i) {
    cleaned.push_back(c);
    if (track) cleaned_spans->push_back(origins->in[i]);
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char32_t c = text[i];
    if (c == 0 || c == 0xFFFD || is_bert_control(c)) continue;
    if (is_bert_whitespace(c)) {
      keep(U' ', i);
    } else if (options_.tokenize_chinese_chars && is_cjk_char(c)) {
      keep(U' ', i);
      keep(c, i);
      keep(U' ', i);
    } else {
      keep(c, i);
    }
  }
  const std::u32string normalized = nfc(cleaned);
  const std::vector<Run> words = split_runs(normalized);
  // With track, each word's characters before NFC: the runs of `pre`, one per word. NFC makes and
  // removes no whitespace and composes nothing across it, so these are cleaned's own runs; should
  // their count differ all the same, the words map back through align_by_diff of the whole text.
  std::u32string_view pre = normalized;
  const CharSpan* pre_spans = track ? cleaned_spans->data() : nullptr;
  const std::vector<Run>* pre_runs = &words;
  std::vector<Run> cleaned_runs;
  std::vector<CharSpan> diffed;
  if (track && !words.empty() && normalized != cleaned) {
    cleaned_runs = split_runs(cleaned);
    if (cleaned_runs.size() == words.size()) {
      pre = cleaned;
      pre_runs = &cleaned_runs;
    } else {
      diffed = align_by_diff(cleaned, pre_spans, normalized, join(pre_spans, cleaned.size()));
      pre_spans = diffed.data();
    }
  }
  std::vector<std::u32string> out;
  const CharSpan* token_spans = nullptr;
  std::vector<Run> pieces;
  for (size_t w = 0; w < words.size(); ++w) {
    std::u32string token = normalized.substr(words[w].first, words[w].second - words[w].first);
    const bool transform = !never(token);
    if (transform && lower) token = py_lower(token);
    if (transform && strip) token = strip_accents(token);
    if (track) {
      const auto [a, b] = (*pre_runs)[w];
      token_spans = word_origins(pre.substr(a, b - a), pre_spans + a, token, transform, lower, strip, &origins->word);
    }
    // _run_split_on_punc: every punctuation character is a word of its own (pieces: runs of token).
    pieces.clear();
    if (!options_.do_split_on_punc || never(token)) {
      pieces.emplace_back(0, token.size());
    } else {
      bool start_new_word = true;
      for (size_t i = 0; i < token.size(); ++i) {
        if (is_bert_punctuation(token[i])) {
          pieces.emplace_back(i, i + 1);
          start_new_word = true;
        } else {
          if (start_new_word) pieces.emplace_back(i, i);
          start_new_word = false;
          pieces.back().second = i + 1;
        }
      }
    }
    // whitespace_tokenize(" ".join(pieces)): drops empty pieces (a word of only accents).
    for (const auto& [p, q] : pieces) {
      for (const auto& [a, b] : split_runs(std::u32string_view(token).substr(p, q - p))) {
        out.push_back(token.substr(p + a, b - a));
        if (track) origins->out.insert(origins->out.end(), token_spans + p + a, token_spans + p + b);
      }
    }
  }
  return out;
}

}  // namespace text
