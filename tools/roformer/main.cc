// roformer: the command line of roformer.cpp.
//   roformer rope check        accuracy of librope against a __float128 oracle
//   roformer bench rope        speed of librope against this machine's memory floor
//   roformer bench train|infer|attention|gemm   engine speed (PyTorch peers in bench/peers/)
//   roformer decay             RoPE's long-term decay bound (paper Fig. 2) as PNG/CSV
//   roformer train             train a RoFormer causal or masked LM on a text file
//   roformer eval              validation loss and perplexity of a checkpoint
//   roformer generate          sample from a causal-LM checkpoint
//   roformer finetune          fine-tune a RoFormer into a sequence classifier or regressor
//   roformer translate-train | translate | average
//                              train the encoder-decoder, translate with beam search, average checkpoints
//   roformer bleu              corpus BLEU as sacreBLEU computes it
//   roformer vocab             learn a BERT WordPiece vocabulary
//   roformer spm-train | spm-encode | spm-decode   SentencePiece subwords (translation)
//   roformer quantize          write an int8 copy of a model directory
//   roformer tokenize | fill-mask | embed | similarity | classify | forward
//                              inference on Hugging Face RoFormer model directories
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "thread_option.h"
#include "base/utf8.h"
#include "plot/plot.h"
#include "rope/rope.h"

namespace {

// OpenMP workers that wait for the next parallel region spin (libgomp: 300,000 turns, about a
// millisecond) before they sleep. On a machine whose cores are all ours that is fastest, but when another
// process holds a core the spinning workers take the time slices the working ones need, and 2 threads
// ran slower than 1 (docs/perf.md, "Threads that share the machine"). A short spin keeps most of the
// fast hand-off of small regions (librope's decode calls) and sleeps before it starves anyone.
// libgomp reads its environment when it is loaded, before main, so the default is set by executing
// the program once more with it; OMP_WAIT_POLICY or GOMP_SPINCOUNT in the environment win.
constexpr const char* kDefaultSpinCount = "1000";

void apply_default_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  setenv("GOMP_SPINCOUNT", kDefaultSpinCount, 1);
  execv("/proc/self/exe", argv);  // returns only on failure: then the runtime's own default stays
  unsetenv("GOMP_SPINCOUNT");
}

// Edit distance (insertions, deletions, substitutions), for suggesting a command.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// When the words of the command line name no command (a typo: `roformer trian`), the line that says
// so and the nearest command; "" when the command line names its commands.
std::string unknown_command_hint(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  std::string path = "roformer";
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";
    const auto subcommands = at->get_subcommands([](const CLI::App*) { return true; });
    if (subcommands.empty()) return "";
    const CLI::App* next = nullptr;
    std::string nearest;
    size_t best = SIZE_MAX;
    for (const CLI::App* sub : subcommands) {
      if (sub->get_name() == word) next = sub;
      const size_t d = edit_distance(word, sub->get_name());
      if (d < best) best = d, nearest = sub->get_name();
    }
    if (!next) {
      std::string hint = path + ": '" + word + "' is not a command";
      if (best <= std::max<size_t>(2, word.size() / 3)) hint += "; did you mean '" + nearest + "'?";
      return hint + " (" + path + " --help lists them)";
    }
    at = next;
    path += " " + word;
  }
  return "";
}

}  // namespace

int roformer::CommandTable::run_parsed() const {
  for (const auto& [command, run] : commands_) {
    if (command->parsed()) return run();
  }
  return -1;
}

int main(int argc, char** argv) {
  // OpenMP reads OMP_NUM_THREADS itself and would crash on a huge count at its first parallel region.
  if (const std::string problem = roformer::omp_num_threads_problem(); !problem.empty()) {
    fmt::print(stderr, "roformer: {}\n", problem);
    return 2;
  }
  apply_default_wait_policy(argv);
  CLI::App app{"roformer: RoFormer and rotary position embedding (RoPE) in C++"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("roformer ") + rope_version());

  roformer::CommandTable commands;
  roformer::add_analysis_commands(app, commands);
  roformer::add_bench_commands(app, commands);
  roformer::add_model_commands(app, commands);
  roformer::add_infer_commands(app, commands);
  roformer::add_serve_command(app, commands);
  roformer::add_finetune_command(app, commands);
  roformer::add_bleu_command(app, commands);
  roformer::add_translate_commands(app, commands);
  roformer::add_vocab_command(app, commands);
  roformer::add_spm_commands(app, commands);
  roformer::add_quantize_command(app, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string hint = unknown_command_hint(app, argc, argv); !hint.empty() && e.get_exit_code() != 0) {
      fmt::print(stderr, "{}\n", hint);
      return e.get_exit_code();
    }
    return app.exit(e);
  }
  int status = 1;
  try {
    status = commands.run_parsed();
  } catch (const std::bad_alloc&) {  // a size no check foresaw: still one line, not "std::bad_alloc"
    fmt::print(stderr, "roformer: error: out of memory: the sizes asked for need more memory than this machine "
                       "has (smaller lengths, batches or models)\n");
  } catch (const std::exception& e) {
    fmt::print(stderr, "roformer: error: {}\n", base::printable(e.what()));  // file contents are quoted
  }
  // cairo and fontconfig keep font caches for the life of the process; free them so that the
  // sanitizer build's leak check sees a clean exit after a plot.
  plot::release_font_caches();
  return status;
}
