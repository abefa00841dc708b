// `roformer train`, `roformer eval` and `roformer generate`: flags for the trainer (src/train) and
// the decoder (src/model/decoding.h: sampling, greedy, beam search over the KV cache). eval and generate run the model packed for inference
// (--quantize, --gemm: model::prepare_for_inference), as the other inference commands do.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>

#include "base/words.h"
#include "commands.h"
#include "enum_option.h"
#include "model_option.h"
#include "curves.h"
#include "thread_option.h"
#include "io/atomic_file.h"
#include "load/model_dir.h"
#include "model/decoding.h"
#include "plot/plot.h"
#include "train/checkpoint.h"
#include "train/extrapolation.h"
#include "train/trainer.h"

namespace roformer {
namespace {

struct ModelCommandOptions {
  train::TrainOptions train;
  std::string position = "rope", decay = "cosine", attention = "softmax";
  bool resume = false, no_progress = false;
  int64_t embedding_size = 0;
  double dropout = 0.0, attention_dropout = -1;
  // eval / generate
  std::string model_dir, data, prompt = "\n";
  int64_t batch = 16, seq = 128, max_batches = 50, tokens = 300, top_k = 40, beam = 1, no_repeat_ngram = 0;
  double val_fraction = 0.05, temperature = 0.8, top_p = 1.0, length_penalty = 1.0;
  uint64_t seed = 1;
  struct {
    bool batch = false, seq = false, max_batches = false, val_fraction = false, seed = false;
  } eval_set;  // which of eval's window options the command line gave (the rest come from the checkpoint)
  bool train_steps_given = false;             // train --steps (with --resume: extend the run)
  train::ExtrapolationOptions extrapolation;  // eval --lengths
  model::LinearOptions linears;               // eval, generate: --quantize, --gemm
};

// `roformer eval --lengths ... --png`: perplexity by window length, one series per method.
void render_extrapolation_png(const std::string& png, const train::ExtrapolationResult& r) {
  plot::Chart chart;
  chart.title = "Perplexity beyond the trained length (" + std::to_string(r.train_length) + " tokens)";
  chart.x_label = "evaluation window (tokens)";
  chart.y_label = "validation perplexity";
  chart.log_x = chart.log_y = true;
  for (size_t i = 0; i < r.methods.size(); ++i) {
    plot::Series s{r.methods[i], {}, {}};
    s.markers = true;
    for (size_t j = 0; j < r.lengths.size(); ++j) {
      s.x.push_back(static_cast<double>(r.lengths[j]));
      s.y.push_back(std::exp(r.loss[i][j]));
    }
    chart.series.push_back(std::move(s));
  }
  io::write_file_atomic(png, plot::render_png(chart));
}

int run_train(ModelCommandOptions& o) {
  train::TrainOptions& t = o.train;
  t.model.position_encoding = model::parse_position_encoding(o.position);
  t.model.attention_type = model::parse_attention_type(o.attention);
  t.model.embedding_size = o.embedding_size > 0 ? o.embedding_size : t.model.hidden_size;
  t.model.hidden_dropout_prob = o.dropout;
  t.model.attention_probs_dropout_prob = o.attention_dropout >= 0 ? o.attention_dropout : o.dropout;
  t.schedule.decay = train::Schedule::parse_decay(o.decay);
  t.progress = !o.no_progress;
  const train::TrainResult r = train::run_training(t, o.resume, render_curves, o.train_steps_given);
  return r.exit_code;
}

int run_eval(ModelCommandOptions& o) {
  // A checkpoint of `roformer train` is evaluated on the windows its training evaluated (the same
  // batch, length, batch count, split and seed), so that both report one loss and one baseline;
  // each option given on the command line overrides its stored value.
  std::string source = "the defaults";
  if (const auto trained = train::checkpoint_train_options(o.model_dir)) {
    if (!o.eval_set.batch) o.batch = trained->batch;
    if (!o.eval_set.seq) o.seq = trained->seq;
    if (!o.eval_set.max_batches) o.max_batches = trained->eval_batches;
    if (!o.eval_set.val_fraction) o.val_fraction = trained->val_fraction;
    if (!o.eval_set.seed) o.seed = trained->seed;
    source = "training's evaluation";
  }
  if (!o.extrapolation.lengths.empty()) {
    train::ExtrapolationOptions& x = o.extrapolation;
    x.checkpoint = o.model_dir;
    x.data = o.data;
    x.val_fraction = o.val_fraction;
    x.linears = o.linears;
    const auto r = train::evaluate_extrapolation(x);
    if (!x.png.empty()) render_extrapolation_png(x.png, r);
    fmt::print("validation perplexity by window length (trained at {} tokens)\n\n| method |", r.train_length);
    for (int64_t L : r.lengths) fmt::print(" {} |", L);
    fmt::print("\n|---|");
    for (size_t j = 0; j < r.lengths.size(); ++j) fmt::print("---|");
    fmt::print("\n");
    for (size_t i = 0; i < r.methods.size(); ++i) {
      fmt::print("| {} |", r.methods[i]);
      for (double v : r.loss[i]) fmt::print("{}", std::isfinite(v) ? fmt::format(" {:.3f} |", std::exp(v)) : std::string(" - |"));
      fmt::print("\n");
    }
    return 0;
  }
  const auto r =
      train::evaluate_checkpoint(o.model_dir, o.data, o.batch, o.seq, o.max_batches, o.val_fraction, o.seed, o.linears);
  fmt::print("validation loss {:.4f} nats/token, perplexity {:.3f}, {:.4f} bits/token over {} tokens "
             "(unigram baseline {:.4f}; up to {} of {} × {} tokens from the last {:g} of the file, as {})\n",
             r.loss, std::exp(r.loss), r.loss / std::log(2.0), r.tokens, r.unigram_baseline,
             base::counted(o.max_batches, "batch", "batches"), o.batch, o.seq, o.val_fraction, source);
  return 0;
}

int run_generate(const ModelCommandOptions& o) {
  load::Request request;
  request.inference = o.linears;
  load::Model lm = load::roformer(o.model_dir, request);
  std::vector<int64_t> prompt;
  for (int32_t id : lm.tokenizer->encode_ids(o.prompt)) prompt.push_back(id);
  if (prompt.empty()) throw std::invalid_argument("the prompt encodes to no tokens");
  // The prompt and the new tokens share the model's context. A prompt that fills it is refused (as
  // transformers' generate fails past max_position_embeddings; cutting the prompt would silently
  // change what is continued); fewer new tokens than --tokens are generated with a note on stderr.
  const int64_t context = lm.model->config().max_position_embeddings;
  const auto prompt_tokens = static_cast<int64_t>(prompt.size());
  if (prompt_tokens >= context) {
    throw std::invalid_argument(fmt::format(
        "--prompt is {} tokens, but the model's context is {} tokens (max_position_embeddings in {}/config.json) and "
        "must also hold the generated ones: shorten --prompt to at most {} tokens",
        prompt_tokens, context, o.model_dir, context - 1));
  }
  if (prompt_tokens + o.tokens > context) {
    fmt::print(stderr, "roformer generate: generating {} tokens, not --tokens {}: the prompt's {} tokens and the new "
               "ones must fit the model's context of {} tokens (max_position_embeddings)\n",
               context - prompt_tokens, o.tokens, prompt_tokens, context);
  }
  model::DecodeOptions so;
  so.beam_size = o.beam;
  so.length_penalty = o.length_penalty;
  so.no_repeat_ngram_size = o.no_repeat_ngram;
  so.max_len_b = o.tokens;
  so.sample = o.beam == 1 && o.temperature > 0;  // --temperature 0: greedy
  so.temperature = o.temperature;
  so.top_k = o.top_k;
  so.top_p = o.top_p;
  so.seed = o.seed;
  for (const int32_t s : lm.tokenizer->special_ids()) so.banned.push_back(s);
  const auto ids = model::generate(*lm.model, prompt, so)[0].tokens;
  fmt::print("{}{}\n", o.prompt, lm.tokenizer->decode_ids(std::vector<int32_t>(ids.begin(), ids.end())));
  return 0;
}

// `roformer train`: the trainer's options, with the defaults of a 4-layer, 256-wide character-level
// causal LM that trains in about 5 minutes on 2 cores.
void add_train_command(CLI::App& app, CommandTable& commands, const std::shared_ptr<ModelCommandOptions>& o) {
  train::TrainOptions& t = o->train;
  t.model.num_hidden_layers = 4;
  t.model.hidden_size = 256;
  t.model.num_attention_heads = 4;
  t.model.intermediate_size = 1024;
  t.model.max_position_embeddings = 512;
  t.batch = 16;
  t.seq = 128;
  t.steps = 600;
  t.schedule.peak_lr = 2e-3;
  t.schedule.min_lr = 1e-4;
  t.schedule.warmup_steps = 50;


  CLI::App* tr = app.add_subcommand("train", "Train a RoFormer causal or masked LM on a text file");
  tr->add_option("--data", t.data, "UTF-8 text file (the last --val-fraction is validation)");
  tr->add_option("--out", t.out, "Run directory: checkpoints, metrics.jsonl/csv, curves.png")->capture_default_str();
  tr->add_flag("--resume", o->resume, "Continue the run in --out from its latest checkpoint (options come from it)");
  add_enum_option(tr, "--task", t.task, train::parse_lm_objective, train::lm_objective_name,
                  "clm (causal LM) or mlm (masked LM)");
  add_enum_option(tr, "--tokenizer", t.tokenizer, text::parse_tokenizer_kind, text::tokenizer_kind_name,
                  "char, byte or wordpiece (with --vocab)");
  tr->add_option("--vocab", t.vocab, "WordPiece: vocab.txt or a tokenizer directory (roformer vocab --out-dir)");
  tr->add_flag("--whole-word-mask", t.whole_word_mask, "MLM, WordPiece: mask whole words (all pieces of a selected word)");
  tr->add_option("--init-from", t.init_from,
                 "Continue pre-training a Hugging Face RoFormer directory (its architecture, weights and tokenizer)");
  tr->add_option("--max-vocab", t.max_vocab, "Char level: keep the most frequent characters (0: all)")->check(CLI::NonNegativeNumber);
  tr->add_option("--position", o->position, "rope, sinusoidal, learned or none")
      ->check(CLI::IsMember({"rope", "sinusoidal", "learned", "none"}))->capture_default_str();
  tr->add_option("--rope-theta", t.model.rope_theta, "RoPE base")->capture_default_str();
  tr->add_option("--attention", o->attention,
                 "softmax; linear (elu+1) or performer (FAVOR+), with RoPE on the feature maps (paper eq. 19)")
      ->check(CLI::IsMember({"softmax", "linear", "performer"}))->capture_default_str();
  tr->add_option("--performer-features", t.model.performer_features, "FAVOR+ random features per head (even)")
      ->capture_default_str();
  tr->add_option("--layers", t.model.num_hidden_layers, "Blocks")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--hidden", t.model.hidden_size, "Hidden size")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--embedding-size", o->embedding_size, "Embedding size (default: hidden; else projected)");
  tr->add_option("--heads", t.model.num_attention_heads, "Attention heads")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--ff", t.model.intermediate_size, "Feed-forward size")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--max-positions", t.model.max_position_embeddings, "max_position_embeddings")
      ->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--dropout", o->dropout, "Hidden dropout")->check(CLI::Range(0.0, 0.99))->capture_default_str();
  tr->add_option("--attention-dropout", o->attention_dropout, "Attention-probability dropout (default: --dropout)");
  tr->add_option("--batch", t.batch, "Sequences per step, over all processes")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--seq", t.seq, "Tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--steps", t.steps, "Optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--lr", t.schedule.peak_lr, "Peak learning rate")->capture_default_str();
  tr->add_option("--min-lr", t.schedule.min_lr, "Final learning rate (linear/cosine)")->capture_default_str();
  tr->add_option("--warmup", t.schedule.warmup_steps, "Linear warmup steps")->capture_default_str();
  tr->add_option("--decay", o->decay, "constant, linear, cosine or inverse_sqrt")->capture_default_str();
  tr->add_option("--weight-decay", t.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  tr->add_option("--clip", t.clip, "Global gradient-norm clip (0: off)")->capture_default_str();
  tr->add_option("--seed", t.seed, "Seed of initialisation, data order, masks and dropout")->capture_default_str();
  tr->add_option("--eval-batches", t.eval_batches, "Validation batches")->check(CLI::PositiveNumber)->capture_default_str();
  tr->add_option("--val-fraction", t.val_fraction, "Validation share of the file")->check(CLI::Range(0.0, 0.9))->capture_default_str();
  tr->add_option("--mask-prob", t.mask_prob, "MLM: share of tokens selected")->capture_default_str();
  tr->add_option("--sample-tokens", t.sample_tokens, "Tokens generated at the end (causal LM)")->capture_default_str();
  tr->add_option("--sample-prompt", t.sample_prompt, "Prompt of the final sample");
  tr->add_option("--temperature", t.temperature, "Sampling temperature")->capture_default_str();
  tr->add_option("--top-k", t.top_k, "Sampling top-k (0: all)")->capture_default_str();
  add_loop_options(tr, t.loop, "the validation loss");
  tr->add_flag("--no-progress", o->no_progress, "No live progress line (log lines instead)");
  tr->callback([tr, o] {
    if (o->resume) refuse_options_on_resume(tr, {"--steps"});  // --resume --steps N extends the run
    o->train_steps_given = tr->get_option("--steps")->count() > 0;
    if (!o->resume && o->train.data.empty()) throw CLI::RequiredError("--data");
  });
  commands.add(tr, [o] { return run_train(*o); });
}

// `roformer eval`: validation loss of a checkpoint, or (--lengths) perplexity by window length.
void add_eval_command(CLI::App& app, CommandTable& commands, const std::shared_ptr<ModelCommandOptions>& o) {
  CLI::App* ev = app.add_subcommand("eval", "Validation loss and perplexity of a checkpoint");
  ev->add_option("--model", o->model_dir, "Checkpoint directory (e.g. runs/x/step-001000)")->transform(model_location())->required();
  ev->add_option("--data", o->data, "Text file; its last --val-fraction is evaluated")->required();
  // Defaults: a `roformer train` checkpoint's own (its --batch, --seq, --eval-batches, --val-fraction, --seed).
  auto set = [o](bool* flag) { return [o, flag](const std::string&) { *flag = true; }; };
  ev->add_option("--batch", o->batch, "Sequences per batch (default: the checkpoint's training batch, else 16)")
      ->check(CLI::PositiveNumber)->each(set(&o->eval_set.batch));
  ev->add_option("--seq", o->seq, "Tokens per sequence (default: the checkpoint's, else 128)")
      ->check(CLI::PositiveNumber)->each(set(&o->eval_set.seq));
  ev->add_option("--max-batches", o->max_batches, "Batches (default: the checkpoint's --eval-batches, else 50)")
      ->check(CLI::PositiveNumber)->each(set(&o->eval_set.max_batches));
  ev->add_option("--val-fraction", o->val_fraction, "Validation share (default: the checkpoint's, else 0.05)")
      ->check(CLI::Range(0.0, 0.9))->each(set(&o->eval_set.val_fraction));
  ev->add_option("--seed", o->seed, "MLM masking seed (default: the checkpoint's, else 1)")->each(set(&o->eval_set.seed));
  o->extrapolation.lengths.clear();
  ev->add_option("--lengths", o->extrapolation.lengths,
                 "Length extrapolation: window lengths to evaluate (e.g. 256,512,1024), one table row per --rope-scaling")
      ->delimiter(',')->check(CLI::Range(int64_t{1}, train::kMaxExtrapolationLength));
  ev->add_option("--rope-scaling", o->extrapolation.methods,
                 "With --lengths: none, linear, ntk, dynamic-ntk, yarn, llama3 (scaled to each window)")
      ->delimiter(',')->capture_default_str();
  ev->add_option("--train-length", o->extrapolation.train_length, "With --lengths: the trained length (default: from the checkpoint)");
  ev->add_option("--tokens", o->extrapolation.tokens, "With --lengths: targets per cell")->check(CLI::PositiveNumber)->capture_default_str();
  ev->add_option("--png", o->extrapolation.png, "With --lengths: write the perplexity plot");
  ev->add_option("--csv", o->extrapolation.csv, "With --lengths: write the perplexity table");
  add_linear_options(ev, o->linears);
  commands.add(ev, [o] { return run_eval(*o); });
}

// `roformer generate`: sampling, greedy or beam search (model::decode).
void add_generate_command(CLI::App& app, CommandTable& commands, const std::shared_ptr<ModelCommandOptions>& o) {
  CLI::App* gen = app.add_subcommand("generate", "Continue text with a causal-LM checkpoint: sampling, greedy or beam search");
  gen->add_option("--model", o->model_dir, "Checkpoint directory")->transform(model_location())->required();
  gen->add_option("--prompt", o->prompt, "Text to continue");
  gen->add_option("--tokens", o->tokens, "Tokens to generate (fewer, with a note, where the context ends)")->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI::Option* temperature = gen->add_option("--temperature", o->temperature, "Sampling temperature (0: greedy)")
                                 ->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI::Option* top_k = gen->add_option("--top-k", o->top_k, "Sampling: the k most probable tokens (0: all)")
                           ->check(CLI::NonNegativeNumber)->capture_default_str();
  CLI::Option* top_p = gen->add_option("--top-p", o->top_p, "Sampling: the most probable tokens of this much mass (1: all)")
                           ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  gen->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
  gen->add_option("--beam", o->beam, "Beam search with this many beams (1: sampling or greedy)")
      ->check(CLI::Range(int64_t{1}, model::kMaxBeamSize))->capture_default_str();
  gen->add_option("--length-penalty", o->length_penalty, "Beam search: exponent of the length normalisation")
      ->check(CLI::Range(-100.0, 100.0))->capture_default_str();
  gen->add_option("--no-repeat-ngram-size", o->no_repeat_ngram, "No n-gram of this size twice, prompt included (0: off)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  gen->callback([o, temperature, top_k, top_p] {
    if (o->beam > 1 && (temperature->count() + top_k->count() + top_p->count()) > 0) {
      throw CLI::ValidationError("--beam", "beam search is deterministic: --temperature, --top-k and --top-p are for --beam 1");
    }
    if (o->top_p <= 0) throw CLI::ValidationError("--top-p", "must be in (0, 1]");
  });
  add_linear_options(gen, o->linears);
  add_kv_cache_option(gen, o->linears);
  commands.add(gen, [o] { return run_generate(*o); });
}

}  // namespace

