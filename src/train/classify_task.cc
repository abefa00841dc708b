// Sequence classification and regression (see classify_task.h). Shapes: B examples, T tokens of the
// longest, L labels.
#include "classify_task.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "base/error.h"
#include "base/random.h"

namespace train {
namespace {

constexpr int64_t kMegaBatches = 50;  // HF LengthGroupedSampler's mega-batch of 50 batches
constexpr uint64_t kOrderStream = 0x0dde;

}  // namespace

void check_token_ids(const std::vector<int64_t>& ids, int64_t vocab_size, const std::string& where) {
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      throw base::Error(where + ": token id " + std::to_string(id) + " is outside the model's vocabulary of " +
                        std::to_string(vocab_size));
    }
  }
}

Batch classification_batch(const std::vector<TokenizedExample>& examples, const std::vector<int64_t>& indices,
                           const ClassifyTaskConfig& c, int64_t row0) {
  const int64_t g = c.group;
  auto row = [&](int64_t r) -> const TokenizedExample& { return examples[indices[r / g] * g + r % g]; };
  Batch b;
  b.B = static_cast<int64_t>(indices.size()) * g;
  b.row0 = row0;
  for (int64_t r = 0; r < b.B; ++r) b.T = std::max(b.T, static_cast<int64_t>(row(r).ids.size()));
  b.ids.assign(b.B * b.T, c.pad_id);
  b.token_types.assign(b.B * b.T, 0);
  b.attention_mask.assign(b.B * b.T, 0);
  for (int64_t r = 0; r < b.B; ++r) {
    const TokenizedExample& e = row(r);
    std::copy(e.ids.begin(), e.ids.end(), b.ids.begin() + r * b.T);
    std::copy(e.types.begin(), e.types.end(), b.token_types.begin() + r * b.T);
    std::fill_n(b.attention_mask.begin() + r * b.T, e.ids.size(), 1);
    if (c.labels == 0) continue;  // unlabelled: inputs only
    if (c.per_token) {
      b.targets.resize(b.B * b.T, model::kIgnoreIndex);
      std::copy(e.targets.begin(), e.targets.end(), b.targets.begin() + r * b.T);
    } else if (c.span) {
      b.targets.insert(b.targets.end(), e.targets.begin(), e.targets.end());  // start, end
    } else if (g > 1) {
      if (r % g == 0) b.targets.push_back(e.label);  // the example's right choice
    } else if (c.problem_type == model::ProblemType::single_label_classification) {
      b.targets.push_back(e.label);
    } else {
      if (static_cast<int64_t>(e.values.size()) != c.labels) throw std::invalid_argument("an example has the wrong number of values");
      b.values.insert(b.values.end(), e.values.begin(), e.values.end());
    }
  }
  return b;
}

ClassifyTask::ClassifyTask(std::vector<TokenizedExample> train, std::vector<TokenizedExample> validation,
                           const ClassifyTaskConfig& c)
    : train_(std::move(train)), c_(c) {
  if (c_.batch <= 0) throw std::invalid_argument("the batch size must be positive");
  if (c_.group <= 0 || train_.size() % c_.group || validation.size() % c_.group) {
    throw std::invalid_argument("multiple-choice examples must have the same number of rows each");
  }
  const int64_t n = static_cast<int64_t>(validation.size()) / c_.group;
  for (int64_t start = 0; start < n; start += c_.batch) {
    std::vector<int64_t> idx(std::min<int64_t>(c_.batch, n - start));
    std::iota(idx.begin(), idx.end(), start);
    val_.push_back(classification_batch(validation, idx, c_, start * c_.group));
  }
}

int64_t ClassifyTask::steps_per_epoch() const {
  return (examples() + c_.batch - 1) / c_.batch;
}

std::vector<int64_t> ClassifyTask::epoch_order(int64_t epoch) const {
  const int64_t n = examples();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // A shuffle keyed by (seed, epoch, example): sort by a counter-based hash.
  const uint64_t seed = stream_seed(c_.seed, kOrderStream, epoch);
  std::vector<uint64_t> key(n);
  for (int64_t i = 0; i < n; ++i) key[i] = base::mix64(seed ^ base::mix64(static_cast<uint64_t>(i)));
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key[a] < key[b]; });
  std::vector<size_t> length(n);  // an example's longest row
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < c_.group; ++k) length[i] = std::max(length[i], train_[i * c_.group + k].ids.size());
  }
  const int64_t mega = kMegaBatches * c_.batch;
  for (int64_t start = 0; start < n; start += mega) {
    std::stable_sort(order.begin() + start, order.begin() + std::min(n, start + mega),
                     [&](int64_t a, int64_t b) { return length[a] > length[b]; });
  }
  return order;
}

Batch ClassifyTask::train_batch(int64_t step) {
  if (train_.empty()) throw std::logic_error("this classification task has no training examples");
  const int64_t epoch = step / steps_per_epoch(), index = step % steps_per_epoch();
  if (epoch != cached_epoch_) {
    cached_order_ = epoch_order(epoch);
    cached_epoch_ = epoch;
  }
  const int64_t start = index * c_.batch, end = std::min<int64_t>(start + c_.batch, cached_order_.size());
  const std::vector<int64_t> idx(cached_order_.begin() + start, cached_order_.begin() + end);
  // Global rows: the position in the epoch's order, so dropout masks depend on (seed, step, row).
  return classification_batch(train_, idx, c_, start * c_.group);
}

int64_t ClassifyTask::loss_count(const Batch& batch) const {
  if (!c_.per_token) return batch.B / c_.group;
  return std::count_if(batch.targets.begin(), batch.targets.end(), [](int64_t t) { return t != model::kIgnoreIndex; });
}

LossStats ClassifyTask::loss(const Model& m, const Batch& batch, int64_t normaliser, bool with_grad) {
  const model::RoFormerConfig& cfg = m.config();
  if (!m.head_logits()) throw std::invalid_argument("a classification task needs a model with a task head");
  if (with_grad) d_logits_.resize(cfg.head->logits_count(cfg, batch.B, batch.T));
  const model::HeadLoss h = cfg.head->loss(cfg, m.head_logits(), batch.B, batch.T,
                                           {batch.targets.data(), batch.values.data()}, c_.group, normaliser,
                                           with_grad ? d_logits_.data() : nullptr);
  LossStats s;
  s.count = h.count;
  s.loss = h.sum * (normaliser > 0 ? 1.0 / static_cast<double>(normaliser) : 0.0);
  return s;
}

LossStats ClassifyTask::loss_and_grad(Trainable& trained, const Batch& batch, uint64_t dropout_seed,
                                      int64_t normaliser) {
  Model& m = roformer_of(trained);
  m.forward(batch.inputs(), true, dropout_seed);
  LossStats s = loss(m, batch, normaliser, true);
  if (std::isfinite(s.loss)) m.backward_from_head_logits(d_logits_.data());
  return s;
}

LossStats ClassifyTask::evaluate(Trainable& trained, const Batch& batch, int64_t normaliser) {
  Model& m = roformer_of(trained);
  m.forward(batch.inputs(), false, 0);
  LossStats s = loss(m, batch, normaliser, false);
  if (counts_accuracy()) {
    double correct = 0;
    for (int64_t i = 0; i < batch.B; ++i) {
      const float* z = m.head_logits() + i * c_.labels;
      correct += std::max_element(z, z + c_.labels) - z == batch.targets[i];
    }
    s.metric_sums = {correct};
  }
  return s;
}

std::vector<std::string> ClassifyTask::metric_names() const {
  if (counts_accuracy()) return {"accuracy"};
  return {};
}

}  // namespace train
