// Language-modelling tasks (see lm_task.h). Shapes: B rows, T tokens per row, N = B·T, V vocabulary.
#include "lm_task.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "base/enum_names.h"
#include "ops/loss.h"

namespace train {

constexpr base::EnumName<LmObjective> kLmObjectiveNames[] = {{LmObjective::clm, "clm"}, {LmObjective::mlm, "mlm"}};

const char* lm_objective_name(LmObjective o) { return base::enum_name(kLmObjectiveNames, o); }

LmObjective parse_lm_objective(const std::string& name) { return base::parse_enum(kLmObjectiveNames, name, "task"); }

int64_t TokenTask::loss_count(const Batch& batch) const {
  return static_cast<int64_t>(batch.targets.size()) -
         std::count(batch.targets.begin(), batch.targets.end(), model::kIgnoreIndex);
}

LossStats TokenTask::loss(const Model& m, const Batch& batch, int64_t normaliser) {
  const int64_t N = batch.B * batch.T, V = m.config().vocab_size;
  if (!m.logits()) throw std::invalid_argument("a language-modelling task needs a model with an LM head");
  if (static_cast<int64_t>(batch.targets.size()) != N) throw std::invalid_argument("LM targets must be (B, T)");
  probs_.resize(N * V);
  LossStats s;
  const double mean = ops::cross_entropy_forward(probs_.data(), m.logits(), batch.targets.data(), N, V,
                                                 model::kIgnoreIndex, &s.count);
  // Σ/normaliser; exactly the mean when the normaliser is this batch's own count.
  s.loss = s.count == normaliser ? mean : normaliser > 0 ? mean * static_cast<double>(s.count) / normaliser : 0.0;
  return s;
}

LossStats TokenTask::loss_and_grad(Trainable& trained, const Batch& batch, uint64_t dropout_seed, int64_t normaliser) {
  Model& m = roformer_of(trained);
  m.forward(batch.inputs(), true, dropout_seed);
  LossStats s = loss(m, batch, normaliser);
  if (!std::isfinite(s.loss)) return s;
  const int64_t N = batch.B * batch.T, V = m.config().vocab_size;
  d_logits_.assign(N * V, 0.0f);
  ops::cross_entropy_backward(d_logits_.data(), probs_.data(), batch.targets.data(), N, V, model::kIgnoreIndex,
                              normaliser, 1.0);
  m.backward_from_logits(d_logits_.data());
  return s;
}

LossStats TokenTask::evaluate(Trainable& trained, const Batch& batch, int64_t normaliser) {
  Model& m = roformer_of(trained);
  m.forward(batch.inputs(), false, 0);
  LossStats s = loss(m, batch, normaliser);
  const int64_t N = batch.B * batch.T, V = m.config().vocab_size;
  const float* logits = m.logits();
  double correct = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (batch.targets[n] == model::kIgnoreIndex) continue;
    const float* z = logits + n * V;
    correct += std::max_element(z, z + V) - z == batch.targets[n];
  }
  s.metric_sums = {correct};
  return s;
}

void mask_rows(int64_t* ids, int64_t* targets, int64_t B, int64_t T, int64_t row0, const LmTaskConfig& c,
               uint64_t seed, const uint8_t* word_start) {
  data::MlmMaskConfig mc;
  mc.mask_prob = c.mask_prob;
  mc.mask_token_id = c.mask_token_id;
  mc.vocab_size = c.vocab_size;
  mc.ignore_index = model::kIgnoreIndex;
  std::vector<uint8_t> maskable(T);
  for (int64_t r = 0; r < B; ++r) {
    int64_t* row = ids + r * T;
    for (int64_t t = 0; t < T; ++t) {
      maskable[t] = std::find(c.special_ids.begin(), c.special_ids.end(), row[t]) == c.special_ids.end();
    }
    data::mlm_mask(row, targets + r * T, maskable.data(), T, mc, seed, static_cast<uint64_t>((row0 + r) * T),
                   word_start ? word_start + r * T : nullptr);
  }
}

Batch lm_batch(const data::Batch& w, const LmTaskConfig& c, uint64_t mask_seed, int64_t row0) {
  Batch b;
  b.B = w.B;
  b.T = w.T;
  b.row0 = row0;
  b.ids.resize(w.B * w.T);
  b.targets.resize(w.B * w.T);
  for (int64_t r = 0; r < w.B; ++r) {
    for (int64_t t = 0; t < w.T; ++t) {
      b.ids[r * w.T + t] = w.at(r, t);
      b.targets[r * w.T + t] = w.at(r, t + 1);
    }
  }
  if (!c.causal) {
    std::vector<uint8_t> starts;  // (B, T): the inputs' word starts
    if (c.whole_word_mask) {
      if (w.word_start.empty()) throw std::invalid_argument("whole-word masking needs a corpus that knows words");
      starts.resize(static_cast<size_t>(w.B * w.T));
      for (int64_t r = 0; r < w.B; ++r) {
        std::copy_n(w.word_start.begin() + r * (w.T + 1), w.T, starts.begin() + r * w.T);
      }
    }
    mask_rows(b.ids.data(), b.targets.data(), b.B, b.T, row0, c, mask_seed, starts.empty() ? nullptr : starts.data());
  }
  return b;
}

LmTask::LmTask(const data::WindowSource* corpus, const LmTaskConfig& c, const std::vector<data::Batch>& val_windows)
    : corpus_(corpus), c_(c) {
  for (size_t i = 0; i < val_windows.size(); ++i) {
    val_.push_back(lm_batch(val_windows[i], c_, stream_seed(c_.seed, kEvalMaskStream, static_cast<int64_t>(i))));
  }
}

Batch LmTask::train_batch(int64_t step) {
  if (!corpus_) throw std::logic_error("this LM task has no training corpus");
  return lm_batch(corpus_->train_batch(c_.seed, step, c_.batch, c_.seq), c_, stream_seed(c_.seed, kMaskStream, step));
}

}  // namespace train
