// The command-line fuzzer (docs/reliability.md): the fuzzer's bytes become a roformer command line,
// built from the CLI's own option table, which runs in-process through roformer::run_command_line (the
// whole command line: parse, dispatch, the top-level error handling) on small fixtures in a scratch
// folder. Checked: no crash or sanitizer report (the build's), no exception escaping the entry point,
// and a non-zero status only after at least one line on stderr (the refusal's message).
//
// Decoding (decode below): byte 0 picks a command (a leaf of the app's subcommand tree; `serve` is
// left out: it listens), byte 1 whether each required option the fuzzer does not give gets a working
// value (a fixture), then each further step picks one of that command's options (from
// CLI::App::get_options(): long or short name, `--name value` or `--name=value`) or an extra word,
// with a value from the dictionary below (boundary numbers, non-numbers, empty, long and control-byte
// strings, fixture files and directories, a missing path, links to /dev/null and /dev/full, a
// read-only folder) or raw fuzzer bytes. Options that set an amount of work (steps, epochs, samples,
// benchmark times, ...) take values from a short list of small and invalid ones; sizes (batch, seq,
// hidden, ...) also the huge ones, which must be refused. Both get a small value when the fuzzer does
// not give them, so that a run stays well inside the time limit; a raw value of a numeric option is at
// most 2 characters. Paths in raw values lose their '/' (so every output lands in the scratch folder);
// stdin is /dev/null.
//
// The same file builds two ways:
//  - libFuzzer (clang, fuzz/CMakeLists.txt: fuzz_cli): LLVMFuzzerTestOneInput;
//  - a standalone driver (FUZZ_CLI_STANDALONE, any compiler; ctest cli_fuzz):
//      fuzz_cli_standalone FILE|DIR...          replay inputs (a folder: each file in it)
//      fuzz_cli_standalone --random SECONDS [--seed N]   random inputs for that long
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <typeinfo>
#include <vector>

#include "cli.h"

namespace fs = std::filesystem;

namespace {

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("FUZZ_VERBOSE");
    return e != nullptr && *e != '\0' && *e != '0';
  }();
  return v;
}

struct OptionInfo {
  std::vector<std::string> names;  // "--steps", "-s"; empty for a positional
  bool flag = false;               // takes no value
  bool numeric = false;            // INT, UINT, FLOAT (or vectors of them)
  bool budget = false;             // sets an amount of work or a size: small values (and huge sizes)
  bool work = false;               // an amount of work (steps, samples, seconds): small values only
};

struct Command {
  std::vector<std::string> path;  // e.g. {"bench", "rope"}
  std::vector<OptionInfo> options;
  std::set<std::string> required;  // long names of required options
};

// Options whose value is an amount of work, and the small value they get when the input does not give
// them. A name here that a command lacks is simply not added to it. ("command|--option": for that
// command only.)
const std::map<std::string, std::string>& budget_defaults() {
  static const std::map<std::string, std::string> m = {
      {"--steps", "2"},        {"--epochs", "1"},        {"--samples", "10"},      {"--min-time", "0.001"},
      {"--repetitions", "1"},  {"--min-reps", "1"},      {"--warmup", "0"},        {"--lengths", "8"},
      {"--rows", "4"},         {"--max-distance", "8"},  {"--tokens", "4"},        {"--sample-tokens", "2"},
      {"--max-batches", "1"},  {"--eval-batches", "1"},  {"--input-sentence-size", "200"},
      {"--min-bytes", "4"},    {"--max-bytes", "64"},    {"--bleu-sentences", "0"}, {"--eval-every", "0"},
      {"--save-every", "0"},   {"--batch", "2"},         {"--seq", "8"},           {"--hidden", "8"},
      {"--layers", "1"},       {"--heads", "2"},         {"--ff", "8"},            {"--max-positions", "32"},
      {"--performer-features", "4"}, {"--head-dim", "8"}, {"--vocab-size", "60"},  {"--size", "100"},
      {"--max-tokens", "64"},  {"--batch-size", "2"},    {"--beam", "2"},          {"--max-len-b", "4"},
      {"--max-len-a", "0"},    {"--patience", "0"},      {"--threads", "1"},       {"--keep-checkpoints", "1"},
      {"translate-train|--vocab-size", "30"},  // the joint subwords of parallel.tsv: at most 31
      {"translate-train|--eval-every", "2"},
      {"eval|--lengths", ""},  // a mode (length extrapolation), not a size: not added
  };
  return m;
}

