// Language-modelling tasks: one target token per input position, scored by softmax cross-entropy
// over the vocabulary (ops/loss.h). TokenTask holds the loss, its gradient and the accuracy metric;
// LmTask adds the data: windows of a text corpus, as a causal LM (next-token targets) or a masked
// LM (BERT 80/10/10 corruption, data/mlm.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/mlm.h"
#include "text/char_tokenizer.h"
#include "train/task.h"

namespace train {

// A task whose targets are (B, T) token ids, one per input position (model::kIgnoreIndex: not
// counted). The loss is Σ −log softmax(logits)[target] / normaliser; its metric is "accuracy", the
// fraction of counted targets that are the argmax of their logits.
class TokenTask : public Task {
 public:
  int64_t loss_count(const Batch& batch) const override;
  LossStats loss_and_grad(Trainable& m, const Batch& batch, uint64_t dropout_seed, int64_t normaliser) override;
  LossStats evaluate(Trainable& m, const Batch& batch, int64_t normaliser) override;
  std::vector<std::string> metric_names() const override { return {"accuracy"}; }

 private:
  // Cross-entropy of the last forward's logits: softmax kept in probs_, loss Σ/normaliser.
  LossStats loss(const Model& m, const Batch& batch, int64_t normaliser);
  std::vector<float> probs_, d_logits_;  // (B·T, V)
};

// What a language model learns: clm (causal LM: next-token targets) or mlm (masked LM, BERT 80/10/10),
// as `roformer train --task` and the saved training options name them; the parser throws
// std::invalid_argument naming the ones there are.
enum class LmObjective { clm, mlm };
const char* lm_objective_name(LmObjective o);
LmObjective parse_lm_objective(const std::string& name);

struct LmTaskConfig {
  bool causal = true;        // false: masked LM
  uint64_t seed = 1337;      // masks: stream_seed(seed, kMaskStream, step) / (seed, kEvalMaskStream, batch index)
  int64_t batch = 16, seq = 128;
  double mask_prob = 0.15;
  int64_t vocab_size = 0;
  // The vocabulary's [MASK] and the ids never selected for masking ([PAD], [CLS], ...): by default the
  // char/byte tokenizers' five specials, ids 0-4; an HF vocabulary gives its own.
  int64_t mask_token_id = text::CharTokenizer::kMask;
  std::vector<int32_t> special_ids = {0, 1, 2, 3, 4};
  bool whole_word_mask = false;  // select words as a whole (needs windows with word starts)
};

// BERT masking of the rows of a (B, T) batch whose row 0 is global row row0: row r draws counters
// [(row0 + r)·T, (row0 + r + 1)·T) of the streams of seed (data::mlm_mask), so its mask depends on
// (seed, global row) only: a batch masked whole equals its shards masked with their row0. ids are
// corrupted in place, targets (B, T) get the original ids at selected positions and kIgnoreIndex
// elsewhere; c.special_ids are never selected. word_start (B, T) (or null) selects whole words.
void mask_rows(int64_t* ids, int64_t* targets, int64_t B, int64_t T, int64_t row0, const LmTaskConfig& c,
               uint64_t seed, const uint8_t* word_start = nullptr);

// The batch of a corpus window batch (B, T+1) with rows starting at global row row0: inputs
// [:, :T]; targets the next tokens [:, 1:] (causal), or the BERT masking of the inputs drawn from
// mask_seed (masked; whole words when c.whole_word_mask, which needs windows.word_start).
Batch lm_batch(const data::Batch& windows, const LmTaskConfig& c, uint64_t mask_seed, int64_t row0 = 0);

class LmTask : public TokenTask {
 public:
  // Training batches from corpus (null: none, train_batch throws std::logic_error); validation
  // batches from val_windows, batch i masked with stream_seed(seed, kEvalMaskStream, i). The corpus
  // must outlive the task.
  LmTask(const data::WindowSource* corpus, const LmTaskConfig& c, const std::vector<data::Batch>& val_windows);

  std::string name() const override { return c_.causal ? "clm" : "mlm"; }
  Batch train_batch(int64_t step) override;
  const std::vector<Batch>& validation_batches() override { return val_; }

 private:
  const data::WindowSource* corpus_;
  LmTaskConfig c_;
  std::vector<Batch> val_;
};

}  // namespace train
