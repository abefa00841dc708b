// The corpus of a language-modelling run, through its tokenizer (see lm_text.h).
#include "lm_text.h"

#include <omp.h>

#include <fstream>

#include "base/error.h"
#include "text/char_tokenizer.h"

namespace train {

std::unique_ptr<data::WindowSource> lm_corpus(const text::Tokenizer& tok, const std::string& path, double val_fraction,
                                              int64_t model_vocab_size) {
  if (const auto* chars = dynamic_cast<const text::CharTokenizer*>(&tok)) {
    return std::make_unique<data::Corpus>(path, *chars, val_fraction);
  }
  const auto* wordpiece = dynamic_cast<const text::RoFormerTokenizer*>(&tok);
  if (!wordpiece) throw base::Error(path + ": a " + tok.kind_name() + " tokenizer has no language-modelling corpus");
  std::vector<int32_t> ids;
  std::vector<uint8_t> starts;
  tokenize_lines(path, *wordpiece, &ids, &starts);
  if (model_vocab_size < tok.vocab_size()) {
    throw base::Error(path + ": the tokenizer has " + std::to_string(tok.vocab_size()) + " tokens but the model only " +
                    std::to_string(model_vocab_size) + " embedding rows");
  }
  return std::make_unique<data::TokenCorpus>(std::move(ids), std::move(starts), model_vocab_size, val_fraction, path);
}

void tokenize_lines(const std::string& path, const text::RoFormerTokenizer& tok, std::vector<int32_t>* ids,
                    std::vector<uint8_t>* word_start) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::Error(path + ": cannot open");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(std::move(line));
  }
  if (in.bad()) throw base::Error(path + ": read error");
  if (lines.empty()) throw base::Error(path + ": no text");
  std::vector<std::vector<std::string>> pieces(lines.size());
  std::string error;
#pragma omp parallel for schedule(dynamic, 64)
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      pieces[i] = tok.tokenize(lines[i]);
    } catch (const std::exception& e) {
#pragma omp critical
      if (error.empty()) error = e.what();
    }
  }
  if (!error.empty()) throw base::Error(path + ": " + error);
  ids->clear();
  word_start->clear();
  for (const auto& p : pieces) {
    for (const int32_t id : tok.convert_tokens_to_ids(p)) ids->push_back(id);
    for (const auto& piece : p) word_start->push_back(piece.rfind("##", 0) != 0);
    ids->push_back(tok.sep_id());
    word_start->push_back(1);
  }
}

}  // namespace train
