// The Hugging Face RoFormerTokenizer (transformers v4.40, the slow/Python tokenizer) in C++: load a
// model directory's vocab.txt + tokenizer_config.json + special_tokens_map.json and encode text,
// sentence pairs and batches into input_ids / token_type_ids / attention_mask with HF's special
// tokens, truncation and padding. tokenize(text) is, as in HF:
//   1. lower-case the text per character outside special tokens (when do_lower_case);
//   2. split it around added/special tokens ([CLS], [MASK], ... stay whole);
//   3. segment each other piece with jieba (cut(piece, HMM=False), jieba.h); a jieba word that is
//      itself in vocab.txt is one token, any other word (spaces included: they vanish) goes through
//      BERT's BasicTokenizer (basic_tokenizer.h) and WordPiece (wordpiece.h).
// With use_jieba = false (tokenizer_class BertTokenizer) step 3 is plain BERT: BertTokenizer.
//
//   text::LoadOptions opt;
//   opt.jieba_dict = flag;  // "" → $ROFORMER_JIEBA_DICT, else Debian python3-jieba's dict.txt
//   auto tok = text::RoFormerTokenizer::load(dir, opt);
//   for (each line) std::cout << tok.encode(line).to_json() << '\n';   // {"tokens":[...],"input_ids":[...]}
//
// All const methods may run concurrently (the jieba dictionary is read once, on first need).
// Checked against transformers 4.40.2 + jieba 0.42.1: the fixture's cases, ~20k random mixed-script
// strings (tokens and ids, RoFormer and BERT modes, several configurations) and 4k random
// pair/truncation/padding/batch option sets give identical output; the differential fuzzer
// (tests/hf/tokenizer_diff.py, docs/reliability.md) compares the ids of random bytes (every Unicode
// category, invalid UTF-8 read as U+FFFD per maximal subpart = Python's errors="replace", controls,
// U+FFFD, NUL) in ctest and scripts/fuzz.sh. As in HF, a jieba word that is a vocab.txt token is kept
// whole before any cleaning (U+FFFD or NUL in the vocabulary are then tokens). Known deviations (none
// met by those checks): HF's Trie/regex pick the first listed added token when two overlap at a position,
// we pick the longest; AddedToken.single_word is ignored (lstrip/rstrip are honoured); characters
// assigned in a Unicode version newer than the Python's (utf8proc 2.8: 15.0; Python 3.11: 14.0,
// 3.10: 13.0) are unassigned, hence dropped as control characters, in Python (basic_tokenizer.h);
// the fast tokenizer (RoFormerTokenizerFast, which normalises before jieba) is not reproduced.
//
// Offsets (Encoding::offsets), as HF fast tokenizers' return_offsets_mapping=True gives them: per
// token, the code points [start, end) of its own text it came from (Python str indices of
// text.decode("utf-8", errors="replace"); base::utf8_byte_offsets turns them into byte offsets of the
// UTF-8), (0, 0) for [CLS], [SEP] and padding, a pair's second-text tokens indexing into the second
// text. They are computed alongside the tokens (encode only; tokenize skips them): every normalised
// character keeps the original character(s) it came from through lower-casing, cleaning, CJK spacing,
// NFC and accent stripping (basic_tokenizer.h), and a token spans from the start of its first
// character's origin to the end of its last's: a WordPiece piece its characters, [UNK] its whole
// word, a jieba word its characters, an added token its match plus the whitespace its lstrip/rstrip
// eats (as far as the fast tokenizer counts it). So, as in HF: é → e spans é; a mark that accent
// stripping drops, or a dropped control character, is inside a token's span only between its
// characters (e + U+0301 → e spans the e alone); İ → i spans İ. Without an HF counterpart: NFC (the
// fast BertNormalizer has none) makes a composed character span what it composed (cased
// e + U+0301 → é spans both). tests/hf/offsets_vs_fast.py compares them with BertTokenizerFast and
// RoFormerTokenizerFast wherever the tokens agree.
//
// It is the "wordpiece" text::Tokenizer (tokenizer.h): encode_ids is tokenize's ids, and save writes
// the tokenizer's files (vocab.txt, tokenizer_config.json, special_tokens_map.json).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "text/basic_tokenizer.h"
#include "text/jieba.h"
#include "text/tokenizer.h"
#include "text/wordpiece.h"

