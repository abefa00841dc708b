// The WordPiece vocabulary (vocab.txt) and HF's WordpieceTokenizer: greedy longest-match-first
// sub-words with the "##" continuation prefix; a word longer than max_input_chars_per_word code
// points, or one with an unmatchable rest, becomes the unknown token.
//
// vocab.txt is read as transformers' load_vocab reads it (Python text mode, UTF-8): lines end at
// "\n", "\r\n" or a lone "\r"; the token is the line without its terminator; id = 0-based line
// number. As HF does: empty lines are tokens ("" gets an id), a UTF-8 BOM is not removed (it stays
// part of the first token), surrounding spaces are kept, and a duplicated token maps to the id of
// its LAST line (earlier ids still exist as lines but no token string maps to them). A file that
// cannot be read or is not UTF-8 gives base::Error naming the file (and the line).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace text {

// std::string keys looked up by string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

class Vocab {
 public:
  // Reads vocab.txt; throws base::Error ("<path>: cannot open ...", "<path>:<line>: invalid UTF-8").
  static Vocab load(const std::string& path);
  // From lines in memory (the file's content split as above), e.g. for tests. Throws base::Error
  // naming `name` for invalid UTF-8.
  static Vocab from_text(std::string_view content, const std::string& name = "<memory>");
  // tokens[i] gets id i (duplicates: the last one wins).
  static Vocab from_tokens(std::vector<std::string> tokens);

  // The id of `token`, or -1.
  int32_t find(std::string_view token) const {
    auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }
  bool contains(std::string_view token) const { return ids_.find(token) != ids_.end(); }
  // The line with id `id` (std::out_of_range outside [0, lines())).
  const std::string& token(int32_t id) const { return lines_.at(static_cast<size_t>(id)); }
  // Number of lines = 1 + the largest id.
  int64_t lines() const { return static_cast<int64_t>(lines_.size()); }
  // Number of distinct tokens (HF's len(vocab) / vocab_size); < lines() when tokens repeat.
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }

 private:
  std::vector<std::string> lines_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
};

class WordPiece {
 public:
  static constexpr int kDefaultMaxInputCharsPerWord = 100;

  WordPiece(std::shared_ptr<const Vocab> vocab, std::string unk_token = "[UNK]",
            int max_input_chars_per_word = kDefaultMaxInputCharsPerWord, std::string prefix = "##");

  // HF WordpieceTokenizer.tokenize(text): splits `text` on Python whitespace and appends the pieces
  // of every word (vocabulary strings, or unk_token).
  std::vector<std::string> tokenize(std::string_view utf8) const;
  // The pieces of one word (no whitespace inside) appended to *out; with spans, each piece's code
  // points [first, second) of the word appended to *spans (the whole word for the unknown token).
  void tokenize_word(std::u32string_view word, std::vector<std::string>* out,
                     std::vector<std::pair<int64_t, int64_t>>* spans = nullptr) const;

  const Vocab& vocab() const { return *vocab_; }
  const std::string& unk_token() const { return unk_; }

 private:
  std::shared_ptr<const Vocab> vocab_;
  std::string unk_;
  int max_chars_;
  std::string prefix_;
};

}  // namespace text
