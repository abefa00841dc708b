// The tokenizer and corpus of a language-modelling run (see lm_text.h).
#include "lm_text.h"

#include <omp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "text/wordpiece_trainer.h"

namespace train {
namespace {

namespace fs = std::filesystem;

// The tokenizer files a WordPiece run's checkpoints carry: copied from the directory it came from,
// or written for a bare vocab.txt (HF's defaults: uncased, jieba on).
std::map<std::string, std::string> wordpiece_files(const std::string& source, const text::RoFormerTokenizer& tok) {
  std::map<std::string, std::string> files;
  if (fs::is_directory(source)) {
    for (const char* name : {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}) {
      if (fs::exists(source + "/" + name)) files[name] = io::read_file(source + "/" + name);
    }
    return files;
  }
  std::vector<std::string> vocab;
  for (int64_t i = 0; i < tok.vocab().lines(); ++i) vocab.push_back(tok.vocab().token(static_cast<int32_t>(i)));
  for (auto& [name, content] : text::tokenizer_files(vocab, tok.config().do_lower_case)) files[name] = content;
  files["vocab.txt"] = io::read_file(source);  // byte for byte
  return files;
}

}  // namespace

LmText::LmText(data::Tokenizer tok) : chars_(std::make_shared<const data::Tokenizer>(std::move(tok))) {}
LmText::LmText(text::RoFormerTokenizer tok)
    : wordpiece_(std::make_shared<const text::RoFormerTokenizer>(std::move(tok))) {}

LmText LmText::load(const std::string& path) {
  if (fs::is_directory(path) && fs::exists(path + "/tokenizer.json")) {
    return LmText(data::Tokenizer::load(path + "/tokenizer.json"));
  }
  if (!fs::exists(path)) throw base::Error(path + ": no such vocabulary file or directory");
  const bool dir = fs::is_directory(path);
  if (dir && !fs::exists(path + "/vocab.txt")) {
    throw base::Error(path + ": neither tokenizer.json (char/byte) nor vocab.txt (WordPiece)");
  }
  LmText t(dir ? text::RoFormerTokenizer::load(path)
               : text::RoFormerTokenizer(std::make_shared<const text::Vocab>(text::Vocab::load(path)), {}));
  t.files_ = std::make_shared<const std::map<std::string, std::string>>(wordpiece_files(path, *t.wordpiece_));
  return t;
}

std::string LmText::kind() const {
  if (wordpiece_) return "wordpiece";
  return chars_->kind() == data::TokenizerKind::Byte ? "byte" : "char";
}

int64_t LmText::vocab_size() const { return wordpiece_ ? wordpiece_->size() : chars_->vocab_size(); }
int32_t LmText::mask_id() const { return wordpiece_ ? wordpiece_->mask_id() : data::Tokenizer::kMask; }
int32_t LmText::sep_id() const { return wordpiece_ ? wordpiece_->sep_id() : data::Tokenizer::kSep; }

std::vector<int32_t> LmText::special_ids() const {
  if (!wordpiece_) return {0, 1, 2, 3, 4};
  const auto& t = *wordpiece_;
  std::vector<int32_t> ids = {t.pad_id(), t.unk_id(), t.cls_id(), t.sep_id(), t.mask_id()};
  for (const auto& a : t.config().additional_special_tokens) ids.push_back(t.token_to_id(a.content));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<int32_t> LmText::encode(std::string_view text) const {
  if (!wordpiece_) return chars_->encode(text);
  return wordpiece_->convert_tokens_to_ids(wordpiece_->tokenize(text));
}

std::string LmText::decode(const std::vector<int32_t>& ids) const {
  if (!wordpiece_) return chars_->decode(ids);
  const std::vector<int32_t> specials = special_ids();
  std::string out;
  for (const int32_t id : ids) {
    if (std::find(specials.begin(), specials.end(), id) != specials.end()) continue;
    const std::string token = wordpiece_->id_to_token(id);
    if (token.rfind("##", 0) == 0) {
      out += token.substr(2);
    } else {
      if (!out.empty()) out += ' ';
      out += token;
    }
  }
  return out;
}

TokenizerWriter LmText::writer() const {
  if (!wordpiece_) {
    const auto tok = chars_;
    return [tok](const std::string& dir) { tok->save(dir + "/tokenizer.json"); };
  }
  const auto files = files_;
  return [files](const std::string& dir) {
    for (const auto& [name, content] : *files) io::write_file_atomic(dir + "/" + name, content);
  };
}

std::unique_ptr<data::WindowSource> LmText::corpus(const std::string& path, double val_fraction,
                                                   int64_t model_vocab_size) const {
  if (!wordpiece_) return std::make_unique<data::Corpus>(path, *chars_, val_fraction);
  std::vector<int32_t> ids;
  std::vector<uint8_t> starts;
  tokenize_lines(path, *wordpiece_, &ids, &starts);
  if (model_vocab_size < vocab_size()) {
    throw base::Error(path + ": the tokenizer has " + std::to_string(vocab_size()) + " tokens but the model only " +
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
