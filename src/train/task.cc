// Task plumbing shared by every task (see task.h).
#include "task.h"

#include <cmath>

#include "base/random.h"

namespace train {

uint64_t stream_seed(uint64_t seed, uint64_t purpose, int64_t index) {
  return base::mix64(base::mix64(seed ^ purpose) + static_cast<uint64_t>(index));
}

model::Inputs Batch::inputs() const {
  return {.ids = ids.data(),
          .token_types = token_types.empty() ? nullptr : token_types.data(),
          .attention_mask = attention_mask.empty() ? nullptr : attention_mask.data(),
          .targets = nullptr,
          .B = B,
          .T = T,
          .row0 = row0};
}

EvalStats evaluate(Task& task, Model& m) {
  const std::vector<std::string> names = task.metric_names();
  double sum = 0;
  std::vector<double> metric_sums(names.size(), 0.0);
  int64_t count = 0;
  for (const Batch& b : task.validation_batches()) {
    const int64_t n = task.loss_count(b);
    const LossStats s = task.evaluate(m, b, n);
    sum += s.loss * static_cast<double>(n);
    for (size_t i = 0; i < metric_sums.size() && i < s.metric_sums.size(); ++i) metric_sums[i] += s.metric_sums[i];
    count += n;
  }
  EvalStats r;
  r.count = count;
  r.loss = count ? sum / static_cast<double>(count) : NAN;
  for (double v : metric_sums) r.metrics.push_back(count ? v / static_cast<double>(count) : NAN);
  return r;
}

}  // namespace train
