// The trainer behind `roformer train`. Trainer is the step API: one optimiser step of a Task
// (task.h) with AdamW, an LR schedule and gradient clipping, and evaluation on the task's validation
// set. run_training is the pre-training recipe for a RoFormer masked LM or causal LM on a text
// corpus, around the one training loop (run_loop.h: periodic validation, checkpoints, the metrics
// log, the report hook, the progress line), with a generated sample at the end. Everything
// random is a pure function of (seed, step, global row): the data windows, the MLM masks and the
// dropout masks; so a run resumed from a checkpoint reproduces the uninterrupted run's losses bit
// for bit (same thread count). SIGINT/SIGTERM save a checkpoint and stop; a non-finite loss or
// gradient stops the run and keeps the last good checkpoint.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/corpus.h"
#include "model/config.h"
#include "model/roformer.h"
#include "text/tokenizer.h"
#include "train/comm.h"
#include "train/lm_task.h"
#include "train/loop_settings.h"
#include "train/optim.h"
#include "train/run_log.h"
#include "train/task.h"

namespace train {

struct TrainOptions {
  std::string data;                 // UTF-8 text file
  std::string out = "runs/default"; // run directory
  LmObjective task = LmObjective::clm;  // causal LM, or masked LM (BERT 80/10/10)
  text::TokenizerKind tokenizer = text::TokenizerKind::character;  // char, byte or wordpiece (needs vocab, or init_from)
  int64_t max_vocab = 0;            // char level: keep the most frequent (0: all)
  std::string vocab;                // wordpiece: a vocab.txt or a tokenizer directory (roformer vocab --out-dir)
  bool whole_word_mask = false;     // MLM: select whole words (wordpiece)
  std::string init_from;            // start from this HF RoFormer directory: its config, weights and tokenizer
  model::RoFormerConfig model;      // sizes, position encoding, dropout; vocab_size and is_decoder are set from the data and task
  int64_t batch = 16, seq = 128, steps = 1000;
  Schedule schedule;                // total_steps is set to steps
  AdamWConfig adamw;
  double clip = 1.0;                // global gradient-norm clip (0: off)
  uint64_t seed = 1337;
  int64_t eval_batches = 20;
  // Evaluations, checkpoints, early stopping (on the validation loss), threads, precision, data-parallel.
  LoopSettings loop = {.eval_every = 100, .save_every = 250};
  double val_fraction = 0.05, mask_prob = 0.15;
  int64_t sample_tokens = 300;      // generated at the end (causal LM); 0: none
  std::string sample_prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 40;
  bool progress = true;             // the live progress line (on a terminal)

  std::string to_json() const;  // everything but `out` and `progress`, which belong to the invocation
  static TrainOptions from_json(const std::string& text);
  void validate() const;            // std::invalid_argument naming the option
  void validate_text() const;       // the tokenizer options alone (checked before anything is read)
};

// Refuses (base::Error "<what> needs N GiB, more than this machine's M GiB") a batch whose language-model
// activations cannot fit in this machine's memory, before anything is allocated and before rows × seq is
// formed in integers: `rows` sequences of `seq` tokens through `config` (per token and layer the block's
// hidden- and intermediate-wide tensors, and the logits; `backward`: kept for it; `probabilities`:
// each head's attention probabilities kept too, model::Keep::all). A lower bound of what a step
// needs: it catches sizes that cannot be meant, not tight ones. (Validation batches are bounded by
// the data, not by --eval-batches / --max-batches.) (evaluate_checkpoint needs none: its batches hold
// at most the validation windows there are.)
// With gradient_checkpointing only one layer's tensors are kept beside every layer's hidden-wide input.
void check_batch_fits_in_memory(const model::RoFormerConfig& config, double rows, int64_t seq, bool backward,
                                const std::string& what, bool probabilities = false,
                                bool gradient_checkpointing = false);

// What one optimiser step did.
struct StepStats {
  double loss = NAN;       // the task's loss: Σ per-target loss / normaliser
  double grad_norm = NAN;  // global gradient norm before clipping (NaN when the loss was not finite)
  double lr = 0;           // the learning rate of the step
  int64_t counted = 0;     // targets of this batch counted in the loss (the task's loss_count)
  int64_t tokens = 0;      // input tokens processed
  double comm_wait_s = 0;  // time spent summing gradients that the backward did not hide
  // False: the loss or the gradient is NaN/inf, and the parameters were left unchanged.
  bool finite() const { return std::isfinite(loss) && std::isfinite(grad_norm); }
};

struct TrainerConfig {
  Schedule schedule;
  AdamWConfig adamw;
  double clip = 1.0;   // global gradient-norm clip (0: off)
  uint64_t seed = 1337;  // dropout masks of step s: stream_seed(seed, kDropoutStream, s)
  int64_t grad_accum = 1;  // micro-batches each rank splits its rows into (same result, less memory)
  Communicator* comm = nullptr;  // the data-parallel group (null: world())
  // Gradients are summed in buckets of about this many MiB, each started as soon as the backward
  // has finished its layers (0: one allreduce after the backward).
  double bucket_mb = 4;
  // ZeRO-1: each rank keeps and updates only its 1/N of the AdamW moments (a contiguous range of the
  // arena), then every rank broadcasts its updated parameters. Same results, bit for bit.
  bool zero1 = false;
};

// Optimises a model on a task, data-parallel over a communicator (comm.h). The model and the task
// must outlive the trainer.
//
// Data parallelism. Every rank builds the same global batch (it is a pure function of the seed and
// the step) and takes a contiguous share of its rows, rank r rows [B·r/N, B·(r+1)/N), split further
// into grad_accum micro-batches. Each micro-batch's loss is normalised by the global batch's count,
// so the ranks' summed gradients are the gradient of the global mean; the data, masks and dropout
// a row sees are keyed by its global row, so they do not depend on N or grad_accum. Gradients are
// summed over the ranks in buckets of consecutive layers, each started (non-blocking) as soon as the
// last micro-batch's backward has finished those layers, so that communication overlaps the rest of
// the backward; every rank then clips and steps identically.
class Trainer {
 public:
  Trainer(Trainable& m, Task& task, const TrainerConfig& c);