// Other sizes (--embedding-size, --dim, --max-length, ...) get the whole dictionary: their large values
// must be refused, quickly. bench train's --vocab is a vocabulary size, not a file.
bool is_budget(const std::vector<std::string>& path, const std::string& name) {
  return budget_defaults().count(name) != 0 || (name == "--vocab" && path.size() == 2 && path[0] == "bench");
}

// Of those, the amounts of work: a large value is legitimate and runs long, so they never get one. The
// others are sizes: a size past what the machine holds must be refused before anything is allocated,
// so they get the huge boundary values too (2^31 - 1 ... 2^63), but no medium ones.
bool is_work(const std::string& name) {
  static const std::set<std::string> work = {"--steps", "--epochs", "--samples", "--min-time", "--repetitions",
                                             "--min-reps", "--warmup", "--tokens", "--max-batches",
                                             "--eval-batches"};
  return work.count(name) != 0;
}

bool is_numeric_type(const std::string& type) {
  return type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0 || type.rfind("FLOAT", 0) == 0 ||
         type.rfind("NUMBER", 0) == 0;
}

void collect(const CLI::App* app, std::vector<std::string> path, std::vector<Command>& out) {
  const auto subs = app->get_subcommands([](const CLI::App*) { return true; });
  if (!path.empty() && subs.empty()) {
    if (path[0] == "serve") return;  // listens on a port until stopped
    Command c;
    c.path = path;
    for (const CLI::Option* o : app->get_options()) {
      // bench rope's whole set of shapes takes minutes under the sanitizers: --quick is always given
      // (decode), and not offered, where --quick=0 would turn it off.
      if (path.size() == 2 && path[0] == "bench" && path[1] == "rope" && o->check_lname("quick")) continue;
      OptionInfo info;
      for (const std::string& l : o->get_lnames()) info.names.push_back("--" + l);
      for (const std::string& s : o->get_snames()) info.names.push_back("-" + s);
      info.flag = o->get_type_size_max() == 0 && !o->get_positional();
      info.numeric = is_numeric_type(o->get_type_name());
      if (!info.names.empty()) {
        info.budget = is_budget(path, info.names[0]);
        info.work = info.budget && is_work(info.names[0]);
        if (o->get_required()) c.required.insert(info.names[0]);
      }
      c.options.push_back(std::move(info));
    }
    out.push_back(std::move(c));
    return;
  }
  for (const CLI::App* sub : subs) {
    std::vector<std::string> p = path;
    p.push_back(sub->get_name());
    collect(sub, p, out);
  }
}

// ---- the scratch folder and its fixtures ----

// What a folder holds: each entry's relative path, size and modification time.
using Snapshot = std::map<std::string, std::pair<uintmax_t, int64_t>>;

struct Scratch {
  fs::path root, fix, run;  // run: the working directory of each input, emptied after it
  fs::path pristine;        // a copy of fix, to restore it from
  Snapshot fix_state;       // fix as made
  std::string text, jsonl, tsv, csv, parallel, refs, hyps, ids, model, tokenizer, inputs, readonly;
  // The two hostile-input families of docs/reliability.md: a file whose one line is past the record
  // bound, and model directories whose tokenizer cannot serve their vocabulary.
  std::string long_line, no_mask_model, cased_model;
  std::string clm, spm, translate;  // made by the CLI itself at start-up ("" when that failed)
};

Scratch* g_scratch = nullptr;
std::vector<Command>* g_commands = nullptr;

void write_file(const fs::path& p, const std::string& content) {
  std::ofstream f(p, std::ios::binary);
  f << content;
}

int run_quiet(std::vector<std::string> args);
Snapshot snapshot(const fs::path& dir);
void clean_run_folder();

std::string find_checkpoint(const fs::path& run_dir) {
  // The newest step-* folder with a config.json, else the folder itself when it has one.
  std::string best;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 &&
        fs::exists(e.path() / "config.json")) {
      best = std::max(best, e.path().string());
    }
  }
  if (best.empty() && fs::exists(run_dir / "config.json")) best = run_dir.string();
  return best;
}

