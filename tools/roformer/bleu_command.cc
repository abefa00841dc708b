// `roformer bleu`: corpus BLEU of a system output against one or more references, as sacreBLEU's
// defaults compute it (src/text/bleu.h), printed in sacreBLEU's text format with its signature.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "base/error.h"
#include "io/lines.h"
#include "commands.h"
#include "text/bleu.h"

namespace roformer {
namespace {

struct BleuOptions {
  std::vector<std::string> refs;
  std::string input;  // "" = stdin
  bool score_only = false;
  bool chrf = false;
};

// One segment per line (bounded: io::kMaxLineBytes), the CR of a CRLF dropped as Python's text mode does.
std::vector<std::string> read_lines(std::istream& in, const std::string& name) {
  std::vector<std::string> lines;
  for (std::string line; io::read_line(in, &line, name, static_cast<int64_t>(lines.size()) + 1);) lines.push_back(line);
  return lines;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::Error(path + ": cannot open");
  return read_lines(in, path);
}

int run_bleu(const BleuOptions& o) {
  const std::vector<std::string> hyps = o.input.empty() ? read_lines(std::cin, "stdin") : read_lines(o.input);
  std::vector<std::vector<std::string>> refs;
  for (const auto& path : o.refs) {
    refs.push_back(read_lines(path));
    if (refs.back().size() != hyps.size()) {
      throw base::Error(path + ": " + std::to_string(refs.back().size()) + " lines, but the system output has " +
                        std::to_string(hyps.size()));
    }
  }
  const text::BleuScore s = text::corpus_bleu(hyps, refs);
  if (o.score_only) {
    fmt::print("{:.2f}\n", s.score);
  } else {
    fmt::print("{}\n", s.format(static_cast<int64_t>(refs.size())));
  }
  if (o.chrf) {  // a second line, as `sacrebleu -m bleu chrf` prints
    const text::ChrfScore c = text::corpus_chrf(hyps, refs);
    if (o.score_only) {
      fmt::print("{:.2f}\n", c.score);
    } else {
      fmt::print("{}\n", c.format(static_cast<int64_t>(refs.size())));
    }
  }
  return 0;
}

}  // namespace

void add_bleu_command(CLI::App& app, CommandTable& commands) {
  auto o = std::make_shared<BleuOptions>();
  CLI::App* cmd = app.add_subcommand("bleu", "Corpus BLEU as sacreBLEU computes it (13a, exp smoothing, mixed case)");
  cmd->add_option("--ref", o->refs, "Reference file(s), one segment per line, aligned with the output")->required();
  cmd->add_option("--input", o->input, "System output (default: stdin)");
  cmd->add_flag("--score-only", o->score_only, "Print the score alone (sacrebleu -b)");
  cmd->add_flag("--chrf", o->chrf, "Also print chrF2 (sacreBLEU's CHRF defaults) on a second line");
  commands.add(cmd, [o] { return run_bleu(*o); });
}

}  // namespace roformer
