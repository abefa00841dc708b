// `roformer spm-train`, `spm-encode`, `spm-decode`: SentencePiece subword models for translation
// (src/text/sentencepiece.h). spm-train learns one joint model from text files or from columns of
// parallel TSV/JSONL files (source and target together, as the paper's joint vocabulary), with the
// special ids pad 0, unk 1, bos 2, eos 3, and writes PREFIX.model and PREFIX.vocab atomically.
// spm-encode turns lines into ids (or pieces); spm-decode turns them back into text.
//
// Input formats (--format, default from the extension): text (any other extension): each line is a
// sentence. tsv (.tsv): tab-separated fields without a header; --columns lists 1-based field numbers
// (default: every field, so a `source<TAB>target` file gives both sides). jsonl (.jsonl, .json): one
// object per line; --columns lists keys (default: source,target), each a string.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "io/lines.h"
#include "commands.h"
#include "text/sentencepiece.h"

namespace roformer {
namespace {

struct SpmTrainOptions {
  text::SentencePieceTrainOptions train;
  std::vector<std::string> inputs;
  std::string format = "auto";
  std::vector<std::string> columns;
};

struct SpmCodeOptions {
  std::string model, input;  // input "" = stdin
  bool pieces = false;
};

std::string format_of(const std::string& path, const std::string& format) {
  if (format != "auto") return format;
  auto ends_with = [&](const std::string& ext) {
    return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
  };
  if (ends_with(".tsv")) return "tsv";
  if (ends_with(".jsonl") || ends_with(".json")) return "jsonl";
  return "text";
}

// The sentences of the chosen columns of a TSV or JSONL file, row by row (source before target).
void read_columns(const std::string& path, const std::string& format, const std::vector<std::string>& columns,
                  std::vector<std::string>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::Error(path + ": cannot open");
  std::vector<size_t> fields;  // TSV: 0-based field indices (empty: every field)
  if (format == "tsv") {
    for (const auto& c : columns) {
      size_t used = 0;
      long n = 0;
      try {
        n = std::stol(c, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != c.size() || n < 1) {
        throw base::Error(path + ": --columns '" + c + "' is not a field number (1, 2, ...; TSV files have no header)");
      }
      fields.push_back(static_cast<size_t>(n - 1));
    }
  }
  const std::vector<std::string> keys = columns.empty() ? std::vector<std::string>{"source", "target"} : columns;
  int64_t line_no = 0, rows = 0;
  for (std::string line; io::read_line(in, &line, path, line_no + 1);) {  // bounded: io::kMaxLineBytes
    ++line_no;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no) + ": ";
    ++rows;
    if (format == "tsv") {
      std::vector<std::string> parts;
      for (size_t start = 0;;) {
        const size_t tab = line.find('\t', start);
        parts.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
        if (tab == std::string::npos) break;
        start = tab + 1;
      }
      if (fields.empty()) {
        for (auto& p : parts) out.push_back(std::move(p));
      }
      for (const size_t f : fields) {
        if (f >= parts.size()) {
          throw base::Error(where + "has " + std::to_string(parts.size()) + " fields; --columns needs field " +
                            std::to_string(f + 1));
        }
        out.push_back(parts[f]);
      }
    } else {
      nlohmann::json row;
      try {
        row = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw base::Error(where + "not valid JSON: " + e.what());
      }
      if (!row.is_object()) throw base::Error(where + "not a JSON object");
      for (const auto& k : keys) {
        const auto it = row.find(k);
        if (it == row.end()) throw base::Error(where + "no \"" + k + "\" key");
        if (!it->is_string()) throw base::Error(where + "\"" + k + "\" is not a string");
        out.push_back(it->get<std::string>());
      }
    }
  }
  if (in.bad()) throw base::Error(path + ": read error");
  if (rows == 0) throw base::Error(path + ": no rows (empty or only blank lines)");
}

int run_spm_train(SpmTrainOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& path : o.inputs) {
    o.train.data_name += (o.train.data_name.empty() ? "" : ", ") + path;
    const std::string format = format_of(path, o.format);
    if (format == "text") {
      if (!o.columns.empty()) throw base::Error(path + ": --columns applies to TSV and JSONL inputs, not text");
      o.train.inputs.push_back(path);
    } else {
      read_columns(path, format, o.columns, o.train.sentences);
    }
  }
  const text::SentencePieceTrainResult r = text::train_sentencepiece(o.train);
  fmt::print(stderr, "{}.model: {} pieces ({}, character coverage {}) from {} sentences, {:.1f} MB ({:.1f} s)\n",
             o.train.model_prefix, o.train.vocab_size, o.train.model_type, o.train.character_coverage, r.sentences,
             static_cast<double>(r.bytes) / 1e6,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

// Runs f on each line of the input (stdin or a file) with its 1-based number; f's base::Error gets
// the input's name and the line number in front.
template <typename F>
void for_each_line(const std::string& input, F f) {
  std::ifstream file;
  if (!input.empty()) {
    file.open(input, std::ios::binary);
    if (!file) throw base::Error(input + ": cannot open");
  }
  std::istream& in = input.empty() ? std::cin : file;
  const std::string name = input.empty() ? "stdin" : input;
  int64_t line_no = 0;
  for (std::string line; io::read_line(in, &line, name, line_no + 1);) {  // bounded: io::kMaxLineBytes
    ++line_no;
    try {
      f(line);
    } catch (const base::Error& e) {
      throw base::Error(name + ":" + std::to_string(line_no) + ": " + e.what());
    }
  }
  if (in.bad()) throw base::Error(name + ": read error");
}

int run_spm_encode(const SpmCodeOptions& o) {
  const text::SentencePiece sp = text::SentencePiece::load(o.model);
  std::string out;
  for_each_line(o.input, [&](const std::string& line) {
    out.clear();
    auto append = [&out](const std::string& token) {
      if (!out.empty()) out += ' ';
      out += token;
    };
    if (o.pieces) {
      for (const auto& p : sp.encode_pieces(line)) append(p);
    } else {
      for (const int64_t id : sp.encode(line)) append(std::to_string(id));
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
  return 0;
}

int run_spm_decode(const SpmCodeOptions& o) {
  const text::SentencePiece sp = text::SentencePiece::load(o.model);
  for_each_line(o.input, [&](const std::string& line) {
    std::istringstream tokens(line);
    std::string text;
    if (o.pieces) {
      std::vector<std::string> pieces;
      for (std::string p; tokens >> p;) pieces.push_back(p);
      text = sp.decode_pieces(pieces);
    } else {
      std::vector<int64_t> ids;
      for (std::string t; tokens >> t;) {
        size_t used = 0;
        int64_t id = -1;
        try {
          id = std::stoll(t, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != t.size()) throw base::Error("'" + t + "' is not an id (spm-decode --pieces reads pieces)");
        ids.push_back(id);
      }
      text = sp.decode(ids);
    }
    text += '\n';
    std::fwrite(text.data(), 1, text.size(), stdout);
  });
  return 0;
}

}  // namespace

void add_spm_commands(CLI::App& app, CommandTable& commands) {
  auto t = std::make_shared<SpmTrainOptions>();
  CLI::App* train = app.add_subcommand("spm-train", "Learn a SentencePiece model (unigram or BPE; pad 0, unk 1, bos 2, eos 3)");
  train->add_option("--input", t->inputs, "Text, TSV or JSONL file(s); TSV/JSONL give the --columns' text")->required();
  train->add_option("--format", t->format, "auto (by extension: .tsv, .jsonl/.json, else text), text, tsv or jsonl")
      ->check(CLI::IsMember({"auto", "text", "tsv", "jsonl"}))->capture_default_str();
  train->add_option("--columns", t->columns,
                    "TSV: 1-based field numbers (default: every field); JSONL: keys (default: source,target)")
      ->delimiter(',');
  train->add_option("--model-prefix", t->train.model_prefix, "Writes PREFIX.model and PREFIX.vocab")->required();
  train->add_option("--vocab-size", t->train.vocab_size, "Pieces, the 4 special ones included")
      ->check(CLI::Range(int64_t{5}, int64_t{1} << 30))->capture_default_str();
  train->add_option("--model-type", t->train.model_type, "unigram or bpe")
      ->check(CLI::IsMember({"unigram", "bpe"}))->capture_default_str();
  train->add_option("--character-coverage", t->train.character_coverage,
                    "Share of characters kept (rarer ones become unk): 1.0 for small alphabets, 0.9995 for CJK")
      ->check(CLI::Range(1e-6, 1.0))->capture_default_str();
  train->add_option("--input-sentence-size", t->train.input_sentence_size,
                    "Train on a seeded sample of N sentences (0: all)")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  train->add_option("--seed", t->train.seed, "Seed of the --input-sentence-size sample")
      ->check(CLI::Range(uint32_t{0}, uint32_t{0xfffffffe}))->capture_default_str();
  train->add_option("--threads", t->train.num_threads,
                    "SentencePiece threads (the model depends on the count: keep it fixed to reproduce one)")
      ->check(CLI::Range(1, 128))->capture_default_str();
  train->add_flag("--verbose", t->train.verbose, "Show SentencePiece's own progress log");

  auto e = std::make_shared<SpmCodeOptions>();
  CLI::App* encode = app.add_subcommand("spm-encode", "Encode lines with a SentencePiece model: ids (or pieces), space-separated");
  encode->add_option("--model", e->model, "PREFIX.model")->required();
  encode->add_option("--input", e->input, "Text, one sentence per line (default: stdin)");
  encode->add_flag("--pieces", e->pieces, "Write pieces instead of ids");

  auto d = std::make_shared<SpmCodeOptions>();
  CLI::App* decode = app.add_subcommand("spm-decode", "Decode lines of ids (or pieces) back to text");
  decode->add_option("--model", d->model, "PREFIX.model")->required();
  decode->add_option("--input", d->input, "Space-separated ids, one sentence per line (default: stdin)");
  decode->add_flag("--pieces", d->pieces, "Read pieces instead of ids");

  commands.add(train, [t] { return run_spm_train(*t); });
  commands.add(encode, [e] { return run_spm_encode(*e); });
  commands.add(decode, [d] { return run_spm_decode(*d); });
}

}  // namespace roformer