// The fixture paths inside `fix`.
void set_paths(Scratch& s, const fs::path& fix) {
  s.fix = fix;
  s.model = (fix / "model").string();
  s.tokenizer = (fix / "tokenizer").string();
  s.inputs = (fix / "model" / "io.safetensors").string();
  s.text = (fix / "text.txt").string();
  s.jsonl = (fix / "data.jsonl").string();
  s.tsv = (fix / "data.tsv").string();
  s.csv = (fix / "data.csv").string();
  s.parallel = (fix / "parallel.tsv").string();
  s.refs = (fix / "refs.txt").string();
  s.hyps = (fix / "hyps.txt").string();
  s.ids = (fix / "ids.txt").string();
  s.readonly = (fix / "readonly").string();
  s.long_line = (fix / "long_line.txt").string();
  s.no_mask_model = (fix / "model_no_mask").string();
  s.cased_model = (fix / "model_cased").string();
  s.clm = find_checkpoint(fix / "clm");
  s.spm = fs::exists(fix / "spm.model") ? (fix / "spm.model").string() : "";
  s.translate = find_checkpoint(fix / "mt");
}

// Writes the fixtures into `fix`: copies of the Hugging Face fixtures, small text and data files, and
// checkpoints made by the command line itself (tiny, two steps) for eval/generate, spm-encode/decode and
// translate/average. A failure leaves that checkpoint out; the fuzzer then reaches those commands' errors.
void make_fixtures(Scratch& s, const fs::path& fix) {
  fs::create_directories(fix);
  const fs::path src = FUZZ_CLI_FIXTURES;  // ../shared/fixtures/roformer-hf
  std::error_code ec;
  fs::copy(src / "case1_mlm_basic", fix / "model", fs::copy_options::recursive, ec);
  fs::copy(src / "tokenizer", fix / "tokenizer", fs::copy_options::recursive, ec);
  set_paths(s, fix);
  std::string text;
  for (int i = 0; i < 40; ++i) {
    text += "the quick brown fox " + std::to_string(i) + " jumps over the lazy dog. \u5929\u6c14\u5f88\u597d " +
            std::string(i % 3 == 0 ? "[MASK] hello world" : "lorem [MASK] ipsum") + "\n";
  }
  write_file(s.text, text);
  std::string jsonl, tsv, csv = "text,label\n", parallel, refs, hyps, ids;
  for (int i = 0; i < 12; ++i) {
    const std::string t = "sentence number " + std::to_string(i) + (i % 2 ? " is good" : " is bad");
    jsonl += "{\"text\": \"" + t + "\", \"text_pair\": \"pair " + std::to_string(i) + "\", \"label\": \"" +
             (i % 2 ? "pos" : "neg") + "\", \"sentence\": \"" + t + "\", \"a\": \"" + t +
             "\", \"b\": \"other\", \"source\": \"" + t + "\", \"target\": \"die " + t + "\"}\n";
    tsv += t + "\t" + (i % 2 ? "pos" : "neg") + "\n";
    csv += "\"" + t + "\"," + (i % 2 ? "pos" : "neg") + "\n";
    parallel += t + "\tdie " + t + "\n";
    refs += "the cat sat on the mat " + std::to_string(i) + "\n";
    hyps += "the cat sat on a mat " + std::to_string(i) + "\n";
    ids += "5 6 7 " + std::to_string(i + 4) + "\n";
  }
  write_file(s.jsonl, jsonl);
  write_file(s.tsv, tsv);
  write_file(s.csv, csv);
  write_file(s.parallel, parallel);
  write_file(s.refs, refs);
  write_file(s.hyps, hyps);
  write_file(s.ids, ids);
  write_file(s.long_line, std::string((size_t{1} << 20) + 100, 'a'));  // 1 MiB + 100 bytes, no line break
  // The model with vocab.txt's [MASK] renamed, and with its letters capitalised under an uncased tokenizer.
  for (const auto& [dir, edit] : std::vector<std::pair<std::string, std::function<void(std::string&)>>>{
           {s.no_mask_model, [](std::string& l) { if (l == "[MASK]") l = "[MASK2]"; }},
           {s.cased_model, [](std::string& l) { if (l.size() == 1 && l[0] >= 'a' && l[0] <= 'z') l[0] = static_cast<char>(l[0] - 32); }}}) {
    fs::copy(fix / "model", dir, fs::copy_options::recursive, ec);
    std::ifstream in(fs::path(dir) / "vocab.txt");
    std::string vocab;
    for (std::string line; std::getline(in, line);) {
      edit(line);
      vocab += line + "\n";
    }
    write_file(fs::path(dir) / "vocab.txt", vocab);
  }
  const std::string f = fix.string();
  run_quiet({"train", "--data", s.text, "--out", f + "/clm", "--steps", "2", "--batch", "2", "--seq", "8",
             "--hidden", "8", "--heads", "2", "--ff", "8", "--layers", "1", "--max-positions", "32",
             "--threads", "1", "--no-progress", "--sample-tokens", "2"});
  run_quiet({"spm-train", "--input", s.parallel, "--format", "text", "--model-prefix", f + "/spm", "--vocab-size",
             "32", "--threads", "1"});
  run_quiet({"translate-train", "--train", s.parallel, "--validation", s.parallel, "--out", f + "/mt", "--steps",
             "2", "--hidden", "8", "--heads", "2", "--ff", "8", "--layers", "1", "--max-positions", "32",
             "--vocab-size", "30", "--max-tokens", "64", "--threads", "1", "--no-progress", "--eval-every", "2",
             "--bleu-sentences", "0"});
  // A folder nothing may be written into (for outputs), and every fixture read-only.
  fs::create_directories(s.readonly);
  for (const auto& e : fs::recursive_directory_iterator(fix, ec)) {
    fs::permissions(e.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove | fs::perm_options::nofollow, ec);
  }
  set_paths(s, fix);
}

