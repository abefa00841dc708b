// `roformer vocab`: learns a BERT WordPiece vocabulary from text files (src/text/wordpiece_trainer.h)
// and writes vocab.txt atomically; with --out-dir, a tokenizer directory that RoFormerTokenizer
// (ours and transformers') loads: vocab.txt, tokenizer_config.json, special_tokens_map.json.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "commands.h"
#include "io/atomic_file.h"
#include "io/output_path.h"
#include "text/wordpiece_trainer.h"

namespace roformer {
namespace {

struct VocabOptions {
  std::vector<std::string> data;
  std::string out = "vocab.txt", out_dir;
  text::WordPieceTrainerOptions trainer;
  bool cased = false;
};

int run_vocab(VocabOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  o.trainer.lowercase = !o.cased;
  if (o.out_dir.empty()) {
    io::check_output_path("--out", o.out, o.data);
  } else {
    io::check_output_path("--out-dir", o.out_dir, o.data);
  }
  text::WordPieceTrainer trainer(o.trainer);
  uintmax_t bytes = 0;
  for (const auto& path : o.data) {
    trainer.add_file(path);
    std::error_code ec;  // a pipe has no size; the count is only reported
    if (const uintmax_t n = std::filesystem::file_size(path, ec); !ec) bytes += n;
  }
  const std::vector<std::string> vocab = trainer.train();
  std::string path = o.out;
  if (o.out_dir.empty()) {
    std::string text;
    for (const auto& t : vocab) text += t + "\n";
    io::write_file_atomic(path, text);
  } else {
    std::filesystem::create_directories(o.out_dir);
    path = o.out_dir + "/vocab.txt";
    for (const auto& [name, content] : text::tokenizer_files(vocab, !o.cased)) {
      io::write_file_atomic(o.out_dir + "/" + name, content);
    }
  }
  fmt::print(stderr, "{}: {} tokens from {} distinct words in {:.1f} MB ({:.1f} s)\n", path, vocab.size(),
             trainer.distinct_words(), static_cast<double>(bytes) / 1e6,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace

void add_vocab_command(CLI::App& app, CommandTable& commands) {
  auto o = std::make_shared<VocabOptions>();
  CLI::App* cmd = app.add_subcommand("vocab", "Learn a BERT WordPiece vocabulary (vocab.txt) from text");
  cmd->add_option("--data", o->data, "UTF-8 text file(s)")->required();
  cmd->add_option("--size", o->trainer.vocab_size, "Vocabulary size")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--min-frequency", o->trainer.min_frequency, "Least weighted count of a merged pair")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--chinese-words", o->trainer.chinese_words,
                  "Add the N most frequent jieba words (>= 2 CJK characters) whole, as RoFormer's Chinese vocabulary")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--jieba-dict", o->trainer.jieba_dict, "jieba dict.txt (default: $ROFORMER_JIEBA_DICT, python3-jieba's)");
  cmd->add_flag("--cased", o->cased, "Keep case and accents (default: lower-case and strip accents, as uncased BERT)");
  cmd->add_option("--out", o->out, "vocab.txt to write")->capture_default_str();
  cmd->add_option("--out-dir", o->out_dir, "Write a tokenizer directory instead: vocab.txt + tokenizer configs");
  commands.add(cmd, [o] { return run_vocab(*o); });
}

}  // namespace roformer
