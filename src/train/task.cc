// Task plumbing shared by every task (see task.h).
#include "task.h"

#include <cmath>
#include <stdexcept>

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

Batch Batch::rows(int64_t r0, int64_t r1) const {
  if (r0 < 0 || r1 > B || r0 > r1) throw std::out_of_range("Batch::rows: bad row range");
  Batch out;
  out.B = r1 - r0;
  out.T = T;
  out.S = S;
  out.row0 = row0 + r0;
  auto cut = [&](const auto& all, auto& part) {
    if (all.empty()) return;
    const size_t width = all.size() / static_cast<size_t>(B);
    part.assign(all.begin() + static_cast<ptrdiff_t>(r0 * width), all.begin() + static_cast<ptrdiff_t>(r1 * width));
  };
  cut(ids, out.ids);
  cut(token_types, out.token_types);
  cut(attention_mask, out.attention_mask);
  cut(targets, out.targets);
  cut(values, out.values);
  cut(source, out.source);
  cut(source_mask, out.source_mask);
  return out;
}

Model& roformer_of(Trainable& m) {
  auto* r = dynamic_cast<Model*>(&m);
  if (!r) throw std::logic_error("this task trains a RoFormer encoder or language model");
  return *r;
}

EvalStats evaluate(Task& task, Trainable& m, Communicator* comm) {
  const int rank = comm ? comm->rank() : 0, ranks = comm ? comm->size() : 1;
  const std::vector<std::string> names = task.metric_names();
  // (loss sum, count, metric sums...)
  std::vector<double> sums(2 + names.size(), 0.0);
  const std::vector<Batch>& batches = task.validation_batches();
  for (size_t i = static_cast<size_t>(rank); i < batches.size(); i += static_cast<size_t>(ranks)) {
    const int64_t n = task.loss_count(batches[i]);
    const LossStats s = task.evaluate(m, batches[i], n);
    sums[0] += s.loss * static_cast<double>(n);
    sums[1] += static_cast<double>(n);
    for (size_t k = 0; k < names.size() && k < s.metric_sums.size(); ++k) sums[2 + k] += s.metric_sums[k];
  }
  if (ranks > 1) comm->allreduce_sum(sums.data(), static_cast<int64_t>(sums.size()));
  const double count = sums[1];
  EvalStats r;
  r.count = static_cast<int64_t>(count);
  r.loss = count > 0 ? sums[0] / count : NAN;
  for (size_t k = 0; k < names.size(); ++k) r.metrics.push_back(count > 0 ? sums[2 + k] / count : NAN);
  return r;
}

}  // namespace train
