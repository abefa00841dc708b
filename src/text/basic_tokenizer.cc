// BERT's BasicTokenizer and the Python-compatible Unicode helpers (see basic_tokenizer.h).
#include "text/basic_tokenizer.h"

#include <utf8proc.h>

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

std::vector<std::u32string> py_split(std::u32string_view s) {
  std::vector<std::u32string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_py_space(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !is_py_space(s[i])) ++i;
    if (i > start) out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

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
  auto never = [&](std::u32string_view w) {
    if (never_split_.empty() && (!extra || extra->empty())) return false;
    const std::string u = base::utf8_encode(w);
    return never_split_.count(u) != 0 || (extra && extra->count(u) != 0);
  };
  // _clean_text, then _tokenize_chinese_chars.
  std::u32string cleaned;
  cleaned.reserve(text.size());
  for (char32_t c : text) {
    if (c == 0 || c == 0xFFFD || is_bert_control(c)) continue;
    if (is_bert_whitespace(c)) {
      cleaned.push_back(U' ');
    } else if (options_.tokenize_chinese_chars && is_cjk_char(c)) {
      cleaned.push_back(U' ');
      cleaned.push_back(c);
      cleaned.push_back(U' ');
    } else {
      cleaned.push_back(c);
    }
  }
  std::vector<std::u32string> out;
  for (std::u32string& token : py_split(nfc(cleaned))) {
    if (!never(token)) {
      if (options_.do_lower_case) {
        token = py_lower(token);
        if (options_.strip_accents.value_or(true)) token = strip_accents(token);
      } else if (options_.strip_accents.value_or(false)) {
        token = strip_accents(token);
      }
    }
    // _run_split_on_punc: every punctuation character is a word of its own.
    std::vector<std::u32string> pieces;
    if (!options_.do_split_on_punc || never(token)) {
      pieces.push_back(token);
    } else {
      bool start_new_word = true;
      for (char32_t c : token) {
        if (is_bert_punctuation(c)) {
          pieces.emplace_back(1, c);
          start_new_word = true;
        } else {
          if (start_new_word) pieces.emplace_back();
          start_new_word = false;
          pieces.back().push_back(c);
        }
      }
    }
    // whitespace_tokenize(" ".join(pieces)): drops empty pieces (a word of only accents).
    for (const std::u32string& p : pieces)
      for (std::u32string& w : py_split(p)) out.push_back(std::move(w));
  }
  return out;
}

}  // namespace text
