// AdamW, LR schedules and gradient clipping (see optim.h).
#include "optim.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

#include "ops/vmath.h"

namespace train {

AdamW::AdamW(std::vector<ParamRef> params, AdamWConfig cfg) : params_(std::move(params)), cfg_(cfg) {
  for (const ParamRef& p : params_) {
    m_.emplace_back(p.size, 0.0f);
    v_.emplace_back(p.size, 0.0f);
  }
}

void AdamW::step(double lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(cfg_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(cfg_.beta2, static_cast<double>(t_));
  ops::AdamWStep s{};
  s.beta1 = static_cast<float>(cfg_.beta1), s.one_minus_beta1 = static_cast<float>(1.0 - cfg_.beta1);
  s.beta2 = static_cast<float>(cfg_.beta2), s.one_minus_beta2 = static_cast<float>(1.0 - cfg_.beta2);
  s.step_size = static_cast<float>(lr / bc1);
  s.sqrt_bias_correction2 = static_cast<float>(std::sqrt(bc2));
  s.eps = static_cast<float>(cfg_.eps);
  // Element-wise, so chunks of a tensor go to threads in any split without changing a bit; tensors
  // of one chunk (norms, biases) stay on the calling thread.
  constexpr int64_t kChunk = 16384;
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamRef& p = params_[i];
    float *m = m_[i].data(), *v = v_[i].data();
    s.decay = p.decay ? static_cast<float>(1.0 - lr * cfg_.weight_decay) : 1.0f;
    const int64_t chunks = (p.size + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t j = c * kChunk, n = std::min(kChunk, p.size - j);
      ops::adamw_step_f32(p.value + j, m + j, v + j, p.grad + j, n, s);
    }
  }
}

Decay Schedule::parse_decay(const std::string& name) {
  if (name == "constant") return Decay::constant;
  if (name == "linear") return Decay::linear;
  if (name == "cosine") return Decay::cosine;
  if (name == "inverse_sqrt") return Decay::inverse_sqrt;
  throw std::invalid_argument("unknown learning-rate decay '" + name +
                              "' (expected constant, linear, cosine or inverse_sqrt)");
}

double learning_rate(const Schedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return s.warmup_init_lr + (s.peak_lr - s.warmup_init_lr) * static_cast<double>(step + 1) / s.warmup_steps;
  }
  switch (s.decay) {
    case Decay::constant:
      return s.peak_lr;
    case Decay::inverse_sqrt:
      return s.peak_lr * std::sqrt(static_cast<double>(std::max<int64_t>(s.warmup_steps, 1)) / (step + 1));
    case Decay::linear:
    case Decay::cosine: {
      const int64_t span = std::max<int64_t>(s.total_steps - s.warmup_steps, 1);
      const double progress = std::min(1.0, static_cast<double>(step - s.warmup_steps) / span);
      const double shape = s.decay == Decay::linear ? 1.0 - progress : 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
      return s.min_lr + (s.peak_lr - s.min_lr) * shape;
    }
  }
  return s.peak_lr;
}

namespace {

// Σ x² in double over fixed chunks, each summed by eight interleaved accumulators (lane j takes
// elements j, j + 8, ...), the chunks and lanes then added in order: the same bits whatever the
// thread count, and eight independent additions in flight instead of one chain.
double sum_of_squares(const float* x, int64_t n) {
  constexpr int64_t kChunk = 16384, kLanes = 8;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    double acc[kLanes] = {};
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      for (int64_t j = 0; j < kLanes; ++j) acc[j] += static_cast<double>(x[i + j]) * x[i + j];
    }
    for (int64_t j = 0; i < end; ++i, ++j) acc[j] += static_cast<double>(x[i]) * x[i];
    double sum = 0;
    for (double a : acc) sum += a;
    partial[static_cast<size_t>(c)] = sum;
  }
  double sum = 0;
  for (double v : partial) sum += v;
  return sum;
}

}  // namespace

double clip_grad_norm(const std::vector<float*>& grads, const std::vector<int64_t>& sizes, double max_norm) {
  double sq = 0;
  for (size_t i = 0; i < grads.size(); ++i) sq += sum_of_squares(grads[i], sizes[i]);
  const double norm = std::sqrt(sq);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));
  for (size_t i = 0; i < grads.size(); ++i) {
    float* g = grads[i];
#pragma omp parallel for schedule(static) if (sizes[i] > 16384)
    for (int64_t j = 0; j < sizes[i]; ++j) g[j] *= scale;
  }
  return norm;
}

}  // namespace train
