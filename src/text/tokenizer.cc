// The tokenizer interface's shared parts: the default special_ids() and load_tokenizer (see
// tokenizer.h).
#include "tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "base/enum_names.h"
#include "base/error.h"
#include "text/char_tokenizer.h"
#include "text/roformer_tokenizer.h"
#include "text/sentencepiece.h"

namespace text {

constexpr base::EnumName<TokenizerKind> kTokenizerKindNames[] = {
    {TokenizerKind::byte, "byte"}, {TokenizerKind::character, "char"}, {TokenizerKind::wordpiece, "wordpiece"},
    {TokenizerKind::sentencepiece, "sentencepiece"}};

const char* tokenizer_kind_name(TokenizerKind k) { return base::enum_name(kTokenizerKindNames, k); }

TokenizerKind parse_tokenizer_kind(const std::string& name) {
  return base::parse_enum(kTokenizerKindNames, name, "tokenizer");
}

std::vector<int32_t> Tokenizer::special_ids() const {
  const SpecialIds s = specials();
  std::vector<int32_t> ids;
  for (const int32_t id : {s.pad, s.unk, s.cls, s.sep, s.mask}) {
    if (id >= 0) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::exists(path)) throw base::Error(path + ": no such vocabulary file or directory");
  if (!fs::is_directory(path)) return std::make_shared<const RoFormerTokenizer>(RoFormerTokenizer::from_vocab_file(path));
  // vocab.txt first: a Hugging Face directory may hold the fast tokenizer's tokenizer.json beside it
  // (the same WordPiece vocabulary); ours holds tokenizer.json only for a char/byte tokenizer.
  if (fs::exists(path + "/vocab.txt")) {
    return std::make_shared<const RoFormerTokenizer>(RoFormerTokenizer::load(path, options));
  }
  if (fs::exists(path + "/tokenizer.json")) {
    return std::make_shared<const CharTokenizer>(CharTokenizer::load(path + "/tokenizer.json"));
  }
  if (fs::exists(path + "/spm.model")) {
    return std::make_shared<const SentencePiece>(SentencePiece::load(path + "/spm.model"));
  }
  throw base::Error(path + ": no tokenizer: neither vocab.txt (WordPiece), tokenizer.json (char/byte) nor spm.model (SentencePiece)");
}

}  // namespace text