// The scratch folder $TMPDIR/roformer-cli-fuzz-XXXXXX: run/ and (unless cached) fix/. With
// FUZZ_CLI_FIXTURE_CACHE=DIR the fixtures are made once into DIR and reused by every later process
// (libFuzzer's fork mode starts one per job; scripts/fuzz.sh sets it inside its work folder).
void make_scratch() {
  auto* s = new Scratch;
  g_scratch = s;
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/roformer-cli-fuzz-XXXXXX";
  if (!mkdtemp(templ.data())) finding("mkdtemp failed");
  s->root = templ;
  s->run = s->root / "run";
  fs::create_directories(s->run);
  const char* cache = std::getenv("FUZZ_CLI_FIXTURE_CACHE");
  if (cache && *cache && fs::exists(fs::path(cache) / "text.txt")) {
    set_paths(*s, cache);
  } else {
    make_fixtures(*s, s->root / "fix");
    std::error_code ec;
    if (cache && *cache) {
      fs::create_directories(fs::path(cache).parent_path(), ec);
      fs::rename(s->root / "fix", cache, ec);  // another process may have been first: then keep ours
      if (!ec) set_paths(*s, cache);
    }
    fs::permissions(s->fix, fs::perms::owner_write, fs::perm_options::remove, ec);
  }
  std::error_code ec;
  s->pristine = s->root / "pristine";
  fs::copy(s->fix, s->pristine, fs::copy_options::recursive, ec);
  s->fix_state = snapshot(s->fix);
  clean_run_folder();
  if (verbose()) {
    for (size_t i = 0; i < g_commands->size(); ++i) {
      std::string path;
      for (const std::string& w : (*g_commands)[i].path) path += " " + w;
      std::string options;
      for (const OptionInfo& o : (*g_commands)[i].options) options += " " + (o.names.empty() ? "(positional)" : o.names[0]);
      std::fprintf(stderr, "fuzz_cli: command %zu:%s; options:%s\n", i, path.c_str(), options.c_str());
    }
    std::fprintf(stderr, "fuzz_cli: scratch %s, fixtures %s; clm '%s', spm '%s', translate '%s'\n", s->root.c_str(),
                 s->fix.c_str(), s->clm.c_str(), s->spm.c_str(), s->translate.c_str());
  }
}

// ---- the value dictionary ----

const std::vector<std::string>& numbers() {
  static const std::vector<std::string> v = {
      "0", "1", "2", "3", "8", "-1", "-0", "2147483647", "2147483648", "4294967295", "4294967296",
      "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551616", "1e309",
      "-1e309", "1e-320", "nan", "-nan", "inf", "-inf", "0.5", "1.5", "-0.5", "0x10", "1,2", "1,,2", "+1",
      " 1", "1 ", "1e2", "0.001", "1e-9", "100000000000000000000"};
  return v;
}

// Huge sizes, for the size options among them.
const std::vector<std::string>& huge_numbers() {
  static const std::vector<std::string> v = {"2147483647", "2147483648", "4294967296", "9223372036854775807",
                                             "1e18", "100000000000000000000"};
  return v;
}

