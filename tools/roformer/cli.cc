// The roformer command line as a library (cli.h): the app with every command, parsing, dispatch and
// the top-level error handling. main.cc adds only the process set-up.
#include "cli.h"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include "commands.h"
#include "thread_option.h"
#include "base/utf8.h"
#include "plot/plot.h"
#include "rope/rope.h"

namespace {

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

// Directory options take "runs/x/" as "runs/x", so that the paths the commands build and print from
// them read runs/x/step-000500, not runs/x//step-000500 (a trailing slash means the same directory).
void strip_trailing_slashes(CLI::App& app) {
  static const char* const kDirectoryOptions[] = {"out", "out-dir", "model", "vocab", "init-from", "runs"};
  for (CLI::Option* option : app.get_options()) {
    if (std::none_of(std::begin(kDirectoryOptions), std::end(kDirectoryOptions),
                     [&](const char* name) { return option->check_lname(name); })) {
      continue;
    }
    option->transform([](std::string value) {
      while (value.size() > 1 && value.back() == '/') value.pop_back();
      return value;
    });
  }
  for (CLI::App* sub : app.get_subcommands({})) strip_trailing_slashes(*sub);
}

// CLI11 converts integers with strtoll/strtoull and does not look at errno: "9223372036854775808" reads
// as INT64_MAX and "-1" as an unsigned 2^64 - 1, a silently different number (a --steps of 2^63 trained
// for ever). Every integer option refuses a value its type cannot hold, naming the option.
void refuse_out_of_range_integers(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    const bool is_signed = type.rfind("INT", 0) == 0, is_unsigned = type.rfind("UINT", 0) == 0;
    if ((!is_signed && !is_unsigned) || (option->get_type_size_max() == 0 && !option->get_positional())) continue;
    option->check(CLI::Validator(
        [is_unsigned](std::string& value) -> std::string {
          if (value.empty()) return "";  // not a number: the conversion refuses it
          char* end = nullptr;
          errno = 0;
          if (is_unsigned) {
            (void)std::strtoull(value.c_str(), &end, 0);
          } else {
            (void)std::strtoll(value.c_str(), &end, 0);
          }
          if (end != value.c_str() + value.size()) return "";  // not an integer: the conversion refuses it
          if (errno == ERANGE) return "the integer " + value + " does not fit in 64 bits";
          if (is_unsigned && value.find('-') != std::string::npos) return "the integer " + value + " is negative";
          return "";
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) refuse_out_of_range_integers(*sub);
}

}  // namespace

int roformer::CommandTable::run_parsed() const {
  for (const auto& [command, run] : commands_) {
    if (command->parsed()) return run();
  }
  return -1;
}

std::unique_ptr<CLI::App> roformer::make_app(CommandTable& commands) {
  auto app = std::make_unique<CLI::App>("roformer: RoFormer and rotary position embedding (RoPE) in C++");
  app->require_subcommand(1);
  app->set_version_flag("--version", std::string("roformer " ROFORMER_VERSION " (librope ") + rope_version() + ")");
  add_analysis_commands(*app, commands);
  add_bench_commands(*app, commands);
  add_model_commands(*app, commands);
  add_infer_commands(*app, commands);
  add_serve_command(*app, commands);
  add_finetune_command(*app, commands);
  add_bleu_command(*app, commands);
  add_translate_commands(*app, commands);
  add_vocab_command(*app, commands);
  add_spm_commands(*app, commands);
  add_quantize_command(*app, commands);
  strip_trailing_slashes(*app);
  refuse_out_of_range_integers(*app);
  return app;
}

int roformer::run_command_line(int argc, char** argv) {
  // OpenMP reads OMP_NUM_THREADS itself and would crash on a huge count at its first parallel region.
  if (const std::string problem = omp_num_threads_problem(); !problem.empty()) {
    fmt::print(stderr, "roformer: {}\n", problem);
    return 2;
  }
  CommandTable commands;
  int status = 1;
  try {
    const std::unique_ptr<CLI::App> app = make_app(commands);
    try {
      app->parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (const std::string hint = unknown_command_hint(*app, argc, argv); !hint.empty() && e.get_exit_code() != 0) {
        fmt::print(stderr, "{}\n", hint);
        return e.get_exit_code();
      }
      return app->exit(e);
    }
    status = commands.run_parsed();
  } catch (const std::bad_alloc&) {  // a size no check foresaw: still one line, not "std::bad_alloc"
    fmt::print(stderr, "roformer: error: out of memory: the sizes asked for need more memory than this machine "
                       "has (smaller lengths, batches or models)\n");
    status = 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "roformer: error: {}\n", base::printable(e.what()));  // file contents are quoted
    status = 1;
  }
  // cairo and fontconfig keep font caches for the life of the process; free them so that the
  // sanitizer build's leak check sees a clean exit after a plot.
  plot::release_font_caches();
  return status;
}
