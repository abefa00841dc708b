// Subcommands of the roformer command line; each returns the process exit status.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/roformer.h"
#include "train/lm_task.h"
#include "train/loop_settings.h"

namespace CLI {
class App;
class Option;
}

namespace roformer {

struct RopeCheckOptions {
  int samples = 2000;   // positions sampled per band
  bool json = false;
};
int rope_check(const RopeCheckOptions& options);

struct BenchRopeOptions {
  bool json = false;
  double min_time = 0.2;   // seconds per benchmark
  int repetitions = 3;     // the fastest repetition is reported
  std::string filter;      // substring of the benchmark name
  bool quick = false;      // tiny shapes, for smoke tests
  std::string simd_target;  // e.g. AVX2: dispatch to no better Highway target (the CPU's best if empty)
};
int bench_rope(const BenchRopeOptions& options);

struct BenchTrainOptions {
  std::string preset = "small";  // small: 256 wide, 4 layers, 4 heads, ff 1024; large: 512, 6, 8, 2048;
                                 // base: 768, 12, 12, 3072 (RoFormer-base, with --vocab 50000)
  train::LmObjective task = train::LmObjective::clm;
  int64_t batch = 8, seq = 256, vocab = 256, steps = 20, warmup = 3;
  int threads = 0;
  bool sgemm = true;  // also measure this machine's sgemm rate
  double bucket_mb = 4;  // under mpirun: gradient buckets (0: one allreduce after the backward)
  std::string attention_memory = "auto";  // auto: what training does (model::Keep::backward); linear: row
                                          // statistics at any length; quadratic: the probabilities
  train::TrainPrecision precision = train::TrainPrecision::fp32;  // the training products (train::resolve_precision)
  double dropout = 0;  // hidden and attention dropout (0: as the PyTorch peer builds the model)
  bool gradient_checkpointing = false;  // model::Keep::inputs
  bool json = false;
};
int bench_train(const BenchTrainOptions& options);

struct BenchCommOptions {
  int64_t min_bytes = 4096, max_bytes = int64_t{64} << 20;  // sizes go up by 4×
  double min_time = 0.5;                                     // seconds per size
  bool json = false;
};
int bench_comm(const BenchCommOptions& options);

struct BenchInferOptions {
  std::string model;             // a Hugging Face RoFormer model directory
  std::string head = "none";     // none: last hidden state; mlm: + the MLM head's logits
  std::string keep = "outputs";  // outputs: inference mode; all: keep every activation (as for training)
  model::LinearOptions linears;  // --quantize, --gemm
  int64_t batch = 1, seq = 128, warmup = 2, min_reps = 5;
  double min_time = 3.0;         // seconds of timed forwards, at least min_reps of them
  int threads = 0;
  std::string simd_target;  // e.g. AVX2: our kernels dispatch to no better Highway target (the CPU's best if empty)
  bool json = false;
};
int bench_infer(const BenchInferOptions& options);

struct BenchGenerateOptions {
  std::string model;             // a causal LM directory (`roformer train`'s step-NNNNNN)
  model::LinearOptions linears;  // --quantize, --gemm, --kv-cache
  int64_t rows = 32, prompt = 40, tokens = 64, prefill_chunk = 256, rounds = 3;
  int threads = 0;
  bool json = false;
};
int bench_generate(const BenchGenerateOptions& options);

struct PlotRunsOptions {
  std::vector<std::string> runs, labels;  // run directories (with metrics.jsonl) and legend labels
  std::string metric = "val_loss";        // or "loss"
  std::string out = "runs.png", table, title = "validation loss";
  double baseline = 0;                    // a dashed reference line when > 0
};
int plot_runs(const PlotRunsOptions& options);

struct DecayOptions {
  int32_t dim = 128;
  std::vector<double> bases = {10000};
  std::vector<std::string> scaling;  // specs, e.g. "linear:4", "yarn:4:2048"; empty = none
  int64_t max_distance = 256;
  std::string png, csv;             // neither: print the CSV
  bool log_x = false;
};
int rope_decay(const DecayOptions& options);

struct BenchAttentionOptions {
  std::vector<int64_t> lengths = {512, 1024, 2048, 4096, 8192, 16384, 32768};
  int64_t heads = 4, head_dim = 64, performer_features = 64;
  int repetitions = 2, threads = 0;
  double max_softmax_gb = 4;  // skip softmax where its (H, T, T) probabilities need more (--max-softmax-gb)
  bool softmax_only = false;  // softmax attention alone: forward, and forward + backward from row statistics
  int64_t decode_rows = 0;    // > 0: decoding steps of this many rows over fp32 and bf16 caches (--decode)
  std::string mask = "causal";     // causal or full
  std::string precision = "fp32";  // softmax attention's products: fp32, or bf16 operands (fp32 accumulation)
  // --fused: the fp32 inference forward, the per-block products and softmax (attention_forward_blocks)
  // against the fused flash_attention_forward, Google Benchmark at each batch, length and thread count.
  bool fused = false;
  std::vector<int64_t> batches = {1, 8};
  std::vector<int> thread_counts = {1, 2};
  int64_t past = 0;         // --fused: keys already cached before the queries (Tk = past + T, causal offset)
  double min_time = 0.2;    // seconds per benchmark (--fused, --decode)
  std::string simd_target;  // e.g. AVX2: dispatch to no better Highway target (the CPU's best if empty)
};
int bench_attention(const BenchAttentionOptions& options);

struct BenchGemmOptions {
  std::vector<int64_t> rows = {128, 4096};  // M: batch 1 × 128 and batch 8 × 512 tokens
  int repetitions = 3, threads = 0;
  double min_time = 0.3;
};
int bench_gemm(const BenchGemmOptions& options);

// One way to register a subcommand: a command file adds its CLI11 subcommands (with their flags) to
// the app and, for each, the function that runs it to the table; main parses once and runs the one
// that was given.
class CommandTable {
 public:
  void add(CLI::App* command, std::function<int()> run) { commands_.emplace_back(command, std::move(run)); }
  // The exit status of the parsed command (-1: none of the table's was parsed).
  int run_parsed() const;  // main.cc

