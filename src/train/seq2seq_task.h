// Sequence-to-sequence training (translation) for the encoder-decoder (model/seq2seq.h): teacher
// forcing with label-smoothed cross-entropy over the target tokens, in batches of about a fixed
// number of tokens.
//
// Batches (fairseq's --max-tokens). Pairs are sorted by (source length, target length) and cut into
// batches whose padded size rows · max(longest source, longest target) stays within max_tokens, so a
// batch holds similar lengths. The batch list is fixed; each epoch visits it in an order drawn from
// (seed, epoch). train_batch(step) is a pure function of (seed, step): batch
// order(step div n)[step mod n]. A batch row: source + eos (the encoder's input), decoder input
// decoder_start + target, targets target + eos (HF EncoderDecoderModel's shift_tokens_right).
// Padding: pad ids, mask 0, targets kIgnoreIndex.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/seq2seq.h"
#include "train/task.h"

namespace train {

// One tokenised sentence pair, without special tokens.
struct TokenizedPair {
  std::vector<int64_t> source, target;
};

struct Seq2SeqTaskConfig {
  int64_t max_tokens = 4096;     // padded tokens per batch, per side
  double label_smoothing = 0.1;  // ops::cross_entropy_forward's ε
  int64_t pad_id = 0, eos_id = 3, decoder_start_id = 2;
  uint64_t seed = 1;             // the epoch orders
};

// The batch of pairs[indices] (rows in that order, row 0 at global row row0).
Batch seq2seq_batch(const std::vector<TokenizedPair>& pairs, const std::vector<int64_t>& indices,
                    const Seq2SeqTaskConfig& c, int64_t row0);

// The length-sorted batches of pairs under c.max_tokens, as index lists (a pair longer than
// max_tokens on either side gets a batch of its own).
std::vector<std::vector<int64_t>> token_batches(const std::vector<TokenizedPair>& pairs, int64_t max_tokens);

using Seq2SeqModel = model::Seq2Seq<float>;

// The Seq2Seq a sequence-to-sequence task was given; std::logic_error for another kind of model.
Seq2SeqModel& seq2seq_of(Trainable& m);

class Seq2SeqTask : public Task {
 public:
  Seq2SeqTask(std::vector<TokenizedPair> train, const std::vector<TokenizedPair>& validation,
              const Seq2SeqTaskConfig& c);

  std::string name() const override { return "seq2seq"; }
  Batch train_batch(int64_t step) override;
  const std::vector<Batch>& validation_batches() override { return val_; }
  int64_t loss_count(const Batch& batch) const override;  // target tokens (eos included)
  LossStats loss_and_grad(Trainable& m, const Batch& batch, uint64_t dropout_seed, int64_t normaliser) override;
  // Metrics: "nll" (the unsmoothed loss, whose exp is the perplexity) and "accuracy" (of the argmax).
  LossStats evaluate(Trainable& m, const Batch& batch, int64_t normaliser) override;
  std::vector<std::string> metric_names() const override { return {"nll", "accuracy"}; }

  int64_t steps_per_epoch() const { return static_cast<int64_t>(batches_.size()); }

 private:
  LossStats loss(const Seq2SeqModel& m, const Batch& batch, int64_t normaliser, double smoothing);
  std::vector<TokenizedPair> train_;
  std::vector<std::vector<int64_t>> batches_;
  std::vector<Batch> val_;
  Seq2SeqTaskConfig c_;
  std::vector<float> probs_, d_logits_;
};

}  // namespace train
