// The head registry's look-ups and what every head shares (see head.h).
#include "model/head.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "base/enum_names.h"
#include "ops/loss.h"

namespace model {

void HeadDef::validate(const RoFormerConfig& c) const {
  if (uses_labels() && c.labels.empty()) throw std::invalid_argument(std::string(architecture()) + " needs num_labels >= 1");
}

int64_t HeadDef::logits_count(const RoFormerConfig& c, int64_t B, int64_t T) const {
  int64_t n = 1;
  for (int64_t d : logits_shape(c, B, T)) n *= d;
  return n;
}

std::vector<int64_t> HeadDef::targets(const RoFormerConfig&, const HeadExample& e) const {
  return e.labels;  // one target per example
}

const HeadDef* find_head(const std::string& architecture) {
  for (const HeadDef* h : head_registry()) {
    if (architecture == h->architecture()) return h;
  }
  return nullptr;
}

constexpr base::EnumName<HeadTask> kHeadTaskNames[] = {
    {HeadTask::text_classification, "text-classification"}, {HeadTask::token_classification, "token-classification"},
    {HeadTask::question_answering, "question-answering"}, {HeadTask::multiple_choice, "multiple-choice"}};

const char* head_task_name(HeadTask t) { return base::enum_name(kHeadTaskNames, t); }

HeadTask parse_head_task(const std::string& name) { return base::parse_enum(kHeadTaskNames, name, "task"); }

const HeadDef& head_named(const std::string& name) {
  for (const HeadDef* h : head_registry()) {
    if (name == h->architecture()) return *h;
  }
  return head_of(parse_head_task(name));
}

const HeadDef& head_of(HeadTask task) {
  for (const HeadDef* h : head_registry()) {
    if (h->task() == task) return *h;
  }
  throw std::logic_error(std::string("no head for task ") + head_task_name(task));
}

std::vector<double> apply_class_function(const std::string& function, const float* logits, int64_t n) {
  std::vector<double> z(logits, logits + n);
  if (function == "sigmoid") {
    for (double& v : z) v = 1.0 / (1.0 + std::exp(-v));
  } else if (function == "softmax") {
    const double m = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double& v : z) sum += (v = std::exp(v - m));
    for (double& v : z) v /= sum;
  } else if (function != "none") {
    throw std::invalid_argument("unknown classifier function '" + function + "' (softmax, sigmoid or none)");
  }
  return z;
}

HeadLoss softmax_cross_entropy(const float* logits, int64_t rows, int64_t width, const int64_t* targets,
                               int64_t ignore, int64_t normaliser, float* dlogits) {
  std::vector<float> probs(static_cast<size_t>(rows * width));
  HeadLoss out;
  const double mean = ops::cross_entropy_forward(probs.data(), logits, targets, rows, width, ignore, &out.count);
  out.sum = mean * static_cast<double>(out.count);
  if (dlogits) {
    std::fill(dlogits, dlogits + rows * width, 0.0f);
    ops::cross_entropy_backward(dlogits, probs.data(), targets, rows, width, ignore, normaliser, 1.0);
  }
  return out;
}

}  // namespace model
