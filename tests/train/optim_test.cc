// AdamW against an independent float64 transcription of torch.optim.AdamW, the first step's closed
// form, learning-rate schedules at their key steps, and global gradient-norm clipping.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <stdexcept>

#include "train/optim.h"

namespace {

TEST(AdamW, FirstStepHasTheClosedForm) {
  // Step 1: m̂ = g, v̂ = g², so p ← p·(1 − lr·wd) − lr·g/(|g| + eps).
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.3f, -4.0f, 1e-3f};
  const std::vector<float> p0 = p;
  train::AdamW opt({{p.data(), g.data(), 3, true}}, {0.9, 0.999, 1e-8, 0.1});
  opt.step(0.01);
  for (int i = 0; i < 3; ++i) {
    const double want = p0[i] * (1 - 0.01 * 0.1) - 0.01 * g[i] / (std::fabs(g[i]) + 1e-8);
    EXPECT_NEAR(p[i], want, 1e-7);
  }
}

TEST(AdamW, MatchesTorchAlgorithmOverSteps) {
  std::mt19937_64 rng(8);
  std::normal_distribution<double> normal;
  const int n = 16, steps = 7;
  const train::AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  std::vector<float> w(n), b(n), gw(n), gb(n);
  for (int i = 0; i < n; ++i) w[i] = static_cast<float>(normal(rng)), b[i] = static_cast<float>(normal(rng));
  // Reference state in double: torch.optim.AdamW (decoupled decay, bias corrections, eps outside √).
  std::vector<double> rw(w.begin(), w.end()), rb(b.begin(), b.end()), mw(n), vw(n), mb(n), vb(n);
  train::AdamW opt({{w.data(), gw.data(), n, true}, {b.data(), gb.data(), n, false}}, cfg);
  for (int t = 1; t <= steps; ++t) {
    const double lr = 1e-2 / t;
    for (int i = 0; i < n; ++i) gw[i] = static_cast<float>(normal(rng)), gb[i] = static_cast<float>(normal(rng));
    opt.step(lr);
    auto ref_step = [&](std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                        const std::vector<float>& g, bool decay) {
      for (int i = 0; i < n; ++i) {
        if (decay) p[i] *= 1 - lr * cfg.weight_decay;
        m[i] = cfg.beta1 * m[i] + (1 - cfg.beta1) * g[i];
        v[i] = cfg.beta2 * v[i] + (1 - cfg.beta2) * double(g[i]) * g[i];
        const double bc1 = 1 - std::pow(cfg.beta1, t), bc2 = 1 - std::pow(cfg.beta2, t);
        p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + cfg.eps);
      }
    };
    ref_step(rw, mw, vw, gw, true);
    ref_step(rb, mb, vb, gb, false);
  }
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(w[i], rw[i], 1e-5 * std::max(1.0, std::fabs(rw[i])));
    EXPECT_NEAR(b[i], rb[i], 1e-5 * std::max(1.0, std::fabs(rb[i])));
  }
  EXPECT_EQ(opt.steps(), steps);
}

// fairseq's inverse_sqrt: a linear warm-up from warmup_init_lr, then peak · √(warmup / step).
TEST(Schedule, InverseSqrtFromAnInitialLearningRate) {
  train::Schedule s{5e-4, 0.0, 4, 100, train::Decay::inverse_sqrt, 1e-7};
  EXPECT_NEAR(train::learning_rate(s, 0), 1e-7 + (5e-4 - 1e-7) / 4, 1e-18);
  EXPECT_NEAR(train::learning_rate(s, 3), 5e-4, 1e-18);
  EXPECT_NEAR(train::learning_rate(s, 15), 5e-4 * 0.5, 1e-18);  // √(4 / 16)
}

TEST(Schedule, WarmupThenDecayShapes) {
  train::Schedule s{1e-3, 1e-4, 10, 110, train::Decay::cosine};
  EXPECT_NEAR(train::learning_rate(s, 0), 1e-4, 1e-15);   // (0 + 1)/10 of the peak
  EXPECT_NEAR(train::learning_rate(s, 9), 1e-3, 1e-15);   // end of warmup
  EXPECT_NEAR(train::learning_rate(s, 10), 1e-3, 1e-15);  // decay starts at the peak
  EXPECT_NEAR(train::learning_rate(s, 60), 0.5 * (1e-3 + 1e-4), 1e-15);  // cosine midpoint
  EXPECT_NEAR(train::learning_rate(s, 110), 1e-4, 1e-15);
  EXPECT_NEAR(train::learning_rate(s, 500), 1e-4, 1e-15);  // stays at the floor
  s.decay = train::Decay::linear;
  EXPECT_NEAR(train::learning_rate(s, 35), 1e-3 - 0.25 * (1e-3 - 1e-4), 1e-15);
  s.decay = train::Decay::inverse_sqrt;
  EXPECT_NEAR(train::learning_rate(s, 39), 1e-3 * std::sqrt(10.0 / 40), 1e-15);
  s.decay = train::Decay::constant;
  EXPECT_EQ(train::learning_rate(s, 1000), 1e-3);
  EXPECT_EQ(train::Schedule::parse_decay("cosine"), train::Decay::cosine);
  EXPECT_THROW(train::Schedule::parse_decay("exponential"), std::invalid_argument);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheLimit) {
  std::vector<float> a = {3.0f, 0.0f}, b = {4.0f};  // global norm 5
  std::vector<float*> grads = {a.data(), b.data()};
  const std::vector<int64_t> sizes = {2, 1};
  EXPECT_NEAR(train::clip_grad_norm(grads, sizes, 10.0), 5.0, 1e-12);
  EXPECT_EQ(a[0], 3.0f);  // untouched below the limit
  EXPECT_NEAR(train::clip_grad_norm(grads, sizes, 1.0), 5.0, 1e-12);
  EXPECT_NEAR(std::hypot(a[0], b[0]), 1.0, 1e-6);
  a[1] = NAN;
  EXPECT_TRUE(std::isnan(train::clip_grad_norm(grads, sizes, 1.0)));
}

}  // namespace