void refuse_options_on_resume(const CLI::App* command, const std::vector<std::string>& also_allowed) {
  for (const CLI::Option* option : command->get_options()) {
    const std::string name = option->get_name();
    if (option->count() == 0 || name == "--resume" || name == "--out" || name == "--no-progress" || name == "--help" ||
        std::find(also_allowed.begin(), also_allowed.end(), name) != also_allowed.end()) {
      continue;
    }
    throw CLI::ValidationError(name, "--resume continues the run with the options saved in its checkpoint; " + name +
                                         " cannot change them (start a new run in another --out instead)");
  }
}

void add_loop_options(CLI::App* command, train::LoopSettings& loop, const std::string& patience_metric) {
  command->add_option("--eval-every", loop.eval_every, "Steps between evaluations (0: at each epoch's end, or "
                      "only the last step where the data has no epochs); the last step is always evaluated")
      ->capture_default_str();
  command->add_option("--save-every", loop.save_every, "A checkpoint every this many steps (0: none), besides those "
                      "at the last step, on a stop and (finetune, translate-train) at each evaluation")
      ->capture_default_str();
  command->add_option("--keep-checkpoints", loop.keep_checkpoints, "Step checkpoints kept, the newest")->capture_default_str();
  command->add_option("--patience", loop.patience, "Stop after this many evaluations without a better " +
                      patience_metric + " (0: never)")->capture_default_str();
  command->add_option("--threads", loop.threads, "OpenMP threads per process (0: all cores)")->check(roformer::thread_count());
  add_precision_option(command, loop.precision);
  command->add_option("--grad-accum", loop.grad_accum, "Micro-batches each process splits its rows into (same result, "
                      "less memory)")->check(CLI::PositiveNumber)->capture_default_str();
  command->add_option("--bucket-mb", loop.bucket_mb, "Data-parallel gradient buckets in MiB, reduced during the backward "
                      "(0: one allreduce after it)")->check(CLI::Range(0.0, 65536.0))->capture_default_str();
  command->add_flag("--zero1", loop.zero1, "Data-parallel: each process keeps 1/N of the AdamW moments (ZeRO-1)");
  command->add_flag("--gradient-checkpointing", loop.gradient_checkpointing, "Keep each layer's input only and "
                    "recompute the rest in the backward: the same gradients, activation memory about 1/10 at "
                    "long lengths, a step about a third slower");
}

void add_precision_option(CLI::App* command, train::TrainPrecision& precision) {
  add_enum_option(command, "--precision", precision, train::parse_train_precision, train::train_precision_name,
                  "The training products: fp32, bf16 (mixed precision: bf16 operands, fp32 accumulation, fp32 "
                  "master weights; CPUs with AVX512-BF16 or AMX) or auto (bf16 where the CPU has it)");
}

CLI::Option* add_off_flag(CLI::App* command, const std::string& name, bool& value, const std::string& description) {
  return command->add_flag_callback(name, [&value] { value = false; }, description);
}

void add_model_commands(CLI::App& app, CommandTable& commands) {
  auto o = std::make_shared<ModelCommandOptions>();
  add_train_command(app, commands, o);
  add_eval_command(app, commands, o);
  add_generate_command(app, commands, o);
}

}  // namespace roformer
