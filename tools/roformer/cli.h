// The roformer command line as a library: the CLI11 app with every command, and the whole run of a
// command line (parse, dispatch, errors as one line and a non-zero status). main.cc calls it; so does
// the command-line fuzzer (fuzz/fuzz_cli.cc), in-process.
#pragma once

#include <memory>

#include "commands.h"

namespace CLI {
class App;
}

namespace roformer {

// The app with every command (and their options) registered, each command's function in `commands`
// (which must outlive the app's use).
std::unique_ptr<CLI::App> make_app(CommandTable& commands);

// Runs the command line argv[0..argc) as the roformer program does and returns its exit status:
// 0 on success; on a refused command line or a failed command, non-zero after one line (or CLI11's
// usage message) on stderr. Exceptions do not escape. Options that CLI11 itself answers (--help,
// --version) print to stdout and return 0.
int run_command_line(int argc, char** argv);

}  // namespace roformer