namespace text {

enum class Truncation { None, LongestFirst, OnlyFirst, OnlySecond };
enum class Padding { None, Longest, MaxLength };
enum class Side { Right, Left };

struct EncodeOptions {
  bool add_special_tokens = true;   // [CLS] A [SEP] (B [SEP])
  Truncation truncation = Truncation::None;
  // Longest: to the longest of the batch (a single text: no-op unless pad_to_multiple_of). As HF, a
  // single encoding with no tokens at all (no specials, empty text) is never padded.
  Padding padding = Padding::None;
  // -1 = HF's None: truncation / MaxLength padding then use model_max_length, and are switched off
  // when the config has none (as HF, which only warns). 0 = HF's 0: no truncation.
  int64_t max_length = -1;
  int64_t pad_to_multiple_of = 0;   // 0 = off; rounds the padded length up
  std::optional<Side> padding_side, truncation_side;  // default: the tokenizer's (config, Right)
};

// One encoded sequence; every vector has size() entries. Padding has token pad_token, id pad_id,
// type 0, mask 0 and special 1.
struct Encoding {
  std::vector<std::string> tokens;        // the token strings, [CLS]/[SEP]/[PAD] included
  std::vector<int32_t> input_ids;
  std::vector<int32_t> token_type_ids;    // 0 for the first text (and its [CLS] and [SEP]), 1 for the second
  std::vector<int32_t> attention_mask;    // 1 real token, 0 padding
  std::vector<int32_t> special_tokens_mask;  // 1 for [CLS]/[SEP]/padding added here
  // Where each token came from: code points [first, second) of its own text (a pair's second text for
  // its tokens), HF fast tokenizers' offset_mapping; (0, 0) for [CLS], [SEP] and padding. See the top.
  // Filled by the encode methods; an Encoding assembled by hand from ids may leave it empty.
  std::vector<std::pair<int64_t, int64_t>> offsets;
  size_t size() const { return input_ids.size(); }
  // One line of JSON: {"tokens": [...], "input_ids": [...]} (UTF-8, not \u-escaped), with all_fields
  // also "token_type_ids" and "attention_mask", and with with_offsets "offsets": [[start, end], ...].
  std::string to_json(bool all_fields = false, bool with_offsets = false) const;
};

// The tokenizers library's WordPiece decoder (prefix "##", cleanup on), which is what a fast
// BERT/RoFormer tokenizer's convert_tokens_to_string does and so what transformers' pipelines show
// as an entity's word: a "##" piece joins the token before it (the first token keeps its prefix),
// any other token follows a space, and each token is cleaned as that decoder cleans it (" ." → ".",
// " ?" → "?", " !" → "!", " ," → ",", " ' " → "'", " n't" → "n't", " 'm" → "'m", " do not" →
// " don't", " 's" → "'s", " 've" → "'ve", " 're" → "'re").
std::string wordpiece_decoder_join(const std::vector<std::string>& tokens);

// A batch of equal-length encodings as (B, T) row-major int64 arrays (for model::Inputs).
struct BatchArrays {
  int64_t B = 0, T = 0;
  std::vector<int64_t> input_ids, token_type_ids, attention_mask;
};
// Throws std::invalid_argument if the encodings differ in length (pad with Padding::Longest).
BatchArrays to_arrays(const std::vector<Encoding>& batch);

// An added token (tokenizer_config.json "added_tokens_decoder", or a special token).
struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = true, lstrip = false, rstrip = false, normalized = false, single_word = false;
};