// Small or invalid: for options that set an amount of work or a size.
const std::vector<std::string>& small_numbers() {
  static const std::vector<std::string> v = {"0", "1", "2", "-1", "-0", "nan", "inf", "-inf", "", "x", "1e309",
                                             "0.5", "9223372036854775808", "1,2", "0.001", "1e-320", "0x1"};
  return v;
}

std::vector<std::string> strings() {
  const Scratch& s = *g_scratch;
  std::vector<std::string> v = {
      "", " ", "-", "--", "-x", "=", "x", "none", "auto", "text", "jsonl", "tsv", "csv", "clm", "mlm", "char",
      "byte", "wordpiece", "rope", "sinusoidal", "learned", "softmax", "linear", "performer", "int8", "bf16",
      "packed", "blas", "mean", "cls", "pooler", "unigram", "bpe", "left", "right", "cosine", "inverse_sqrt",
      "constant", "small", "base", "regression", "single_label_classification", "multi_label_classification",
      "linear:2", "ntk:2", "dynamic-ntk:2", "yarn:4:16", "llama3:8:1:4:16", "yarn:4:1e300", "linear:0",
      "linear:nan", "accuracy", "f1", "loss", "text,label", "a,b", "label", "text_pair", "source", "target",
      "[MASK]", "[MASK] [MASK] hello", "AVX2", "AVX3", "SSE4", "EMU128", "val_loss",
      std::string(5000, 'a'), std::string(300, '/'), "\x01\x02\x1b[31m\x7f", "\xff\xfe\xc0\x80", "a\nb", "\t",
      "\xe5\xa4\xa9\xe6\xb0\x94", "%s%n%x", "{}", "{\"a\":", "\\",
      // paths
      (s.run / "missing" / "x").string(), (s.run / "dev-null").string(), (s.run / "dev-full").string(), ".", "..", "run-out", "run-out/sub/x.png", "x.png", "x.csv",
      "x.txt", "x.jsonl", "x.safetensors", "x.model", s.root.string(), s.readonly, s.readonly + "/x",
      s.readonly + "/x.png", s.text, s.text + "/", s.jsonl, s.tsv, s.csv, s.parallel, s.refs, s.hyps, s.ids,
      s.model, s.model + "/config.json", s.model + "/vocab.txt", s.model + "/model.safetensors", s.tokenizer,
      s.tokenizer + "/vocab.txt", s.inputs, s.fix.string(), s.long_line, s.no_mask_model, s.cased_model};
  for (const std::string& p : {s.clm, s.spm, s.translate}) {
    if (!p.empty()) v.push_back(p);
  }
  if (!s.clm.empty()) v.push_back(fs::path(s.clm).parent_path().string());  // the run folder
  if (!s.translate.empty()) v.push_back(fs::path(s.translate).parent_path().string());
  return v;
}

const std::vector<std::string>& dictionary() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> all = numbers();
    const std::vector<std::string> more = strings();
    all.insert(all.end(), more.begin(), more.end());
    return all;
  }();
  return v;
}

// A working value for a required option (or one that the command needs, such as train --data).
std::string working_value(const Command& c, const std::string& name) {
  const Scratch& s = *g_scratch;
  const std::string& cmd = c.path[0];
  if (name == "--model") {
    if (cmd == "eval" || cmd == "generate") return s.clm;
    if (cmd == "translate") return s.translate;
    if (cmd == "spm-encode" || cmd == "spm-decode") return s.spm;
    return s.model;
  }
  if (name == "--data") return s.text;
  if (name == "--input") {
    if (cmd == "similarity" || cmd == "classify") return s.jsonl;
    return cmd == "spm-decode" ? s.ids : cmd == "bleu" ? s.hyps : s.text;
  }
  if (name == "--validation") return cmd == "finetune" ? s.jsonl : s.parallel;
  if (name == "--inputs") return s.inputs;
  if (name == "--train") return cmd == "finetune" ? s.jsonl : s.parallel;
  if (name == "--ref") return s.refs;
  if (name == "--out") return cmd == "vocab" ? "run-out/vocab.txt" : "run-out";
  if (name == "--model-prefix") return "run-out-spm";
  if (name == "--runs") return fs::path(s.clm).parent_path().string();
  return "";
}

// ---- decoding ----

