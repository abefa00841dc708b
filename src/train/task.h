// What a Trainer optimises: a Task owns its data (the training batch of each step, the fixed
// validation batches), its loss, the gradient it seeds the model's backward with, and its metrics.
// The Trainer (trainer.h) owns everything else: the optimiser, the schedule, clipping, the dropout
// streams. Causal and masked language modelling are the first tasks (lm_task.h); the interface
// assumes nothing about the shape of the targets, so classification (one label per row) and
// sequence-to-sequence fit behind it.
//
// Loss normalisation. A task's loss is a sum of per-target losses divided by a normaliser that the
// caller passes in, not by the batch's own count: the Trainer passes loss_count(batch), and a
// data-parallel trainer will pass the count summed over every process, so that the processes'
// gradients add up to the gradient of the global mean.
//
// Randomness. Everything random in a batch is a pure function of (seed, step, global row): a batch
// split into shards (Batch::row0) draws exactly what the whole batch draws.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/roformer.h"
#include "train/comm.h"

namespace train {

using Model = model::RoFormer<float>;
using Trainable = model::Trainable<float>;  // what the Trainer optimises: a RoFormer or a Seq2Seq

// The RoFormer a task over RoFormer models was given; std::logic_error for another kind of model.
Model& roformer_of(Trainable& m);

// Seeds of the independent random streams of a run: stream_seed(seed, purpose, index), e.g. the
// dropout masks of step s are stream_seed(seed, kDropoutStream, s).
uint64_t stream_seed(uint64_t seed, uint64_t purpose, int64_t index);
constexpr uint64_t kDropoutStream = 0xd0d0, kMaskStream = 0x3a5c, kEvalMaskStream = 0xe7a1, kSampleStream = 0x5a3e;

// One batch of a task: the model's inputs and the task's targets.
struct Batch {
  int64_t B = 0, T = 0;  // rows, and tokens per row of the model input
  int64_t row0 = 0;      // global index of row 0 of this batch (a shard of a larger batch), for per-row streams
  std::vector<int64_t> ids;                          // (B, T)
  std::vector<int64_t> token_types, attention_mask;  // (B, T), or empty: all type 0 / all real
  // The targets, in the task's own shape: (B, T) token ids for a language model, (B) labels for a
  // classifier, ... Entries equal to model::kIgnoreIndex are not counted.
  std::vector<int64_t> targets;
  std::vector<float> values;  // real-valued targets, e.g. (B, labels): regression scores, multi-label 0/1
  // A sequence-to-sequence batch's source side (then ids are the decoder's input): (B, S) each.
  int64_t S = 0;
  std::vector<int64_t> source, source_mask;

  model::Inputs inputs() const;  // the model's view, without targets (the task owns the loss)
  // Rows [r0, r1) as a batch of their own (row0 + r0 its global first row). Every per-row field,
  // whatever its width, is cut the same way.
  Batch rows(int64_t r0, int64_t r1) const;
  int64_t tokens() const { return B * (T + S); }  // input tokens processed (both sides of a seq2seq batch)
};

// The loss of one batch under a given normaliser.
struct LossStats {
  double loss = 0;                  // Σ per-target loss / normaliser (0 when nothing counts)
  int64_t count = 0;                // targets counted in the sum: loss_count(batch)
  std::vector<double> metric_sums;  // evaluate() only: per metric_names() entry, summed over counted targets
};

// Validation results: loss and metrics averaged over every counted target of the validation set.
struct EvalStats {
  double loss = 0;               // NaN when nothing counts
  int64_t count = 0;             // targets counted
  std::vector<double> metrics;   // per metric_names() entry
};

class Task {
 public:
  virtual ~Task() = default;

  // A short name for logs and plots ("clm", "mlm", ...).
  virtual std::string name() const = 0;
  // The training batch of optimiser step `step`: a pure function of the task's seed and step, so a
  // resumed run sees exactly the batches of an uninterrupted one.
  virtual Batch train_batch(int64_t step) = 0;
  // The fixed validation set: the same batches on every call.
  virtual const std::vector<Batch>& validation_batches() = 0;
  // The number of targets of `batch` that its loss counts (tokens for a language model, examples for
  // a classifier): this process's share of the normaliser.
  virtual int64_t loss_count(const Batch& batch) const = 0;

  // Training forward (dropout on, masks from dropout_seed) and loss Σ/normaliser; when the loss is
  // finite, also the backward: adds d(loss)/d(params) to m.grads (the caller zeroes them). A
  // non-finite loss leaves the gradients alone.
  virtual LossStats loss_and_grad(Trainable& m, const Batch& batch, uint64_t dropout_seed, int64_t normaliser) = 0;
  // Inference forward (no dropout), loss Σ/normaliser and the metric sums; no gradients.
  virtual LossStats evaluate(Trainable& m, const Batch& batch, int64_t normaliser) = 0;
  // The metrics evaluate() reports besides the loss (e.g. "accuracy"); their sums come in
  // LossStats::metric_sums in this order.
  virtual std::vector<std::string> metric_names() const { return {}; }
};

// The validation loss and metrics of m on task.validation_batches(): each batch evaluated under its
// own count, weighted by it (the mean over all counted targets). With a group of N, rank r evaluates
// batches r, r + N, ... and the sums are reduced: every rank gets the result.
EvalStats evaluate(Task& task, Trainable& m, Communicator* comm = nullptr);

}  // namespace train