// Everything tokenizer_config.json + special_tokens_map.json say (HF defaults otherwise).
struct TokenizerConfig {
  bool use_jieba = true;  // RoFormerTokenizer (true) or BertTokenizer (false), from tokenizer_class
  bool do_lower_case = true;
  bool do_basic_tokenize = true;
  bool tokenize_chinese_chars = true;
  std::optional<bool> strip_accents;      // null: follows do_lower_case
  std::vector<std::string> never_split;
  AddedToken unk_token{"[UNK]"}, sep_token{"[SEP]"}, pad_token{"[PAD]"}, cls_token{"[CLS]"}, mask_token{"[MASK]"};
  std::vector<AddedToken> additional_special_tokens;
  std::vector<AddedToken> added_tokens;   // added_tokens_decoder, ids given
  int64_t model_max_length = -1;          // -1: none (HF's 1e30 "very large")
  bool clean_up_tokenization_spaces = true;  // decode's spacing fixes (HF's default)
  Side padding_side = Side::Right, truncation_side = Side::Right;
  int max_input_chars_per_word = WordPiece::kDefaultMaxInputCharsPerWord;
  std::string jieba_dict;                 // "" = default_jieba_dict_path()
};

class RoFormerTokenizer final : public Tokenizer {
 public:
  // Reads <dir>/vocab.txt (required), <dir>/tokenizer_config.json and <dir>/special_tokens_map.json
  // (optional; the latter overrides the special tokens of the former, as from_pretrained does).
  // Throws base::Error naming the file: unreadable, bad JSON, wrong value types, an unsupported
  // tokenizer_class. The jieba dictionary is not read here (see jieba.h).
  static RoFormerTokenizer load(const std::string& dir, const LoadOptions& options = {});
  // A bare vocab.txt with HF's defaults (uncased, jieba on). Throws base::Error naming the file.
  static RoFormerTokenizer from_vocab_file(const std::string& vocab_txt);
  // From a vocabulary and a configuration. Special tokens missing from both the vocabulary and
  // added_tokens get new ids after them, as HF's _add_tokens does.
  RoFormerTokenizer(std::shared_ptr<const Vocab> vocab, TokenizerConfig config);

  // HF tokenize(text): the tokens without [CLS]/[SEP]. May throw base::Error (jieba dictionary).
  std::vector<std::string> tokenize(std::string_view text) const;
  // The words jieba returns for the text (after lower-casing, over the pieces between added tokens),
  // like cases.json's jieba_words; empty when use_jieba is off.
  std::vector<std::string> jieba_words(std::string_view text) const;

