// Learning a BERT WordPiece vocabulary (vocab.txt) from text, as Hugging Face tokenizers'
// WordPieceTrainer does: BPE merges over words with the "##" continuation prefix.
//   1. Words: each line through BERT's BasicTokenizer (basic_tokenizer.h: cleaning, CJK characters
//      as single words, punctuation split off, optional lower-casing and accent stripping), counted.
//   2. Initial symbols: each word's first character as itself, every later one as "##c". The vocabulary
//      starts with the special tokens, then the characters (by code point), then the "##" characters.
//   3. Merges: repeatedly the most frequent adjacent symbol pair (word counts as weights; ties: the
//      pair whose symbol ids are smallest, so the result is deterministic) becomes one symbol, "ab"
//      from "a" + "##b" and "##ab" from "##a" + "##b", until the vocabulary has `vocab_size` entries or
//      no pair occurs min_frequency times.
// With chinese_words = N (RoFormer/WoBERT's Chinese vocabulary), each line is also cut by jieba
// (RoFormerTokenizer's pre-tokenizer) and the N most frequent words of two or more CJK characters
// (count >= min_frequency; ties by text) join the vocabulary after the characters, before the merges:
// RoFormerTokenizer keeps a jieba word whole when it is in the vocabulary and splits it otherwise.
// The file then tokenises with RoFormerTokenizer / BertTokenizer (ours and transformers': the greedy
// longest-match WordPiece of wordpiece.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "text/basic_tokenizer.h"
#include "text/jieba.h"

namespace text {

struct WordPieceTrainerOptions {
  int64_t vocab_size = 30000;
  int64_t min_frequency = 2;   // a pair must occur this often (weighted) to be merged
  bool lowercase = true;       // BasicTokenizer do_lower_case (accents stripped with it, as HF)
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  int64_t max_word_chars = 100;  // longer words are skipped (WordPiece maps them to [UNK] anyway)
  int64_t chinese_words = 0;      // jieba words to add whole (0: characters only, as BERT-Chinese)
  std::string jieba_dict;         // empty: default_jieba_dict_path()
};

class WordPieceTrainer {
 public:
  explicit WordPieceTrainer(WordPieceTrainerOptions options);
  // Counts the words of one line of text (UTF-8; invalid bytes are dropped as BasicTokenizer does).
  void add_line(std::string_view line);
  // Counts every line of a file; throws base::Error naming the file when it cannot be read.
  void add_file(const std::string& path);
  int64_t distinct_words() const { return static_cast<int64_t>(counts_.size()); }
  // The vocabulary, in id order. Throws base::Error when vocab_size is smaller than the special tokens
  // plus the alphabet (naming both numbers).
  std::vector<std::string> train() const;

 private:
  WordPieceTrainerOptions options_;
  BasicTokenizer basic_;
  std::unique_ptr<Jieba> jieba_;  // only with chinese_words > 0
  std::unordered_map<std::u32string, int64_t> counts_;
  std::unordered_map<std::u32string, int64_t> chinese_counts_;  // jieba words of >= 2 CJK characters
};

// The files of a RoFormerTokenizer directory for a vocabulary (HF's names and default special
// tokens): vocab.txt, tokenizer_config.json (tokenizer_class RoFormerTokenizer, do_lower_case) and
// special_tokens_map.json, as (file name, content) pairs.
std::vector<std::pair<std::string, std::string>> tokenizer_files(const std::vector<std::string>& vocab, bool lowercase);

}  // namespace text
