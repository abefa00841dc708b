// The fine-tuning task of a model with a task head (model/head.h): sequence classification and
// regression (one target per example) and token classification (one target per token, -100 where
// nothing counts). The loss is the head's own (HeadDef::loss, e.g. HF's problem_type losses for
// sequence classification), Σ per-target loss / normaliser: with the batch's own count (examples, or
// counted tokens) it is HF's mean.
//
// Batches. Examples are token sequences of different lengths. An epoch visits every example once in
// an order drawn from (seed, epoch); as HF's group_by_length, the order is cut into mega-batches of
// 50 batches whose examples are sorted by length, longest first, so a batch holds similar lengths and
// is padded only to its own longest row (dynamic padding). train_batch(step) is a pure function of
// (seed, step): step s is batch s mod steps_per_epoch() of epoch s div steps_per_epoch().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "train/task.h"

namespace train {

// One tokenised example: ids and token types of [CLS] A [SEP] (B [SEP]), and its target: a class id
// (single-label) or values (labels of them: a regression score, or multi-label 0/1).
struct TokenizedExample {
  std::vector<int64_t> ids, types;
  int64_t label = -1;
  std::vector<float> values;
  std::vector<int64_t> targets;  // token classification: one per token (HeadDef::targets); QA: start, end; else empty
};

// A base::Error "where: token id N is outside the model's vocabulary of V" for the first id of `ids`
// outside [0, vocab_size): a vocabulary larger than the model's embeddings, or a tokenizer without
// the special token an encoding needs (id -1).
void check_token_ids(const std::vector<int64_t>& ids, int64_t vocab_size, const std::string& where);

struct ClassifyTaskConfig {
  model::ProblemType problem_type = model::ProblemType::single_label_classification;
  int64_t labels = 2;
  int64_t batch = 32;
  int64_t pad_id = 0;
  uint64_t seed = 42;  // the epoch orders
  bool per_token = false;  // token classification: (B, T) targets, padding -100
  // Multiple choice: each example is `group` consecutive rows of the example list (one per choice, the
  // label on the first) and a batch of n examples has n · group model rows with n targets.
  int64_t group = 1;
  bool span = false;  // extractive QA: each row's targets are its answer's start and end token, (B, 2)
};

// A batch of the examples `indices` (example i is rows i·group ... i·group + group − 1 of `examples`),
// padded to its longest row, rows starting at global row row0; with c.labels 0 the batch has inputs
// only (unlabelled examples to predict).
Batch classification_batch(const std::vector<TokenizedExample>& examples, const std::vector<int64_t>& indices,
                           const ClassifyTaskConfig& c, int64_t row0);

class ClassifyTask : public Task {
 public:
  // Both sets are copied; validation batches keep the file order (batches of c.batch).
  ClassifyTask(std::vector<TokenizedExample> train, std::vector<TokenizedExample> validation,
               const ClassifyTaskConfig& c);

  std::string name() const override { return "classify"; }
  Batch train_batch(int64_t step) override;
  const std::vector<Batch>& validation_batches() override { return val_; }
  int64_t loss_count(const Batch& batch) const override;
  LossStats loss_and_grad(Trainable& m, const Batch& batch, uint64_t dropout_seed, int64_t normaliser) override;
  LossStats evaluate(Trainable& m, const Batch& batch, int64_t normaliser) override;
  std::vector<std::string> metric_names() const override;

  int64_t steps_per_epoch() const;
  int64_t examples() const { return static_cast<int64_t>(train_.size()) / c_.group; }
  // The examples of epoch `epoch` in batch order.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

 private:
  // Loss Σ/normaliser of the model's last head_logits against the batch; d_logits_ gets its gradient.
  LossStats loss(const Model& m, const Batch& batch, int64_t normaliser, bool with_grad);
  // Single-label sequence classification: evaluate() counts the right argmaxes.
  bool counts_accuracy() const {
    return !c_.per_token && !c_.span && c_.group == 1 && c_.problem_type == model::ProblemType::single_label_classification;
  }
  std::vector<TokenizedExample> train_;
  ClassifyTaskConfig c_;
  std::vector<Batch> val_;
  std::vector<float> d_logits_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> cached_order_;
};

}  // namespace train