  Encoding encode(std::string_view text, const EncodeOptions& options = {}) const;
  Encoding encode_pair(std::string_view first, std::string_view second, const EncodeOptions& options = {}) const;
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, const EncodeOptions& options = {}) const;
  std::vector<Encoding> encode_pair_batch(const std::vector<std::pair<std::string, std::string>>& pairs,
                                          const EncodeOptions& options = {}) const;

  // Added tokens first, then vocab.txt, else the unknown token's id.
  int32_t token_to_id(std::string_view token) const;
  // Added tokens first, then vocab.txt (an id shadowed by a later duplicate line → unk_token).
  std::string id_to_token(int32_t id) const;
  std::vector<int32_t> convert_tokens_to_ids(const std::vector<std::string>& tokens) const;

  int32_t unk_id() const { return unk_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t cls_id() const { return cls_id_; }
  int32_t mask_id() const { return mask_id_; }
  // HF len(tokenizer): distinct tokens of vocab.txt and the added tokens (= vocab_size()).
  int64_t size() const { return size_; }
  const Vocab& vocab() const { return *vocab_; }
  const TokenizerConfig& config() const { return config_; }
  // The jieba segmenter (shared by copies of this tokenizer); null when use_jieba is off.
  const Jieba* jieba() const { return jieba_.get(); }

  // ---- text::Tokenizer ----
  TokenizerKind kind() const override { return TokenizerKind::wordpiece; }
  int64_t vocab_size() const override { return size_; }
  SpecialIds specials() const override { return {pad_id_, unk_id_, cls_id_, sep_id_, mask_id_}; }
  // specials() and the additional special tokens.
  std::vector<int32_t> special_ids() const override;
  // The ids of tokenize(text).
  std::vector<int32_t> encode_ids(std::string_view text) const override;
  // Special ids dropped; a "##" piece joins the token before it, other tokens are separated by one
  // space (HF's convert_tokens_to_string, without decode's clean-up).
  std::string decode_ids(const std::vector<int32_t>& ids) const override;
  // The files the tokenizer came from, byte for byte: load(dir)'s vocab.txt, tokenizer_config.json
  // and special_tokens_map.json, or when it has neither, tokenizer_files' defaults for its
  // do_lower_case (what transformers assumes without them); from_vocab_file's vocab.txt with the
  // default configuration files of wordpiece_trainer.h's tokenizer_files. Built from a Vocab in memory, it
  // writes the vocabulary's lines and tokenizer_files' configuration for its do_lower_case.
  void save(const std::string& dir) const override;

 private:
  struct Piece {
    std::u32string text;
    int added = -1;     // index into added_ when the piece is an added token
    size_t begin = 0;   // where text starts in split_added's (lower-cased) text: the index of its spans
    CharSpan span;      // an added token (with spans): the original code points it covers
  };
  struct Seq {
    std::vector<std::string> tokens;
    std::vector<int32_t> ids;
    std::vector<CharSpan> offsets;
  };
  // The pieces of the text around its added tokens; with spans, *spans gets where each character of
  // the text they index (Piece::begin) came from.
  std::vector<Piece> split_added(std::string_view text, std::vector<CharSpan>* spans = nullptr) const;
  size_t match_added(std::u32string_view text, size_t pos, bool protected_only) const;
  // Offsets being collected: each token's origin appended to *offsets; the rest is scratch kept
  // across words.
  struct Track {
    std::vector<CharSpan>* offsets;
    Origins origins;
    std::vector<CharSpan> pieces;
  };
  // Tokens appended to *out; with track (then spans: where text's characters came from, else both
  // null) their origins to *track->offsets.
  void bert_tokenize(std::u32string_view text, const CharSpan* spans, std::vector<std::string>* out, Track* track) const;
  void tokenize_into(std::string_view text, std::vector<std::string>* out, std::vector<CharSpan>* offsets) const;
  Seq to_seq(std::string_view text) const;
  Encoding build(Seq a, const Seq* b, const EncodeOptions& o, int64_t max_length, Truncation t) const;
  void pad(std::vector<Encoding>* batch, const EncodeOptions& o) const;
  std::vector<Encoding> encode_many(const std::vector<std::pair<std::string_view, const std::string*>>& items,
                                    const EncodeOptions& o, bool batch) const;

  std::shared_ptr<const Vocab> vocab_;
  TokenizerConfig config_;
  BasicTokenizer basic_;
  WordPiece wordpiece_;
  std::shared_ptr<Jieba> jieba_;
  std::vector<AddedToken> added_;                    // every added token (specials included)
  std::vector<std::u32string> added_u32_;            // their contents as code points
  std::vector<bool> added_protected_;                // kept out of lower-casing
  std::unordered_map<char32_t, std::vector<size_t>> added_by_first_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> added_ids_;  // content → id
  std::unordered_map<int32_t, std::string> added_by_id_;
  std::unordered_set<std::string> special_set_;      // all_special_tokens (the BasicTokenizer's never_split)
  int32_t unk_id_ = -1, sep_id_ = -1, pad_id_ = -1, cls_id_ = -1, mask_id_ = -1;
  int64_t size_ = 0;
  std::shared_ptr<const std::map<std::string, std::string>> files_;  // save()'s files by name; null: generated
};

}  // namespace text
