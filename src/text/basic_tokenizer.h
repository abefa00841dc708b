// Hugging Face's BERT BasicTokenizer (transformers v4.40 `BasicTokenizer`) and the Unicode helpers
// the HF tokenizers rely on (Python's str.isspace / str.lower, unicodedata categories, NFC/NFD),
// computed with utf8proc rather than hand-made tables. BasicTokenizer.tokenize(text):
//   clean (drop U+0000, U+FFFD and category C* except \t \n \r; HF whitespace → ' ')
//   → spaces around CJK ideographs → NFC → split on Python whitespace
//   → per word not in never_split: lower-case, strip accents (NFD, drop Mn) → split off punctuation.
// Text is UTF-8; invalid UTF-8 is read as U+FFFD per maximal invalid subpart (Python's
// errors="replace", the policy of text/char_tokenizer.h), which the cleaning step then drops.
//
// Agreement with Python: utf8proc 2.8 (Unicode 15.0) agrees with CPython 3.11 (Unicode 14.0) on the
// category, isspace, per-character lower(), NFD and NFC of every code point assigned in Unicode 14
// (checked exhaustively when this was written), with one exception handled here: U+0130 lower-cases
// to "i̇" (U+0069 U+0307) as in Python's full case mapping (utf8proc gives U+0069). Characters new in
// Unicode 15 are category Cn (dropped as control) for Python ≤ 3.11 but assigned for utf8proc and
// Python ≥ 3.12. Python's whole-string lower() applies Final_Sigma (Σ → ς at a word end); our lower
// maps per character (Σ → σ) like HF's PreTrainedTokenizer, which lower-cases one character at a
// time before the BasicTokenizer sees the text, so the pipeline never reaches Final_Sigma.
//
// Offsets: tokenize can also say where each character of its words came from (CharSpan, code points
// of the caller's text), as HF's fast tokenizers' NormalizedString alignments do: a character keeps
// its origin through cleaning, CJK spacing, lower-casing and accent stripping (each character of a
// decomposition keeps its source's), dropped characters (controls, stripped marks) belong to no
// word character, and characters NFC composes span the characters they came from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/utf8.h"

namespace text {

// ---- UTF-8 and Unicode helpers (Python semantics) ----

// UTF-8 decoding and encoding: base/utf8.h (base::utf8_decode, utf8_encode, utf8_valid, ...).

// Python str.isspace(): category Zs or bidi class WS, B or S (also Python's \s and str.split()).
bool is_py_space(char32_t c);
// HF _is_whitespace: ' ', \t, \n, \r or category Zs.
bool is_bert_whitespace(char32_t c);
// HF _is_control: category C* (Cc, Cf, Cn, Co, Cs) except \t, \n, \r.
bool is_bert_control(char32_t c);
// HF _is_punctuation: ASCII 33-47, 58-64, 91-96, 123-126, or category P*.
bool is_bert_punctuation(char32_t c);
// HF _is_chinese_char: the CJK Unified Ideographs blocks U+4E00-9FFF, 3400-4DBF, 20000-2A6DF,
// 2A700-2B73F, 2B740-2B81F, 2B820-2CEAF, F900-FAFF, 2F800-2FA1F.
bool is_cjk_char(char32_t c);
// True for general category Mn (nonspacing mark).
bool is_nonspacing_mark(char32_t c);

// Python's per-character str.lower() (full lower-case mapping, no Final_Sigma context).
std::u32string py_lower(std::u32string_view s);
// unicodedata.normalize("NFC" / "NFD", s).
std::u32string nfc(std::u32string_view s);
std::u32string nfd(std::u32string_view s);
// HF _run_strip_accents: NFD, then drop category Mn.
std::u32string strip_accents(std::u32string_view s);
// Python str.split() with no argument: maximal runs of non-isspace characters.
std::vector<std::u32string> py_split(std::u32string_view s);

// Where a character of a normalised text came from: code points [first, second) of the original.
using CharSpan = std::pair<int64_t, int64_t>;

// What BasicTokenizer::tokenize needs to say where the characters of its words came from.
struct Origins {
  const CharSpan* in = nullptr;  // the origin of each character of the text (text.size() entries)
  std::vector<CharSpan> out;     // set: the origin of every character of the returned words, words in order
  std::vector<CharSpan> cleaned, word;  // scratch, kept across calls to spare allocations
};

// ---- BasicTokenizer ----

struct BasicTokenizerOptions {
  bool do_lower_case = true;
  bool tokenize_chinese_chars = true;
  std::optional<bool> strip_accents;  // nullopt (HF None): strip exactly when lower-casing
  bool do_split_on_punc = true;
  std::vector<std::string> never_split;  // words (after cleaning/NFC) passed through unchanged
};

class BasicTokenizer {
 public:
  explicit BasicTokenizer(BasicTokenizerOptions options = {});

  // HF BasicTokenizer.tokenize(text, never_split=extra): the words of `utf8` as UTF-8 strings, none
  // empty, none containing Python whitespace. `extra_never_split` (may be null) is united with the
  // options' never_split for this call (HF passes the special tokens here).
  std::vector<std::string> tokenize(std::string_view utf8,
                                    const std::unordered_set<std::string>* extra_never_split = nullptr) const;
  // The same on code points.
  std::vector<std::u32string> tokenize(std::u32string_view text,
                                       const std::unordered_set<std::string>* extra_never_split = nullptr) const;
  // The same with origins (null: none), which also says where each word character came from (see
  // the top of this file).
  std::vector<std::u32string> tokenize(std::u32string_view text, const std::unordered_set<std::string>* extra_never_split,
                                       Origins* origins) const;

  // Membership in the options' never_split (HF basic_tokenizer.never_split).
  bool in_never_split(const std::string& word) const { return never_split_.count(word) != 0; }
  const BasicTokenizerOptions& options() const { return options_; }
  // Whether words are accent-stripped: strip_accents, or when null do_lower_case.
  bool strips_accents() const { return options_.strip_accents.value_or(options_.do_lower_case); }

 private:
  BasicTokenizerOptions options_;
  std::unordered_set<std::string> never_split_;
};

}  // namespace text
