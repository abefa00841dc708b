// The text side of a language-modelling run: the corpus of a text file read through the run's
// tokenizer (text::Tokenizer, text/tokenizer.h). Two ways, by the tokenizer's class:
//   - char / byte (text::CharTokenizer): the corpus is streamed from the file and tokenised per
//     window (data::Corpus);
//   - wordpiece (text::RoFormerTokenizer, jieba included): the file is tokenised once, line by line
//     in parallel, into memory (data::TokenCorpus, about 5 bytes per token), each non-empty line
//     followed by [SEP]; "##" pieces continue a word (for whole-word masking).
// The checkpoint carries the tokenizer's files (Tokenizer::save); text::load_tokenizer reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "text/roformer_tokenizer.h"
#include "text/tokenizer.h"

namespace train {

// The corpus of a text file. For wordpiece, the ids are checked against model_vocab_size (the
// model's embedding rows, >= the tokenizer's size). Throws base::Error / io::Error naming the file,
// and base::Error for a tokenizer of another kind (sentencepiece).
std::unique_ptr<data::WindowSource> lm_corpus(const text::Tokenizer& tok, const std::string& path, double val_fraction,
                                              int64_t model_vocab_size);

// "wordpiece" corpora: the ids and word starts of a text file, each non-empty line's tokens followed
// by sep_id. Lines are tokenised in parallel (OpenMP); the result does not depend on the threads.
void tokenize_lines(const std::string& path, const text::RoFormerTokenizer& tok, std::vector<int32_t>* ids,
                    std::vector<uint8_t>* word_start);

}  // namespace train