 private:
  std::vector<std::pair<CLI::App*, std::function<int()>>> commands_;
};

// The command files: what each adds.
void add_analysis_commands(CLI::App& app, CommandTable& commands);  // rope check, decay, plot runs
void add_bench_commands(CLI::App& app, CommandTable& commands);     // bench rope|train|comm|infer|generate|attention|gemm
void add_model_commands(CLI::App& app, CommandTable& commands);     // train, eval, generate
void add_vocab_command(CLI::App& app, CommandTable& commands);      // vocab (text/wordpiece_trainer.h)
void add_quantize_command(CLI::App& app, CommandTable& commands);   // quantize (an int8 copy of a model directory)
void add_bleu_command(CLI::App& app, CommandTable& commands);       // bleu (text/bleu.h)
void add_spm_commands(CLI::App& app, CommandTable& commands);       // spm-train, spm-encode, spm-decode
void add_translate_commands(CLI::App& app, CommandTable& commands); // translate-train, translate, average
void add_finetune_command(CLI::App& app, CommandTable& commands);   // finetune
void add_infer_commands(CLI::App& app, CommandTable& commands);     // tokenize, fill-mask, embed, similarity, classify, ner, qa, forward
void add_serve_command(CLI::App& app, CommandTable& commands);      // serve (the HTTP server, src/server)

// --quantize auto|none|int8|bf16 and --gemm auto|packed|blas (model::LinearOptions) for every command that
// runs a model.
void add_linear_options(CLI::App* command, model::LinearOptions& linears);
// --kv-cache fp32|bf16 (LinearOptions::kv_cache) for the commands that decode: generate, translate, serve.
void add_kv_cache_option(CLI::App* command, model::LinearOptions& linears);

// With --resume a training run continues with the options saved in its checkpoint: any other option
// given (besides --resume, --out, --no-progress and `also_allowed`) is refused by name, instead of
// being silently ignored. Call from the command's callback.
void refuse_options_on_resume(const CLI::App* command, const std::vector<std::string>& also_allowed = {});

// The options every training recipe (train, finetune, translate-train) shares, train::LoopSettings:
// --eval-every, --save-every, --keep-checkpoints, --patience, --threads, --precision, and the
// data-parallel --grad-accum, --bucket-mb, --zero1; the defaults shown are the settings' values (the
// recipe's). `patience_metric` says what --patience follows on this recipe.
void add_loop_options(CLI::App* command, train::LoopSettings& loop, const std::string& patience_metric);

// --precision fp32|bf16|auto (train::resolve_precision) for every training command and bench train.
void add_precision_option(CLI::App* command, train::TrainPrecision& precision);

// A flag that turns a setting off (--no-sgemm, --no-access-log): `value` becomes false when given. Not
// CLI11's "!--name" negation, which negates a value given to the flag as a number and overflows on
// --name=-9223372036854775808 (found by the CLI fuzzer); this flag's value is read as a plain bool.
CLI::Option* add_off_flag(CLI::App* command, const std::string& name, bool& value, const std::string& description);

}  // namespace roformer