  // Optimiser step `step` (0-based) on task.train_batch(step), the loss normalised by its count.
  StepStats step(int64_t step);
  // Optimiser step `step` on a given global batch, the loss normalised by `normaliser`: zero the
  // gradients, the task's loss_and_grad over this rank's micro-batches, the allreduce, clip, AdamW at
  // the schedule's rate. StepStats hold the global loss and count. A non-finite loss or gradient norm
  // skips the update (on every rank: both are reduced first).
  StepStats step(const Batch& batch, int64_t step, int64_t normaliser);
  // The validation loss and metrics on the task's validation batches, each rank evaluating every
  // N-th batch (train::evaluate).
  EvalStats evaluate();
  Communicator& comm() { return comm_; }

  AdamW& optimizer() { return opt_; }  // this rank's (with ZeRO-1, a shard)
  bool sharded() const { return shards_.size() > 1; }
  // The whole model's optimiser state, for a checkpoint: optimizer(), or with ZeRO-1 every rank's
  // shard gathered (a collective: every rank calls it; kept until the next step).
  const AdamW& gather_optimizer();
  // Takes a whole-model optimiser state (make_adamw + load_optimizer): with ZeRO-1 this rank's shard.
  void set_optimizer(const AdamW& whole);
  Trainable& model() { return m_; }
  Task& task() { return task_; }

 private:
  Trainable& m_;
  Task& task_;
  TrainerConfig c_;
  void start_buckets(int64_t ready_from);  // starts every bucket lying at or above ready_from

  Communicator& comm_;
  std::vector<std::pair<int64_t, int64_t>> shards_;   // ZeRO-1: rank r's [begin, end) of the arena
  AdamW opt_;
  std::vector<std::pair<int64_t, int64_t>> buckets_;  // [begin, end) of the arena, in reduction order
  size_t started_ = 0;                                // buckets started this step
  std::unique_ptr<AdamW> gathered_;                   // gather_optimizer()'s result
};

struct TrainResult : LoopResult {
  double unigram_baseline = 0;
};

// Runs (or with resume, continues: options then come from the run directory) a training run.
// on_report (optional) is called after each metrics.csv write (run_log.h), with the unigram
// baseline. With resume and `extend`, opts.steps replaces the run's step count: more steps extend a
// finished (or running) run, the learning-rate schedule stretched to the new total from the current
// step on. A resumed run that has already reached its step count says so and returns at once.
// Throws io::Error / std::invalid_argument on bad data, options or checkpoints.
TrainResult run_training(TrainOptions opts, bool resume, const ReportHook& on_report = {}, bool extend = false);

// The LM task settings of a run's options (causal for LmObjective::clm).
LmTaskConfig lm_task_config(const TrainOptions& o, int64_t vocab_size, const text::Tokenizer& tok);

// Mean loss (nats/token) of m over fixed batches, weighted by counted targets, for o.task (MLM masks
// drawn from o.seed per batch index, LmTask); *tokens (optional) gets the number of counted targets.
double validation_loss(model::RoFormer<float>& m, const std::vector<data::Batch>& val, const TrainOptions& o,
                       const text::Tokenizer& tok, int64_t* tokens = nullptr);

// Validation loss (nats/token) and the number of tokens it averages, of a model checkpoint on a
// corpus's validation split, its linear layers as `linears` asks: `roformer eval`.
struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;
  double unigram_baseline = 0;
};
// The options `roformer train` stored in a checkpoint it wrote (optimizer.safetensors), or nullopt for
// a directory that holds none (a model from elsewhere, a fine-tuning run's).
std::optional<TrainOptions> checkpoint_train_options(const std::string& checkpoint_dir);
EvalResult evaluate_checkpoint(const std::string& checkpoint_dir, const std::string& data, int64_t batch,
                               int64_t seq, int64_t max_batches, double val_fraction, uint64_t seed,
                               const model::LinearOptions& linears = {});

}  // namespace train