class Bytes {
 public:
  Bytes(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool empty() const { return i_ >= n_; }
  uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  std::string take(size_t k) {
    k = std::min(k, n_ - std::min(i_, n_));
    std::string s(reinterpret_cast<const char*>(d_ + i_), k);
    i_ += k;
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_, i_ = 0;
};

std::string raw_value(Bytes& in, bool numeric) {
  const size_t len = numeric ? in.byte() % 3 : in.byte() % 48;
  std::string v = in.take(len);
  std::replace(v.begin(), v.end(), '/', '_');  // outputs stay in the scratch folder
  if (v == "..") v = "_.";
  return v;
}

std::string value(Bytes& in, const OptionInfo& o) {
  const uint8_t kind = in.byte();
  if (o.budget) {
    if (kind >= 224) return raw_value(in, true);
    const auto& v = !o.work && kind >= 192 ? huge_numbers() : small_numbers();
    return v[in.byte() % v.size()];
  }
  if (kind >= 200) return raw_value(in, o.numeric);
  const auto& v = kind < 100 ? numbers() : dictionary();
  return v[in.byte() % v.size()];
}

std::vector<std::string> decode(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  const std::vector<Command>& commands = *g_commands;
  const Command& c = commands[in.byte() % commands.size()];
  const uint8_t mode = in.byte();
  std::vector<std::string> args = {"roformer"};
  args.insert(args.end(), c.path.begin(), c.path.end());
  std::set<std::string> given;
  for (int step = 0; step < 24 && !in.empty(); ++step) {
    const uint8_t sel = in.byte();
    if (sel < 216 && !c.options.empty()) {
      const OptionInfo& o = c.options[sel % c.options.size()];
      const uint8_t form = in.byte();
      if (o.names.empty()) {  // a positional
        args.push_back(value(in, o));
        continue;
      }
      const std::string& name = o.names[(form >> 4) % o.names.size()];
      given.insert(o.names[0]);
      if (o.flag) {
        if ((form & 7) == 7) {
          args.push_back(name + "=" + value(in, o));
        } else {
          args.push_back(name);
        }
      } else if ((form & 3) == 3 && name.rfind("--", 0) == 0) {
        args.push_back(name + "=" + value(in, o));
      } else if ((form & 7) == 6) {
        args.push_back(name);  // no value (or the next option as one)
      } else {
        args.push_back(name);
        args.push_back(value(in, o));
        if ((form & 7) == 5) args.push_back(value(in, o));  // a second value
      }
    } else if (sel < 240) {
      OptionInfo plain;
      args.push_back(value(in, plain));  // an extra word
    } else {
      static const char* const kWords[] = {"--", "--help", "-h", "--bogus", "--version", "-", "help", "train",
                                           "--steps", "--=x", "---x", "-\xff", "--model", "rope",
                                           "check", "--threads"};
      args.push_back(kWords[sel % (sizeof(kWords) / sizeof(kWords[0]))]);
    }
  }
  if (mode & 1) {  // working values for what the command requires
    for (const std::string& name : c.required) {
      if (given.count(name)) continue;
      const std::string v = working_value(c, name);
      if (!v.empty()) args.insert(args.end(), {name, v});
    }
    for (const char* name : {"--data", "--train", "--validation", "--input", "--ref"}) {  // required in the callback
      if (given.count(name)) continue;
      for (const OptionInfo& o : c.options) {
        if (!o.names.empty() && o.names[0] == name && !c.required.count(name)) {
          if ((mode & 2) || c.path[0] == "train" || c.path[0] == "translate-train" || c.path[0] == "finetune") {
            const std::string v = working_value(c, name);
            if (!v.empty()) args.insert(args.end(), {name, v});
          }
        }
      }
    }
    if (c.path[0] == "finetune" && !given.count("--model")) args.insert(args.end(), {"--model", g_scratch->model});
  }
  // bench rope's full set of shapes takes minutes under the sanitizers: always its smoke-test size.
  if (c.path[0] == "bench" && c.path[1] == "rope" && !given.count("--quick")) args.push_back("--quick");
  if (c.path[0] == "bench" && c.path[1] == "train" && !given.count("--no-sgemm")) args.push_back("--no-sgemm");
  // Small amounts of work where the input gives none.
  for (const OptionInfo& o : c.options) {
    if (o.names.empty() || !o.budget || given.count(o.names[0])) continue;
    auto it = budget_defaults().find(c.path[0] + "|" + o.names[0]);
    if (it == budget_defaults().end()) it = budget_defaults().find(o.names[0]);
    const std::string v = it != budget_defaults().end() ? it->second : "16";
    if (!v.empty()) args.insert(args.end(), {o.names[0], v});
  }
  return args;
}

std::string escape(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (ch >= 0x20 && ch < 0x7f && ch != '\\' && ch != '\'') {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out;
}

std::string shell_line(const std::vector<std::string>& args) {
  std::string line;
  for (const std::string& a : args) line += (line.empty() ? "'" : " '") + escape(a.size() > 200 ? a.substr(0, 40) + "...(" + std::to_string(a.size()) + " bytes)" : a) + "'";
  return line;
}

// Runs args in-process with stderr captured (the C stream and std::cerr; sanitizer reports still go to
// file descriptor 2). Returns the status; `err` gets what was written to stderr.
int run_captured(const std::vector<std::string>& args, std::string& err) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  char* buf = nullptr;
  size_t len = 0;
  FILE* mem = open_memstream(&buf, &len);
  if (!mem) finding("open_memstream failed");
  FILE* saved = stderr;
  std::stringstream cerr_capture;
  std::streambuf* saved_cerr = std::cerr.rdbuf(cerr_capture.rdbuf());
  // The command runs in the scratch folder's run/ (default outputs land there); the fuzzer's own working
  // directory (its corpus and artifact paths may be relative) is restored after it.
  const fs::path cwd = fs::current_path();
  fs::current_path(g_scratch->run);
  stderr = mem;
  int status = 0;
  try {
    status = roformer::run_command_line(static_cast<int>(argv.size() - 1), argv.data());
  } catch (const std::exception& e) {
    stderr = saved;
    std::cerr.rdbuf(saved_cerr);
    finding("exception escaped run_command_line: " + std::string(typeid(e).name()) + ": " + e.what() + "\n  " +
            shell_line(args));
  } catch (...) {
    stderr = saved;
    std::cerr.rdbuf(saved_cerr);
    finding("non-standard exception escaped run_command_line\n  " + shell_line(args));
  }
  std::fflush(mem);
  stderr = saved;
  std::cerr.rdbuf(saved_cerr);
  std::fclose(mem);
  std::error_code ec;
  fs::current_path(cwd, ec);
  err.assign(buf, len);
  std::free(buf);
  err += cerr_capture.str();
  return status;
}

int run_quiet(std::vector<std::string> args) {
  args.insert(args.begin(), "roformer");
  std::string err;
  const int status = run_captured(args, err);
  if (verbose()) std::fprintf(stderr, "fuzz_cli: set-up %s -> %d\n%s", shell_line(args).c_str(), status, err.c_str());
  return status;
}

void initialize() {
  // stdin and stdout: /dev/null (no command waits on a terminal; outputs are not checked).
  const int null_fd = open("/dev/null", O_RDWR);
  if (null_fd < 0) finding("open /dev/null failed");
  dup2(null_fd, 0);
  if (!verbose()) dup2(null_fd, 1);
  close(null_fd);
  auto app_commands = std::make_unique<roformer::CommandTable>();
  const std::unique_ptr<CLI::App> app = roformer::make_app(*app_commands);
  g_commands = new std::vector<Command>;
  collect(app.get(), {}, *g_commands);
  make_scratch();
  (void)dictionary();
}

Snapshot snapshot(const fs::path& dir) {
  Snapshot out;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    const auto status = e.symlink_status(ec);
    const bool file = fs::is_regular_file(status);
    const auto time = fs::last_write_time(e.path(), ec).time_since_epoch().count();
    out[fs::relative(e.path(), dir, ec).string()] = {file ? fs::file_size(e.path(), ec) : 0,
                                                     static_cast<int64_t>(time)};
  }
  return out;
}

void set_read_only(const fs::path& dir, bool read_only) {
  std::error_code ec;
  const auto write = fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write;
  const auto how = read_only ? fs::perm_options::remove : fs::perm_options::add;
  if (!read_only) fs::permissions(dir, fs::perms::owner_write, how, ec);
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    fs::permissions(e.path(), write, how | fs::perm_options::nofollow, ec);  // never a link's target
  }
  if (read_only) fs::permissions(dir, fs::perms::owner_write, how, ec);
}

