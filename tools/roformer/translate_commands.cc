// Translation on the command line:
//   roformer translate-train  trains the encoder-decoder on parallel text (src/train/translate_run.h)
//                             and draws curves.png through its report hook;
//   roformer translate        translates text lines or JSONL on stdin or a file (src/infer/translator.h);
//   roformer average          averages the weights of checkpoints (the paper's last-5 average).
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "commands.h"
#include "model_option.h"
#include "curves.h"
#include "thread_option.h"
#include "io/lines.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/output_path.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "plot/plot.h"
#include "infer/translator.h"
#include "train/checkpoint.h"
#include "train/translate_run.h"

namespace roformer {
namespace {

namespace fs = std::filesystem;


struct TranslateCli {
  train::TranslateTrainOptions train;
  std::string position = "rope";
  double dropout = 0.1;
  bool resume = false, no_progress = false;
  // translate
  std::string model_dir, input = "-", output, source_key = "source";
  std::string format = "text";  // text or jsonl
  model::DecodeOptions decode;
  int64_t batch = 32;
  bool with_scores = false, timing = false;
  int threads = 0;
  infer::LoadOptions linears;  // --quantize, --gemm
  // average
  std::vector<std::string> checkpoints;
  std::string run_dir, average_out;
  int64_t last = 5;
};

int run_translate_train(TranslateCli& c) {
  c.train.model.position_encoding = model::parse_position_encoding(c.position);
  c.train.model.hidden_dropout_prob = c.train.model.attention_probs_dropout_prob = c.dropout;
  c.train.model.embedding_size = c.train.model.hidden_size;
  c.train.progress = !c.no_progress;
  const train::TranslateTrainResult r = train::run_translate_training(c.train, c.resume, render_curves);
  if (r.exit_code == 0 && r.last_eval.step > 0) {  // a finished run resumed evaluates nothing
    const auto bleu = r.last_eval.metrics.find("bleu");
    fmt::print("validation loss {:.4f}, BLEU {:.2f}\n", r.last_eval.val_loss, bleu == r.last_eval.metrics.end() ? NAN : bleu->second);
  }
  return r.exit_code;
}

// Lines of text, or JSONL objects with the source under --source-key; '-' reads stdin.
std::vector<std::string> read_inputs(const TranslateCli& c) {
  std::string text;
  if (c.input == "-") {  // read line by line, so that a stream without breaks stops at the record bound
    int64_t n = 0;
    for (std::string line; io::read_line(std::cin, &line, "stdin", ++n);) text += line + "\n";
  } else {
    text = io::read_file(c.input);
  }
  std::vector<std::string> out;
  io::for_each_line(text, c.input == "-" ? "stdin" : c.input, [&](const std::string& line, int64_t line_no) {
    if (c.format != "jsonl") return out.push_back(line);  // an empty line translates to nothing
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw io::Error(c.input + ":" + std::to_string(line_no) + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains(c.source_key) || !j[c.source_key].is_string()) {
      throw io::Error(c.input + ":" + std::to_string(line_no) + ": no string field '" + c.source_key + "'");
    }
    out.push_back(j[c.source_key].get<std::string>());
  });
  return out;
}

int run_translate(TranslateCli& c) {
  if (c.threads > 0) omp_set_num_threads(c.threads);
  auto translator = infer::Translator::load(c.model_dir, c.linears);
  const std::vector<std::string> inputs = read_inputs(c);
  const auto t0 = std::chrono::steady_clock::now();
  const auto results = translator->translate(inputs, c.decode, c.batch);
  if (c.timing) {  // decoding alone (the model is loaded): generated tokens, eos included, of the best hypotheses
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t tokens = 0;
    for (const auto& r : results) tokens += r.empty() ? 0 : static_cast<int64_t>(r[0].tokens.size()) + r[0].finished;
    fmt::print(stderr, "{}\n", nlohmann::json{{"sentences", results.size()}, {"tokens", tokens}, {"seconds", s},
                                               {"tokens_per_s", static_cast<double>(tokens) / s}}.dump());
  }
  std::string text;
  for (size_t i = 0; i < results.size(); ++i) {
    if (c.format == "jsonl") {
      nlohmann::json j = {{"source", inputs[i]}, {"translation", results[i].empty() ? "" : results[i][0].text}};
      if (c.with_scores || c.decode.nbest > 1) {  // with the subword ids, for checks against other engines
        nlohmann::json nbest = nlohmann::json::array();
        for (const auto& t : results[i]) nbest.push_back({{"translation", t.text}, {"score", t.score}, {"tokens", t.tokens}, {"finished", t.finished}});
        j["nbest"] = nbest;
        j["source_tokens"] = translator->subwords().encode(inputs[i]);
      }
      text += j.dump() + "\n";
      continue;
    }
    for (const auto& t : results[i]) {  // text: one line per hypothesis (n-best lines are consecutive)
      text += c.with_scores ? fmt::format("{:.4f}\t{}\n", t.score, t.text) : t.text + "\n";
    }
  }
  if (c.output.empty()) {
    std::cout << text << std::flush;
  } else {
    io::write_file_atomic(c.output, text);
  }
  return 0;
}

// The mean of every tensor over the checkpoints (same names and shapes), summed in double.
int run_average(TranslateCli& c) {
  std::vector<std::string> dirs = c.checkpoints;
  if (!c.run_dir.empty()) {
    std::vector<std::string> steps;
    for (const auto& e : fs::directory_iterator(c.run_dir)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && name.rfind("step-", 0) == 0) steps.push_back(e.path().string());
    }
    std::sort(steps.begin(), steps.end());
    if (static_cast<int64_t>(steps.size()) < c.last) {
      throw io::Error(c.run_dir + ": " + std::to_string(steps.size()) + " checkpoints, fewer than --last " +
                      std::to_string(c.last) + " (translate-train keeps --keep-checkpoints of them)");
    }
    dirs.insert(dirs.end(), steps.end() - c.last, steps.end());
  }
  if (dirs.size() < 2) throw std::invalid_argument("average needs at least two checkpoints (or --run with --last)");
  std::vector<std::string> inputs = dirs, writes = {"model.safetensors"};  // and the newest checkpoint's other files
  inputs.push_back(c.run_dir);
  for (const auto& e : fs::directory_iterator(dirs.back())) writes.push_back(e.path().filename().string());
  io::check_output_path("--out", c.average_out, inputs);
  io::check_output_directory("--out", c.average_out, writes);
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<double>>> sums;
  for (size_t k = 0; k < dirs.size(); ++k) {
    const auto w = io::open_weights(dirs[k]);
    if (k > 0 && w->tensors().size() != sums.size()) {
      throw io::Error(dirs[k] + ": holds other tensors than " + dirs[0] + " (not the same model)");
    }
    for (const auto& [name, info] : w->tensors()) {
      if (k > 0 && (!sums.count(name) || sums[name].first != info.shape)) {
        throw io::Error(dirs[k] + ": tensor " + name + " does not match " + dirs[0]);
      }
      const std::vector<float> v = w->f32(name, info.shape);
      auto& [shape, acc] = sums[name];
      if (k == 0) shape = info.shape, acc.assign(v.size(), 0.0);
      for (size_t i = 0; i < v.size(); ++i) acc[i] += v[i];
    }
  }
  std::vector<std::vector<float>> means;
  means.reserve(sums.size());
  std::vector<io::TensorView> tensors;
  for (const auto& [name, entry] : sums) {
    means.emplace_back(entry.second.size());
    for (size_t i = 0; i < entry.second.size(); ++i) means.back()[i] = static_cast<float>(entry.second[i] / dirs.size());
    tensors.push_back({name, io::DType::F32, entry.first, means.back().data()});
  }
  fs::create_directories(c.average_out);
  io::write_file_atomic(c.average_out + "/model.safetensors", io::safetensors_bytes(tensors, {{"format", "pt"}}));
  // Everything else (config, subwords, tokenizer) comes from the newest checkpoint.
  for (const auto& e : fs::directory_iterator(dirs.back())) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors" || name == "optimizer.safetensors" || name == "elapsed.json" || !e.is_regular_file()) continue;
    io::write_file_atomic(c.average_out + "/" + name, io::read_file(e.path().string()));
  }
  fmt::print(stderr, "averaged {} checkpoints ({} tensors) into {}\n", dirs.size(), tensors.size(), c.average_out);
  return 0;
}

