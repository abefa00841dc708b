// The text side of a language-modelling run: its tokenizer and the corpus read through it. Two kinds:
//   - char / byte (data::Tokenizer): the corpus is streamed from the file and tokenised per window
//     (data::Corpus); the checkpoint carries tokenizer.json;
//   - wordpiece (text::RoFormerTokenizer over a vocab.txt, jieba included): the file is tokenised
//     once, line by line in parallel, into memory (data::TokenCorpus, about 5 bytes per token), each
//     non-empty line followed by [SEP]; "##" pieces continue a word (for whole-word masking); the
//     checkpoint carries vocab.txt, tokenizer_config.json and special_tokens_map.json, so it is a
//     complete Hugging Face model directory.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"
#include "text/roformer_tokenizer.h"

namespace train {

// Writes a checkpoint's tokenizer files into a directory (tokenizer.json of the char/byte tokenizers,
// or the HF tokenizer files of a WordPiece or fine-tuned model).
using TokenizerWriter = std::function<void(const std::string& dir)>;

class LmText {
 public:
  explicit LmText(data::Tokenizer tok);
  explicit LmText(text::RoFormerTokenizer tok);
  // From a directory: tokenizer.json (char/byte) if present, else vocab.txt and its configs
  // (wordpiece). vocab_path may also name a vocab.txt file. Throws io::Error / base::Error naming
  // the file.
  static LmText load(const std::string& dir_or_vocab);

  std::string kind() const;  // "char", "byte" or "wordpiece"
  int64_t vocab_size() const;
  int32_t mask_id() const;
  int32_t sep_id() const;
  std::vector<int32_t> special_ids() const;  // never masked, never sampled
  std::vector<int32_t> encode(std::string_view text) const;
  // Specials are dropped; WordPiece pieces are joined as HF's convert_tokens_to_string (" ##" removed).
  std::string decode(const std::vector<int32_t>& ids) const;
  TokenizerWriter writer() const;

  // The corpus of a text file. For wordpiece, the ids are checked against model_vocab_size (the
  // model's embedding rows, >= the tokenizer's size). Throws base::Error / io::Error naming the file.
  std::unique_ptr<data::WindowSource> corpus(const std::string& path, double val_fraction,
                                             int64_t model_vocab_size) const;

  const data::Tokenizer* char_tokenizer() const { return chars_.get(); }
  const text::RoFormerTokenizer* wordpiece() const { return wordpiece_.get(); }

 private:
  std::shared_ptr<const data::Tokenizer> chars_;
  std::shared_ptr<const text::RoFormerTokenizer> wordpiece_;
  std::shared_ptr<const std::map<std::string, std::string>> files_;  // wordpiece: the tokenizer files, by name
};

// "wordpiece" corpora: the ids and word starts of a text file, each non-empty line's tokens followed
// by sep_id. Lines are tokenised in parallel (OpenMP); the result does not depend on the threads.
void tokenize_lines(const std::string& path, const text::RoFormerTokenizer& tok, std::vector<int32_t>* ids,
                    std::vector<uint8_t>* word_start);

}  // namespace train