// The run folder emptied, with its two device links: dev-null and dev-full stand for /dev/null and
// /dev/full, so that an output path replaced by a renamed temporary is the link and never the device
// (which it would be for root).
void clean_run_folder() {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(g_scratch->run, ec)) {
    fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add | fs::perm_options::nofollow, ec);
    fs::remove_all(e.path(), ec);
  }
  fs::create_symlink("/dev/null", g_scratch->run / "dev-null", ec);
  fs::create_symlink("/dev/full", g_scratch->run / "dev-full", ec);
}

// Read-only permissions do not stop root: when an input wrote into the fixtures, they are restored
// from the pristine copy, so that every input sees the same ones.
void restore_fixtures() {
  Scratch& s = *g_scratch;
  if (snapshot(s.fix) == s.fix_state) return;
  if (verbose()) std::fprintf(stderr, "fuzz_cli: the input changed the fixtures; restoring them\n");
  std::error_code ec;
  set_read_only(s.fix, false);
  fs::remove_all(s.fix, ec);
  fs::copy(s.pristine, s.fix, fs::copy_options::recursive, ec);
  set_read_only(s.fix, true);
  s.fix_state = snapshot(s.fix);
}

// The command line now running, for the standalone driver's watchdog to name (a signal handler may
// only write what is already in memory).
char g_running[8192];

