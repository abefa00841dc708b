// The one tokenizer interface: what training, evaluation, sampling and checkpoints need from a
// tokenizer, whatever its kind. Implementations, their kind() and the files save() writes:
//   CharTokenizer      (char_tokenizer.h)      "byte", "char"    tokenizer.json
//   RoFormerTokenizer  (roformer_tokenizer.h)  "wordpiece"       vocab.txt, tokenizer_config.json,
//                                                                special_tokens_map.json
//   SentencePiece      (sentencepiece.h)       "sentencepiece"   spm.model
// Each class keeps its own richer API (HF pairs, truncation, padding and offsets; SentencePiece
// pieces and int64 ids; streaming byte/char encoding); this is the part they share. A new tokenizer
// is a class in this folder that implements Tokenizer, writes its files in save() and gets a branch
// in load_tokenizer().
//
// The contract:
//   - encode_ids(text): the ids of the text, no special tokens added ([CLS]/[SEP], bos/eos). Every
//     id is in [0, vocab_size()). May throw base::Error (WordPiece: jieba's dictionary unreadable).
//   - decode_ids(ids): the text of ids; special ids decode to nothing, except the unknown token of
//     char/byte (U+FFFD) and SentencePiece (" ⁇ "); WordPiece joins "##" pieces to the piece before
//     and separates words by one space. Ids outside [0, vocab_size()) throw (std::out_of_range or
//     base::Error), except WordPiece's, which read as the unknown token as in HF.
//   - vocab_size(): how many ids the tokenizer can produce. A model may have more embedding rows.
//   - specials(): the ids of the special tokens, -1 where the tokenizer has none; special_ids(): the
//     sorted ids that are never masked and never sampled (specials() and, for WordPiece, its
//     additional special tokens).
//   - save(dir): writes the tokenizer's files into an existing directory, each atomically;
//     load_tokenizer(dir) reads them back to a tokenizer that gives the same ids.
// All const methods may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace text {

struct SpecialIds {
  int32_t pad = -1;
  int32_t unk = -1;
  int32_t cls = -1;   // [CLS], or SentencePiece's bos
  int32_t sep = -1;   // [SEP], or SentencePiece's eos
  int32_t mask = -1;  // [MASK]; SentencePiece has none
};

// What a tokenizer is; tokenizer_kind_name gives "byte", "char", "wordpiece" or "sentencepiece" (as
// `roformer train --tokenizer` and the saved training options name them), and parse_tokenizer_kind
// throws std::invalid_argument naming the ones there are.
enum class TokenizerKind { byte, character, wordpiece, sentencepiece };
const char* tokenizer_kind_name(TokenizerKind k);
TokenizerKind parse_tokenizer_kind(const std::string& name);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual TokenizerKind kind() const = 0;
  std::string kind_name() const { return tokenizer_kind_name(kind()); }
  virtual int64_t vocab_size() const = 0;
  virtual SpecialIds specials() const = 0;
  // Never masked, never sampled. By default the non-negative ids of specials(), sorted, distinct.
  virtual std::vector<int32_t> special_ids() const;
  virtual std::vector<int32_t> encode_ids(std::string_view text) const = 0;
  virtual std::string decode_ids(const std::vector<int32_t>& ids) const = 0;
  virtual void save(const std::string& dir) const = 0;

 protected:
  Tokenizer() = default;
  Tokenizer(const Tokenizer&) = default;
  Tokenizer(Tokenizer&&) = default;
  Tokenizer& operator=(const Tokenizer&) = default;
  Tokenizer& operator=(Tokenizer&&) = default;
};

// How a WordPiece tokenizer is loaded (the other kinds take no options).
struct LoadOptions {
  std::string jieba_dict;         // overrides $ROFORMER_JIEBA_DICT and the Debian default
  std::optional<bool> use_jieba;  // overrides tokenizer_class
};

// The tokenizer of a model directory: vocab.txt and its configuration files (WordPiece, with
// `options`) if present, else tokenizer.json (char/byte), else spm.model (SentencePiece). `path` may also
// name a bare vocab.txt (RoFormerTokenizer::from_vocab_file). Throws base::Error naming the path:
// missing, none of those files, or a file that does not load.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path, const LoadOptions& options = {});

}  // namespace text