// `roformer translate-train`, with the defaults of a 3 + 3-layer, 256-wide encoder-decoder.
void add_translate_train_command(CLI::App& app, CommandTable& commands, const std::shared_ptr<TranslateCli>& c) {
  train::TranslateTrainOptions& t = c->train;
  t.model.num_hidden_layers = 3;
  t.model.hidden_size = t.model.embedding_size = 256;
  t.model.num_attention_heads = 4;
  t.model.intermediate_size = 1024;
  t.model.max_position_embeddings = 512;


  CLI::App* tt = app.add_subcommand("translate-train", "Train a RoFormer encoder-decoder on parallel text");
  tt->add_option("--train", t.train, "Training pairs: .tsv (source<TAB>target) or .jsonl");
  tt->add_option("--validation", t.validation, "Validation pairs (same format)");
  tt->add_option("--source-key", t.source_key, "JSONL field of the source")->capture_default_str();
  tt->add_option("--target-key", t.target_key, "JSONL field of the target")->capture_default_str();
  tt->add_option("--out", t.out, "Run directory: checkpoints, spm.model, metrics.jsonl/csv, curves.png")->capture_default_str();
  tt->add_flag("--resume", c->resume, "Continue the run in --out from its latest checkpoint (options come from it)");
  tt->add_option("--spm", t.spm, "A SentencePiece .model to use (default: train a joint one on the training pairs)");
  tt->add_option("--vocab-size", t.vocab_size, "Joint SentencePiece vocabulary size")->capture_default_str();
  tt->add_option("--spm-type", t.spm_type, "unigram or bpe")->check(CLI::IsMember({"unigram", "bpe"}))->capture_default_str();
  tt->add_option("--position", c->position, "rope, sinusoidal, learned or none (both stacks)")
      ->check(CLI::IsMember({"rope", "sinusoidal", "learned", "none"}))->capture_default_str();
  tt->add_flag("--rotate-cross-attention", t.model.rotate_cross_attention,
               "RoPE: also rotate cross-attention queries and keys (off, as HF; not exportable to HF)");
  tt->add_option("--layers", t.model.num_hidden_layers, "Layers of each stack")->check(CLI::PositiveNumber)->capture_default_str();
  tt->add_option("--hidden", t.model.hidden_size, "Hidden size")->check(CLI::PositiveNumber)->capture_default_str();
  tt->add_option("--heads", t.model.num_attention_heads, "Attention heads")->check(CLI::PositiveNumber)->capture_default_str();
  tt->add_option("--ff", t.model.intermediate_size, "Feed-forward size")->check(CLI::PositiveNumber)->capture_default_str();
  tt->add_option("--max-positions", t.model.max_position_embeddings, "max_position_embeddings")
      ->check(CLI::PositiveNumber)->capture_default_str();
  tt->add_option("--dropout", c->dropout, "Hidden and attention dropout")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  add_off_flag(tt, "--separate-embeddings", t.shared_embeddings, "Separate source and target embedding tables");
  tt->add_option("--max-tokens", t.max_tokens, "Padded tokens per batch and side")->check(CLI::PositiveNumber)->capture_default_str();
  tt->add_option("--max-source-length", t.max_source_length, "Skip training pairs with a longer source (subwords)")
      ->capture_default_str();
  tt->add_option("--max-target-length", t.max_target_length, "Skip training pairs with a longer target (subwords)")
      ->capture_default_str();
  tt->add_option("--steps", t.steps, "Optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  tt->add_option("--lr", t.lr, "Peak learning rate (inverse square root after the warm-up)")->capture_default_str();
  tt->add_option("--warmup", t.warmup, "Warm-up steps")->capture_default_str();
  tt->add_option("--warmup-init-lr", t.warmup_init_lr, "Learning rate the warm-up starts from")->capture_default_str();
  tt->add_option("--label-smoothing", t.label_smoothing, "Label smoothing ε")->capture_default_str();
  tt->add_option("--beta2", t.beta2, "Adam β2")->capture_default_str();
  tt->add_option("--weight-decay", t.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  tt->add_option("--clip", t.clip, "Global gradient-norm clip (0: off)")->capture_default_str();
  tt->add_option("--seed", t.seed, "Seed of initialisation, subwords, batch order and dropout")->capture_default_str();
  tt->add_option("--bleu-sentences", t.bleu_sentences, "Validation pairs translated for BLEU at each evaluation (0: none)")
      ->capture_default_str();
  tt->add_option("--bleu-beam", t.bleu_beam, "Beam of those translations (1: greedy)")->capture_default_str();
  add_loop_options(tt, t.loop, "validation loss");  // each evaluation also writes a checkpoint (for roformer average)
  tt->add_flag("--no-progress", c->no_progress, "No live progress line (log lines instead)");
  tt->callback([tt, c] {
    if (c->resume) refuse_options_on_resume(tt);
    if (!c->resume && (c->train.train.empty() || c->train.validation.empty())) throw CLI::RequiredError("--train and --validation");
  });
  commands.add(tt, [c] { return run_translate_train(*c); });
}

// `roformer translate`: decoding options (model::DecodeOptions) and the input/output formats.
void add_translate_command(CLI::App& app, CommandTable& commands, const std::shared_ptr<TranslateCli>& c) {
  model::DecodeOptions& d = c->decode;
  d.max_len_a = 1.5, d.max_len_b = 10;
  CLI::App* tr = app.add_subcommand("translate", "Translate text with a translate-train checkpoint (beam search)");
  tr->add_option("--model", c->model_dir, "Checkpoint directory (config.json, model.safetensors, spm.model)")->transform(model_location())->required();
  tr->add_option("--input", c->input, "Text lines or JSONL ('-': stdin)")->capture_default_str();
  tr->add_option("--output", c->output, "Write here (atomically) instead of stdout");
  tr->add_option("--format", c->format, "text (a line each) or jsonl (objects with --source-key)")
      ->check(CLI::IsMember({"text", "jsonl"}))->capture_default_str();
  tr->add_option("--source-key", c->source_key, "JSONL field of the text")->capture_default_str();
  tr->add_option("--beam", d.beam_size, "Beam size (1: greedy)")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--length-penalty", d.length_penalty, "Exponent of the length normalisation (HF/fairseq)")->capture_default_str();
  tr->add_flag("--early-stopping", d.early_stopping, "Stop a source once it has --beam finished hypotheses");
  tr->add_option("--nbest", d.nbest, "Hypotheses per input (at most --beam)")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--max-len-a", d.max_len_a, "New tokens at most a · source length + b")->capture_default_str();
  tr->add_option("--max-len-b", d.max_len_b, "New tokens at most a · source length + b")->capture_default_str();
  tr->add_option("--min-new-tokens", d.min_new_tokens, "Tokens before an end of sentence may be chosen")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  tr->add_option("--no-repeat-ngram-size", d.no_repeat_ngram_size, "No n-gram of this size twice (0: off)")->capture_default_str();
  tr->add_flag("--sample", d.sample, "Sample (with --beam 1) instead of searching");
  tr->add_option("--temperature", d.temperature, "Sampling temperature")->capture_default_str();
  tr->add_option("--top-k", d.top_k, "Sampling top-k (0: all)")->capture_default_str();
  tr->add_option("--top-p", d.top_p, "Sampling: the most probable tokens of this much mass (1: all)")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  tr->add_option("--seed", d.seed, "Sampling seed")->capture_default_str();
  tr->add_option("--batch", c->batch, "Sources decoded together")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_flag("--scores", c->with_scores, "Print each hypothesis's score");
  tr->add_flag("--timing", c->timing, "Print decoding time and tokens/s (a JSON line on stderr)");
  tr->add_option("--threads", c->threads, "OpenMP threads (0: all cores)")->check(roformer::thread_count());
  add_linear_options(tr, c->linears);
  add_kv_cache_option(tr, c->linears);
  commands.add(tr, [c] { return run_translate(*c); });
}

// `roformer average`: the mean of checkpoints' weights.
void add_average_command(CLI::App& app, CommandTable& commands, const std::shared_ptr<TranslateCli>& c) {
  CLI::App* av = app.add_subcommand("average", "Average the weights of checkpoints (config and subwords from the newest)");
  av->add_option("checkpoints", c->checkpoints, "Checkpoint directories");
  av->add_option("--run", c->run_dir, "A run directory: average its newest --last checkpoints");
  av->add_option("--last", c->last, "Checkpoints to average with --run")->check(CLI::PositiveNumber)->capture_default_str();
  av->add_option("--out", c->average_out, "Directory to write")->required();
  commands.add(av, [c] { return run_average(*c); });
}

}  // namespace

void add_translate_commands(CLI::App& app, CommandTable& commands) {
  auto c = std::make_shared<TranslateCli>();
  add_translate_train_command(app, commands, c);
  add_translate_command(app, commands, c);
  add_average_command(app, commands, c);
}

}  // namespace roformer