void run_one(const uint8_t* data, size_t size) {
  const std::vector<std::string> args = decode(data, size);
  std::snprintf(g_running, sizeof g_running, "%s\n", shell_line(args).c_str());
  if (verbose()) std::fprintf(stderr, "fuzz_cli: %s", g_running);
  std::string err;
  const int status = run_captured(args, err);
  if (verbose()) std::fprintf(stderr, "fuzz_cli: -> %d\n%s", status, err.c_str());
  if (status != 0) {
    // A line: some text ending in a newline.
    const size_t nl = err.find('\n');
    if (nl == std::string::npos || err.find_first_not_of(" \t\r\n") == std::string::npos) {
      finding("status " + std::to_string(status) + " without an error line on stderr (stderr: '" + escape(err) +
              "')\n  " + shell_line(args));
    }
  }
  clean_run_folder();
  restore_fixtures();
}

}  // namespace

#ifndef FUZZ_CLI_STANDALONE

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  initialize();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  run_one(data, size);
  return 0;
}

#else

#include <signal.h>

#include <chrono>
#include <random>

namespace {

// One input that runs this long is a hang (the slowest, under the sanitizers, take a few seconds): the
// finding names its command line, where ctest's own timeout would name only the test.
constexpr unsigned kInputSeconds = 120;

char g_hang_head[96];  // the finding's first line, written before any input runs

void on_hang(int) {
  (void)!write(2, g_hang_head, strnlen(g_hang_head, sizeof g_hang_head));
  (void)!write(2, g_running, strnlen(g_running, sizeof g_running));
  _exit(1);
}

// Runs one input under the watchdog.
void run_watched(const uint8_t* data, size_t size) {
  alarm(kInputSeconds);
  run_one(data, size);
  alarm(0);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  double seconds = -1;
  uint64_t seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--random" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (fs::is_directory(a)) {
      for (const auto& e : fs::directory_iterator(a)) {
        if (e.is_regular_file()) files.push_back(e.path().string());
      }
    } else {
      files.push_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  const fs::path cwd = fs::current_path();
  initialize();
  std::snprintf(g_hang_head, sizeof g_hang_head, "FUZZ FINDING: an input ran past %u s (a hang or unbounded work)\n  ",
                kInputSeconds);
  signal(SIGALRM, on_hang);
  for (const std::string& f : files) {
    std::ifstream in(fs::path(f).is_absolute() ? fs::path(f) : cwd / f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "fuzz_cli: cannot read %s\n", f.c_str());
      return 2;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::fprintf(stderr, "fuzz_cli: replay %s\n", f.c_str());
    run_watched(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  long runs = 0;
  if (seconds > 0) {
    std::fprintf(stderr, "fuzz_cli: random inputs for %.0f s, seed %llu\n", seconds,
                 static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      std::vector<uint8_t> bytes(rng() % 64);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      if (verbose()) std::fprintf(stderr, "fuzz_cli: input %ld\n", runs);
      run_watched(bytes.data(), bytes.size());
      ++runs;
    }
  }
  std::fprintf(stderr, "fuzz_cli: %zu files replayed, %ld random inputs, no finding\n", files.size(), runs);
  std::error_code ec;
  fs::permissions(g_scratch->fix, fs::perms::owner_all, fs::perm_options::add, ec);
  for (const auto& e : fs::recursive_directory_iterator(g_scratch->root, ec)) {
    fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add | fs::perm_options::nofollow, ec);
  }
  fs::remove_all(g_scratch->root, ec);
  return 0;
}

#endif
