// vocab.txt reading and WordPiece sub-word splitting (see wordpiece.h).
#include "text/wordpiece.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/error.h"
#include "text/basic_tokenizer.h"

namespace text {

Vocab Vocab::load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw base::Error(path + ": cannot read the vocabulary: is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::Error(path + ": cannot open the vocabulary: " + std::strerror(errno));
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw base::Error(path + ": cannot read the vocabulary: " + std::strerror(errno));
  return from_text(content, path);
}

Vocab Vocab::from_text(std::string_view content, const std::string& name) {
  // Python universal newlines: "\r\n", "\r" and "\n" all end a line; a final line without a
  // terminator still counts, an empty remainder after the last terminator does not.
  std::vector<std::string> tokens;
  size_t i = 0;
  while (i < content.size()) {
    size_t j = i;
    while (j < content.size() && content[j] != '\n' && content[j] != '\r') ++j;
    std::string_view line = content.substr(i, j - i);
    if (!base::utf8_valid(line))
      throw base::Error(name + ":" + std::to_string(tokens.size() + 1) + ": the vocabulary is not valid UTF-8");
    tokens.emplace_back(line);
    if (j < content.size() && content[j] == '\r' && j + 1 < content.size() && content[j + 1] == '\n') ++j;
    i = j + 1;
  }
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) throw base::Error(name + ": the vocabulary has too many lines");
  return from_tokens(std::move(tokens));
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens) {
  Vocab v;
  v.lines_ = std::move(tokens);
  v.ids_.reserve(v.lines_.size());
  for (size_t i = 0; i < v.lines_.size(); ++i) v.ids_[v.lines_[i]] = static_cast<int32_t>(i);  // last wins
  return v;
}

WordPiece::WordPiece(std::shared_ptr<const Vocab> vocab, std::string unk_token, int max_input_chars_per_word,
                     std::string prefix)
    : vocab_(std::move(vocab)), unk_(std::move(unk_token)), max_chars_(max_input_chars_per_word),
      prefix_(std::move(prefix)) {}

std::vector<std::string> WordPiece::tokenize(std::string_view utf8) const {
  std::vector<std::string> out;
  for (const std::u32string& w : py_split(base::utf8_decode(utf8))) tokenize_word(w, &out);
  return out;
}

void WordPiece::tokenize_word(std::u32string_view word, std::vector<std::string>* out,
                              std::vector<std::pair<int64_t, int64_t>>* spans) const {
  const size_t n = word.size();
  const auto whole = std::pair<int64_t, int64_t>(0, static_cast<int64_t>(n));
  if (n > static_cast<size_t>(max_chars_)) {
    out->push_back(unk_);
    if (spans) spans->push_back(whole);
    return;
  }
  // Byte offsets of each code point in the UTF-8 form, so candidates are substrings.
  std::string utf8;
  std::vector<size_t> off(n + 1);
  for (size_t i = 0; i < n; ++i) {
    off[i] = utf8.size();
    base::utf8_append(word[i], &utf8);
  }
  off[n] = utf8.size();
  const size_t first = out->size(), first_span = spans ? spans->size() : 0;
  std::string candidate;
  size_t start = 0;
  while (start < n) {
    size_t end = n;
    bool found = false;
    for (; start < end; --end) {
      const std::string_view piece = std::string_view(utf8).substr(off[start], off[end] - off[start]);
      if (start == 0) {
        found = vocab_->contains(piece);
      } else {
        candidate.assign(prefix_).append(piece);
        found = vocab_->contains(candidate);
      }
      if (found) break;
    }
    if (!found) {  // the whole word becomes [UNK], not just its rest
      out->resize(first);
      out->push_back(unk_);
      if (spans) {
        spans->resize(first_span);
        spans->push_back(whole);
      }
      return;
    }
    out->push_back(start == 0 ? std::string(std::string_view(utf8).substr(0, off[end])) : candidate);
    if (spans) spans->emplace_back(static_cast<int64_t>(start), static_cast<int64_t>(end));
    start = end;
  }
}

}  // namespace text
