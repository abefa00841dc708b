// Byte- and character-level tokenizers (the text::Tokenizer interface, tokenizer.h): byte level
// (every UTF-8 byte is a token, vocabulary 261) and character level (one token per Unicode code
// point, vocabulary built by streaming a corpus). Both put five special tokens first at fixed ids, so
// a model config can hard-code pad_token_id = 0:
//   [PAD]=0  [UNK]=1  [CLS]=2  [SEP]=3  [MASK]=4
// Invalid UTF-8 is never an error: each maximal invalid subpart (Unicode §3.9 / WHATWG, the policy of
// Python's errors="replace") is read as U+FFFD, both when counting a vocabulary and when encoding, so
// any byte string tokenizes and the vocabulary is a pure function of the file's bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"

namespace text {

// The default read size for streaming a file (vocabulary counting, corpus scans); tests pass tiny
// values to exercise code points split across chunks.
inline constexpr size_t kDefaultChunkBytes = size_t{1} << 20;

class CharTokenizer final : public Tokenizer {
 public:
  enum class Level { Byte, Char };
  static constexpr int32_t kPad = 0, kUnk = 1, kCls = 2, kSep = 3, kMask = 4;
  static constexpr int32_t kNumSpecial = 5;

  // 5 specials + the 256 byte values (byte b has id 5 + b) → vocabulary 261.
  static CharTokenizer byte_level();
  // Char vocabulary from the code points of a file, read in chunks of chunk_bytes (so files larger
  // than memory work). max_vocab = 0 keeps every code point seen; otherwise the max_vocab − 5 most
  // frequent are kept (ties: smaller code point first) and the rest encode as [UNK]. Tokens get ids
  // 5, 6, ... in code-point order. Throws base::Error (missing or empty file), std::invalid_argument
  // (max_vocab not 0 and below 6).
  static CharTokenizer char_level_from_file(const std::string& path, int64_t max_vocab = 0,
                                            size_t chunk_bytes = kDefaultChunkBytes);
  // The same from text in memory (the file version on a file holding `text` gives an equal tokenizer).
  static CharTokenizer char_level_from_text(std::string_view text, int64_t max_vocab = 0);
  // A char tokenizer over exactly these code points, ids 5, 6, ... in the given order. Throws
  // std::invalid_argument on duplicates, non-scalar values or an empty list.
  static CharTokenizer char_level_from_code_points(const std::vector<char32_t>& code_points);

  // JSON {"version": 1, "kind": "byte"|"char", "tokens": [...]} where tokens are the char vocabulary
  // (ids 5, 6, ... in order, each a one-code-point UTF-8 string; [] for byte). load() rejects anything
  // else with base::Error naming the file: bad JSON, missing or unknown fields, a wrong version or kind,
  // tokens that are not one code point, duplicates. save(dir) replaces dir/tokenizer.json atomically.
  static CharTokenizer load(const std::string& path);
  void save(const std::string& dir) const override;
  std::string to_json() const;

  std::vector<int32_t> encode_ids(std::string_view utf8) const override;
  // Streaming form: appends to *out the tokens of a prefix of `bytes`, at most max_tokens of them,
  // and returns the bytes consumed. Without at_end, an unfinished code point at the end of `bytes` is
  // left unconsumed (for the caller to complete with the next chunk); with it, it becomes U+FFFD.
  size_t encode_some(std::string_view bytes, bool at_end, size_t max_tokens, std::vector<int32_t>* out) const;
  // Specials decode to "" except [UNK] → U+FFFD. Byte level returns the raw bytes, which need not be
  // valid UTF-8 (a window may start or end inside a character). Throws std::out_of_range naming the
  // id for ids outside [0, vocab_size).
  std::string decode_ids(const std::vector<int32_t>& ids) const override;

  int64_t vocab_size() const override;
  TokenizerKind kind() const override { return level_ == Level::Byte ? TokenizerKind::byte : TokenizerKind::character; }
  SpecialIds specials() const override { return {kPad, kUnk, kCls, kSep, kMask}; }
  Level level() const { return level_; }
  bool is_special(int32_t id) const { return id >= 0 && id < kNumSpecial; }
  // The char vocabulary (ids 5, 6, ...); empty for byte level.
  const std::vector<char32_t>& code_points() const { return code_points_; }

  bool operator==(const CharTokenizer& o) const { return level_ == o.level_ && code_points_ == o.code_points_; }

 private:
  CharTokenizer() = default;
  int32_t char_id(char32_t cp) const;

  Level level_ = Level::Byte;
  std::vector<char32_t> code_points_;
  std::vector<int32_t> bmp_ids_;                    // char level: id of each code point < 0x10000 (fast path)
  std::unordered_map<char32_t, int32_t> astral_ids_;  // char level: ids of code points >= 0x10000
};

}  // namespace text
