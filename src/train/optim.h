// Training machinery: AdamW with decoupled weight decay (PyTorch's torch.optim.AdamW update, bias
// corrected), learning-rate schedules (linear warmup, then constant / linear / cosine / inverse-sqrt
// decay), and global gradient-norm clipping (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train {

// One parameter tensor the optimiser updates: values, gradients, and whether weight decay applies
// (not for norms and biases).
struct ParamRef {
  float* value;
  const float* grad;
  int64_t size;
  bool decay;
};

struct AdamWConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
};

class AdamW {
 public:
  AdamW(std::vector<ParamRef> params, AdamWConfig cfg);
  // One step at learning rate lr: p ← p·(1 − lr·wd) [decay params only], then
  // p ← p − lr · m̂ / (√v̂ + eps) with m̂, v̂ the bias-corrected moments. In fp32 SIMD lanes, as
  // PyTorch computes it (ops::adamw_step_f32); the step's coefficients are formed in double.
  void step(double lr);
  int64_t steps() const { return t_; }
  // Moments, one vector per parameter (for checkpoints).
  std::vector<std::vector<float>>& first_moments() { return m_; }
  std::vector<std::vector<float>>& second_moments() { return v_; }
  const std::vector<std::vector<float>>& first_moments() const { return m_; }
  const std::vector<std::vector<float>>& second_moments() const { return v_; }
  void set_steps(int64_t t) { t_ = t; }

 private:
  std::vector<ParamRef> params_;
  AdamWConfig cfg_;
  std::vector<std::vector<float>> m_, v_;
  int64_t t_ = 0;
};

enum class Decay { constant, linear, cosine, inverse_sqrt };

struct Schedule {
  double peak_lr = 1e-3, min_lr = 0.0;
  int64_t warmup_steps = 0, total_steps = 1;
  Decay decay = Decay::cosine;
  double warmup_init_lr = 0.0;  // the warm-up rises linearly from here (fairseq's --warmup-init-lr)
  // Parses "constant", "linear", "cosine" or "inverse_sqrt"; throws std::invalid_argument otherwise.
  static Decay parse_decay(const std::string& name);
};

// Learning rate at step (0-based): linear warmup from warmup_init_lr to peak over warmup_steps (step
// s at init + (peak − init)·(s + 1)/warmup), then
// constant; linear or cosine from peak down to min_lr at total_steps; or peak·√(warmup/step).
double learning_rate(const Schedule& s, int64_t step);

// Scales every gradient by max_norm / (‖g‖ + 1e-6) when the global L2 norm ‖g‖ exceeds max_norm.
// Returns ‖g‖ before clipping (NaN/inf if a gradient is not finite; then nothing is scaled).
double clip_grad_norm(const std::vector<float*>& grads, const std::vector<int64_t>& sizes, double max_norm);

}  // namespace train
