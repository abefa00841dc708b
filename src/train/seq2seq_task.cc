// Sequence-to-sequence training (see seq2seq_task.h). Shapes: B pairs, S source and T target tokens
// of the longest row, V target vocabulary.
#include "seq2seq_task.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "base/random.h"
#include "ops/loss.h"

namespace train {
namespace {

constexpr uint64_t kBatchOrderStream = 0xba7c;

}  // namespace

Batch seq2seq_batch(const std::vector<TokenizedPair>& pairs, const std::vector<int64_t>& indices,
                    const Seq2SeqTaskConfig& c, int64_t row0) {
  Batch b;
  b.B = static_cast<int64_t>(indices.size());
  b.row0 = row0;
  for (const int64_t i : indices) {
    b.S = std::max(b.S, static_cast<int64_t>(pairs[i].source.size()) + 1);
    b.T = std::max(b.T, static_cast<int64_t>(pairs[i].target.size()) + 1);
  }
  b.source.assign(b.B * b.S, c.pad_id);
  b.source_mask.assign(b.B * b.S, 0);
  b.ids.assign(b.B * b.T, c.pad_id);
  b.targets.assign(b.B * b.T, model::kIgnoreIndex);
  for (int64_t r = 0; r < b.B; ++r) {
    const TokenizedPair& p = pairs[indices[r]];
    const int64_t s = static_cast<int64_t>(p.source.size()), t = static_cast<int64_t>(p.target.size());
    std::copy(p.source.begin(), p.source.end(), b.source.begin() + r * b.S);
    b.source[r * b.S + s] = c.eos_id;
    std::fill_n(b.source_mask.begin() + r * b.S, s + 1, 1);
    b.ids[r * b.T] = c.decoder_start_id;
    std::copy(p.target.begin(), p.target.end(), b.ids.begin() + r * b.T + 1);
    std::copy(p.target.begin(), p.target.end(), b.targets.begin() + r * b.T);
    b.targets[r * b.T + t] = c.eos_id;
  }
  return b;
}

std::vector<std::vector<int64_t>> token_batches(const std::vector<TokenizedPair>& pairs, int64_t max_tokens) {
  if (max_tokens <= 0) throw std::invalid_argument("--max-tokens must be positive");
  std::vector<int64_t> order(pairs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const auto la = std::make_pair(pairs[a].source.size(), pairs[a].target.size());
    const auto lb = std::make_pair(pairs[b].source.size(), pairs[b].target.size());
    return la < lb;
  });
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> batch;
  int64_t longest = 0;
  for (const int64_t i : order) {
    // +1: the eos (source) and the decoder start / eos (target) each row carries.
    const int64_t len = static_cast<int64_t>(std::max(pairs[i].source.size(), pairs[i].target.size())) + 1;
    const int64_t grown = std::max(longest, len);
    if (!batch.empty() && grown * static_cast<int64_t>(batch.size() + 1) > max_tokens) {
      out.push_back(std::move(batch));
      batch.clear();
      longest = 0;
    }
    batch.push_back(i);
    longest = std::max(longest, len);
  }
  if (!batch.empty()) out.push_back(std::move(batch));
  return out;
}

Seq2SeqModel& seq2seq_of(Trainable& m) {
  auto* s = dynamic_cast<Seq2SeqModel*>(&m);
  if (!s) throw std::logic_error("a sequence-to-sequence task trains an encoder-decoder");
  return *s;
}

Seq2SeqTask::Seq2SeqTask(std::vector<TokenizedPair> train, const std::vector<TokenizedPair>& validation,
                         const Seq2SeqTaskConfig& c)
    : train_(std::move(train)), c_(c) {
  batches_ = token_batches(train_, c_.max_tokens);
  int64_t row0 = 0;
  for (const auto& idx : token_batches(validation, c_.max_tokens)) {
    val_.push_back(seq2seq_batch(validation, idx, c_, row0));
    row0 += static_cast<int64_t>(idx.size());
  }
}

Batch Seq2SeqTask::train_batch(int64_t step) {
  if (batches_.empty()) throw std::logic_error("this sequence-to-sequence task has no training pairs");
  const int64_t n = steps_per_epoch(), epoch = step / n;
  // The epoch's batch order: sorted by a counter-based hash of (seed, epoch, batch).
  const uint64_t seed = stream_seed(c_.seed, kBatchOrderStream, epoch);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<uint64_t> key(n);
  for (int64_t i = 0; i < n; ++i) key[i] = base::mix64(seed ^ base::mix64(static_cast<uint64_t>(i)));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
  return seq2seq_batch(train_, batches_[order[step % n]], c_, 0);
}

int64_t Seq2SeqTask::loss_count(const Batch& batch) const {
  return static_cast<int64_t>(batch.targets.size()) -
         std::count(batch.targets.begin(), batch.targets.end(), model::kIgnoreIndex);
}

LossStats Seq2SeqTask::loss(const Seq2SeqModel& m, const Batch& batch, int64_t normaliser, double smoothing) {
  const int64_t N = batch.B * batch.T, V = m.config().decoder.vocab_size;
  probs_.resize(N * V);
  LossStats s;
  const double mean = ops::cross_entropy_forward(probs_.data(), m.logits(), batch.targets.data(), N, V,
                                                 model::kIgnoreIndex, &s.count, smoothing);
  s.loss = normaliser > 0 ? mean * static_cast<double>(s.count) / static_cast<double>(normaliser) : 0.0;
  return s;
}

namespace {

model::Seq2SeqInputs seq2seq_inputs(const Batch& b) {
  return {.source = b.source.data(), .source_mask = b.source_mask.data(), .decoder_input = b.ids.data(),
          .B = b.B, .S = b.S, .T = b.T, .row0 = b.row0};
}

}  // namespace

LossStats Seq2SeqTask::loss_and_grad(Trainable& trained, const Batch& batch, uint64_t dropout_seed,
                                     int64_t normaliser) {
  Seq2SeqModel& m = seq2seq_of(trained);
  m.forward(seq2seq_inputs(batch), true, dropout_seed);
  LossStats s = loss(m, batch, normaliser, c_.label_smoothing);
  if (!std::isfinite(s.loss)) return s;
  const int64_t N = batch.B * batch.T, V = m.config().decoder.vocab_size;
  d_logits_.assign(N * V, 0.0f);
  ops::cross_entropy_backward(d_logits_.data(), probs_.data(), batch.targets.data(), N, V, model::kIgnoreIndex,
                              normaliser, 1.0, c_.label_smoothing);
  m.backward_from_logits(d_logits_.data());
  return s;
}

LossStats Seq2SeqTask::evaluate(Trainable& trained, const Batch& batch, int64_t normaliser) {
  Seq2SeqModel& m = seq2seq_of(trained);
  m.forward(seq2seq_inputs(batch), false, 0);
  const int64_t N = batch.B * batch.T, V = m.config().decoder.vocab_size;
  const LossStats nll = loss(m, batch, normaliser, 0.0);
  LossStats s = loss(m, batch, normaliser, c_.label_smoothing);
  double correct = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (batch.targets[n] == model::kIgnoreIndex) continue;
    const float* z = m.logits() + n * V;
    correct += std::max_element(z, z + V) - z == batch.targets[n];
  }
  s.metric_sums = {nll.loss * static_cast<double>(normaliser), correct};
  return s;
}

}  // namespace train
