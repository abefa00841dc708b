// The training loop behind `roformer train`: a RoFormer masked LM or causal LM on a text corpus,
// with AdamW, an LR schedule, gradient clipping, periodic validation, checkpoints, a metrics log
// (metrics.jsonl, metrics.csv) and a loss-curve plot (loss.png), a progress line, and a generated
// sample at the end. Everything random is a pure function of (seed, step): the data windows, the
// MLM masks and the dropout masks; so a run resumed from a checkpoint reproduces the uninterrupted
// run's losses bit for bit (same thread count). SIGINT/SIGTERM save a checkpoint and stop; a
// non-finite loss or gradient stops the run and keeps the last good checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include "data/corpus.h"
#include "model/config.h"
#include "model/roformer.h"
#include "train/optim.h"

namespace train {

struct TrainOptions {
  std::string data;                 // UTF-8 text file
  std::string out = "runs/default"; // run directory
  std::string task = "clm";         // "clm" (causal LM) or "mlm" (masked LM, BERT 80/10/10)
  std::string tokenizer = "char";   // "char" or "byte"
  int64_t max_vocab = 0;            // char level: keep the most frequent (0: all)
  model::RoFormerConfig model;      // sizes, position encoding, dropout; vocab_size and is_decoder are set from the data and task
  int64_t batch = 16, seq = 128, steps = 1000;
  Schedule schedule;                // total_steps is set to steps
  AdamWConfig adamw;
  double clip = 1.0;                // global gradient-norm clip (0: off)
  uint64_t seed = 1337;
  int64_t eval_every = 100, eval_batches = 20, save_every = 250;
  double val_fraction = 0.05, mask_prob = 0.15;
  int64_t sample_tokens = 300;      // generated at the end (causal LM); 0: none
  std::string sample_prompt = "\n";
  double temperature = 0.8;
  int64_t top_k = 40;
  int threads = 0;                  // OpenMP threads (0: all cores)
  bool progress = true;             // the live progress line (on a terminal)

  std::string to_json() const;  // everything but `out` and `progress`, which belong to the invocation
  static TrainOptions from_json(const std::string& text);
  void validate() const;            // std::invalid_argument naming the option
};

struct TrainResult {
  int exit_code = 0;     // 0 done, 130 interrupted (checkpoint saved), 3 non-finite loss
  int64_t steps_done = 0;
  double train_loss = 0, val_loss = 0, unigram_baseline = 0;
  std::string checkpoint;  // the last checkpoint written
};

// Runs (or with resume, continues: options then come from the run directory) a training run.
// Throws io::Error / std::invalid_argument on bad data, options or checkpoints.
TrainResult run_training(TrainOptions opts, bool resume);

// Mean loss (nats/token) of m over fixed batches, weighted by counted targets, for o.task (MLM masks
// drawn from o.seed per batch index); *tokens (optional) gets the number of counted targets.
double validation_loss(model::RoFormer<float>& m, const std::vector<data::Batch>& val, const TrainOptions& o,
                       int64_t* tokens = nullptr);

// Validation loss (nats/token) and the number of tokens it averages, of a model checkpoint on a
// corpus's validation split: `roformer eval`.
struct EvalResult {
  double loss = 0;
  int64_t tokens = 0;
  double unigram_baseline = 0;
};
EvalResult evaluate_checkpoint(const std::string& checkpoint_dir, const std::string& data, int64_t batch,
                               int64_t seq, int64_t max_batches, double val_fraction, uint64_t seed);

}  // namespace train
