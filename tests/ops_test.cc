// The engine's ops: every backward against central finite differences in float64 (loss = Σ out·g
// for a random g), fp32 forwards against fp64, known values, and bad input.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "grad_check.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/position.h"
#include "ops/vmath.h"
#include "hwy/targets.h"

namespace {

using Vec = std::vector<double>;

Vec random_vec(std::mt19937_64& rng, size_t n, double scale = 1.0, double shift = 0.0) {
  std::normal_distribution<double> normal;
  Vec v(n);
  for (double& x : v) x = shift + scale * normal(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of `loss` with respect to every `stride`-th element of `param`, against
// `analytic` (tests/grad_check.h, its default step and tolerance).
void expect_gradient(const char* what, Vec& param, const Vec& analytic, const std::function<double()>& loss,
                     size_t stride = 1) {
  testing_util::expect_gradient(what, param, analytic, testing_util::every(param.size(), stride), loss);
}

// fp32 result vs the fp64 one, relative to the largest magnitude.
void expect_close_fp32(const std::vector<float>& f, const Vec& d, double tol = 2e-6) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    scale = std::max(scale, std::fabs(d[i]));
    err = std::max(err, std::fabs(f[i] - d[i]));
  }
  EXPECT_LE(err, tol * std::max(1.0, scale));
}

std::vector<float> to_f32(const Vec& v) { return std::vector<float>(v.begin(), v.end()); }

TEST(Ops, LayerNormGradients) {
  std::mt19937_64 rng(1);
  const int64_t N = 3, C = 7;
  Vec x = random_vec(rng, N * C, 2.0, 0.5), w = random_vec(rng, C, 0.3, 1.0), b = random_vec(rng, C);
  const Vec g = random_vec(rng, N * C);
  Vec y(N * C), mean(N), rstd(N);
  auto loss = [&] {
    ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
    return dot(y, g);
  };
  loss();
  Vec dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ops::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
  // fp32 agrees with fp64.
  std::vector<float> yf(N * C), mf(N), rf(N);
  const auto xf = to_f32(x), wf = to_f32(w), bf = to_f32(b);
  ops::layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5);
  loss();
  expect_close_fp32(yf, y);
}

TEST(Ops, RmsNormGradientsWithAndWithoutWeight) {
  std::mt19937_64 rng(2);
  const int64_t N = 4, C = 6;
  for (bool weighted : {true, false}) {
    Vec x = random_vec(rng, N * C), w = random_vec(rng, C, 0.3, 1.0);
    const Vec g = random_vec(rng, N * C);
    Vec y(N * C), rrms(N);
    const double* wp = weighted ? w.data() : nullptr;
    auto loss = [&] {
      ops::rmsnorm_forward(y.data(), rrms.data(), x.data(), weighted ? w.data() : nullptr, N, C, 1e-6);
      return dot(y, g);
    };
    loss();
    Vec dx(N * C, 0.0), dw(C, 0.0);
    ops::rmsnorm_backward(dx.data(), dw.data(), g.data(), x.data(), wp, rrms.data(), N, C);
    expect_gradient("dx", x, dx, loss);
    if (weighted) expect_gradient("dw", w, dw, loss);
  }
}

TEST(Ops, ActivationGradientsAndValues) {
  std::mt19937_64 rng(3);
  const int64_t n = 40;
  Vec x = random_vec(rng, n, 2.0);
  for (double& v : x) {
    if (std::fabs(v) < 1e-3) v = 0.5;  // keep ReLU's kink away from the finite differences
  }
  const Vec g = random_vec(rng, n);
  Vec y(n);
  auto gelu_loss = [&] {
    ops::gelu_forward(y.data(), x.data(), n);
    return dot(y, g);
  };
  Vec dx(n, 0.0);
  ops::gelu_backward(dx.data(), x.data(), g.data(), n);
  expect_gradient("gelu dx", x, dx, gelu_loss);
  auto relu_loss = [&] {
    ops::relu_forward(y.data(), x.data(), n);
    return dot(y, g);
  };
  Vec dr(n, 0.0);
  ops::relu_backward(dr.data(), x.data(), g.data(), n);
  expect_gradient("relu dx", x, dr, relu_loss);
  // Exact erf GELU, not the tanh approximation: gelu(1) = Φ(1), gelu(−1) = −Φ(−1).
  const double in[3] = {1.0, -1.0, 3.0};
  double out[3];
  ops::gelu_forward(out, in, 3);
  EXPECT_NEAR(out[0], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(out[1], -0.15865525393145707, 1e-15);
  EXPECT_NEAR(out[2], 2.99595030590511, 1e-13);
}

TEST(Ops, LinearGradientsMatchAndFp32Agrees) {
  std::mt19937_64 rng(4);
  const int64_t N = 5, IC = 6, OC = 4;
  Vec x = random_vec(rng, N * IC), w = random_vec(rng, OC * IC), b = random_vec(rng, OC);
  const Vec g = random_vec(rng, N * OC);
  Vec y(N * OC);
  auto loss = [&] {
    ops::linear_forward(y.data(), x.data(), w.data(), b.data(), N, IC, OC);
    return dot(y, g);
  };
  loss();
  // y = x·Wᵀ + b against a plain loop.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < OC; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < IC; ++i) s += x[n * IC + i] * w[o * IC + i];
      EXPECT_NEAR(y[n * OC + o], s, 1e-12);
    }
  }
  Vec dx(N * IC, 0.0), dw(OC * IC, 0.0), db(OC, 0.0);
  ops::linear_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, IC, OC);
  expect_gradient("dx", x, dx, loss);
  expect_gradient("dw", w, dw, loss);
  expect_gradient("db", b, db, loss);
  std::vector<float> yf(N * OC);
  const auto xf = to_f32(x), wf = to_f32(w), bf = to_f32(b);
  ops::linear_forward(yf.data(), xf.data(), wf.data(), bf.data(), N, IC, OC);
  expect_close_fp32(yf, y);
}

TEST(Ops, EmbeddingGradientsAndRangeCheck) {
  std::mt19937_64 rng(5);
  const int64_t V = 6, C = 3;
  const std::vector<int64_t> ids = {2, 0, 2, 5};  // a repeated id accumulates
  const int64_t N = static_cast<int64_t>(ids.size());
  Vec table = random_vec(rng, V * C);
  const Vec g = random_vec(rng, N * C);
  Vec y(N * C);
  auto loss = [&] {
    ops::embedding_forward(y.data(), ids.data(), table.data(), N, V, C);
    return dot(y, g);
  };
  loss();
  Vec dtable(V * C, 0.0);
  ops::embedding_backward(dtable.data(), g.data(), ids.data(), N, C);
  expect_gradient("dtable", table, dtable, loss);
  const std::vector<int64_t> bad = {1, 6};
  EXPECT_THROW(ops::embedding_forward(y.data(), bad.data(), table.data(), 2, V, C), std::out_of_range);
  const std::vector<int64_t> negative = {-1};
  EXPECT_THROW(ops::embedding_forward(y.data(), negative.data(), table.data(), 1, V, C), std::out_of_range);
}

TEST(Ops, CrossEntropyLossGradientsAndIgnoreIndex) {
  std::mt19937_64 rng(6);
  const int64_t N = 5, V = 7, ignore = -100;
  const std::vector<int64_t> targets = {3, ignore, 0, 6, 3};
  Vec logits = random_vec(rng, N * V, 3.0);
  Vec probs(N * V);
  int64_t counted = 0;
  auto loss = [&] {
    return ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V, ignore, &counted);
  };
  const double l = loss();
  EXPECT_EQ(counted, 4);
  // Against the definition: mean over counted rows of log Σ exp − z_target.
  double expected = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore) continue;
    double sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[n * V + v]);
    expected += std::log(sum) - logits[n * V + targets[n]];
  }
  EXPECT_NEAR(l, expected / 4, 1e-12);
  Vec dlogits(N * V, 0.0);
  ops::cross_entropy_backward(dlogits.data(), probs.data(), targets.data(), N, V, ignore, counted, 1.0);
  expect_gradient("dlogits", logits, dlogits, loss);
  for (int64_t v = 0; v < V; ++v) EXPECT_EQ(dlogits[1 * V + v], 0.0) << "ignored row has no gradient";
  // Extreme logits stay finite (max-subtracted softmax).
  Vec big(V, 0.0);
  big[2] = 1e4;
  const int64_t t[1] = {2};
  EXPECT_NEAR(ops::cross_entropy_forward(probs.data(), big.data(), t, 1, V, ignore, &counted), 0.0, 1e-12);
  const int64_t out_of_range[1] = {V};
  EXPECT_THROW(ops::cross_entropy_forward(probs.data(), big.data(), out_of_range, 1, V, ignore, &counted),
               std::out_of_range);
  const int64_t all_ignored[1] = {ignore};
  EXPECT_EQ(ops::cross_entropy_forward(probs.data(), big.data(), all_ignored, 1, V, ignore, &counted), 0.0);
  EXPECT_EQ(counted, 0);
}

TEST(Ops, AttentionGradientsWithPaddingAndCausalMasks) {
  std::mt19937_64 rng(7);
  for (bool causal : {false, true}) {
    const ops::AttentionShape shape{2, 5, 2, 3, causal};
    const int64_t n = shape.B * shape.T * shape.H * shape.D;
    Vec q = random_vec(rng, n), k = random_vec(rng, n), v = random_vec(rng, n);
    const Vec g = random_vec(rng, n);
    const std::vector<int64_t> key_mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};  // batch 1: 3 real tokens
    Vec out(n), att(shape.B * shape.H * shape.T * shape.T);
    auto loss = [&] {
      ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), key_mask.data(), shape);
      return dot(out, g);
    };
    loss();
    // Forward against a per-element evaluation of softmax(q·kᵀ/√D + mask)·v.
    const int64_t C = shape.H * shape.D;
    for (int64_t b = 0; b < shape.B; ++b) {
      for (int64_t h = 0; h < shape.H; ++h) {
        for (int64_t t = 0; t < shape.T; ++t) {
          std::vector<double> p(shape.T);
          double sum = 0;
          for (int64_t j = 0; j < shape.T; ++j) {
            const bool visible = key_mask[b * shape.T + j] && (!causal || j <= t);
            double sc = 0;
            for (int64_t d = 0; d < shape.D; ++d) sc += q[(b * shape.T + t) * C + h * shape.D + d] * k[(b * shape.T + j) * C + h * shape.D + d];
            p[j] = visible ? std::exp(sc / std::sqrt(3.0)) : 0.0;
            sum += p[j];
          }
          for (int64_t j = 0; j < shape.T; ++j) {
            EXPECT_NEAR(att[((b * shape.H + h) * shape.T + t) * shape.T + j], p[j] / sum, 1e-14);
          }
          for (int64_t d = 0; d < shape.D; ++d) {
            double o = 0;
            for (int64_t j = 0; j < shape.T; ++j) o += p[j] / sum * v[(b * shape.T + j) * C + h * shape.D + d];
            EXPECT_NEAR(out[(b * shape.T + t) * C + h * shape.D + d], o, 1e-13);
          }
        }
      }
    }
    Vec dq(n, 0.0), dk(n, 0.0), dv(n, 0.0);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(),
                            v.data(), shape);
    expect_gradient("dq", q, dq, loss);
    expect_gradient("dk", k, dk, loss);
    expect_gradient("dv", v, dv, loss);
    // fp32 agrees with fp64.
    std::vector<float> of(n), af(att.size());
    const auto qf = to_f32(q), kf = to_f32(k), vf = to_f32(v);
    ops::attention_forward(of.data(), af.data(), qf.data(), kf.data(), vf.data(), key_mask.data(), shape);
    loss();
    expect_close_fp32(of, out);
  }
}

TEST(Ops, AttentionProbabilityDropoutGradients) {
  std::mt19937_64 rng(11);
  ops::AttentionShape shape{2, 6, 2, 4, true};
  shape.dropout_p = 0.3;
  shape.dropout_seed = 1234;
  const int64_t n = shape.B * shape.T * shape.H * shape.D;
  Vec q = random_vec(rng, n), k = random_vec(rng, n), v = random_vec(rng, n);
  const Vec g = random_vec(rng, n);
  Vec out(n), att(shape.B * shape.H * shape.T * shape.T), plain(n);
  auto loss = [&] {
    ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), nullptr, shape);
    return dot(out, g);
  };
  loss();
  ops::AttentionShape no_dropout = shape;
  no_dropout.dropout_p = 0;
  Vec att_plain(att.size());
  ops::attention_forward(plain.data(), att_plain.data(), q.data(), k.data(), v.data(), nullptr, no_dropout);
  EXPECT_EQ(att, att_plain);      // the kept probabilities are the pre-dropout ones
  EXPECT_NE(out, plain);          // but the output used dropped ones
  Vec dq(n, 0.0), dk(n, 0.0), dv(n, 0.0);
  ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(), shape);
  expect_gradient("dq", q, dq, loss);
  expect_gradient("dk", k, dk, loss);
  expect_gradient("dv", v, dv, loss);
}

TEST(Ops, AttentionRowWithNoVisibleKeyIsUniformLikeHuggingFace) {
  // HF adds finfo(float32).min instead of −inf, so an all-padding row attends uniformly (no NaN).
  const ops::AttentionShape shape{1, 3, 1, 2, false};
  const Vec q = {1, 2, 3, 4, 5, 6}, k = {0.5, -1, 2, 0.25, -3, 1}, v = {1, 0, 0, 1, 2, 2};
  const std::vector<int64_t> none = {0, 0, 0};
  Vec out(6), att(9);
  ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), none.data(), shape);
  for (double p : att) EXPECT_NEAR(p, 1.0 / 3, 1e-12);
  EXPECT_NEAR(out[0], 1.0, 1e-12);
  EXPECT_NEAR(out[1], 1.0, 1e-12);
}

TEST(Ops, DropoutKeepsTheRightFractionAndRegeneratesItsMask) {
  const int64_t n = 200000;
  const double p = 0.1;
  std::vector<float> x(n, 1.0f), y(n), dx(n, 0.0f), g(n, 2.0f);
  ops::dropout_forward(y.data(), x.data(), n, p, 42);
  ops::dropout_backward(dx.data(), g.data(), n, p, 42);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(y[i], 1.0f / 0.9f);
      EXPECT_FLOAT_EQ(dx[i], 2.0f / 0.9f);  // the backward regenerates the same mask
    } else {
      EXPECT_EQ(dx[i], 0.0f);
    }
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.9, 0.005);
  std::vector<float> y2(n);
  ops::dropout_forward(y2.data(), x.data(), n, p, 43);
  EXPECT_NE(y, y2) << "another seed, another mask";
  ops::dropout_forward(y2.data(), x.data(), n, 0.0, 7);
  EXPECT_EQ(y2, x) << "p = 0 is the identity";
}

TEST(Ops, SinusoidalTableIsVaswaniEq) {
  const int64_t P = 50, C = 16;
  std::vector<float> table(P * C);
  ops::sinusoidal_table(table.data(), P, C);
  for (int64_t m = 0; m < P; ++m) {
    for (int64_t i = 0; i < C / 2; ++i) {
      const double angle = m / std::pow(10000.0, 2.0 * i / C);
      EXPECT_NEAR(table[m * C + 2 * i], std::sin(angle), 1e-7);
      EXPECT_NEAR(table[m * C + 2 * i + 1], std::cos(angle), 1e-7);
    }
  }
  std::vector<float> x(2 * 3 * C, 1.0f);
  ops::add_positions(x.data(), table.data(), 2, 3, C);
  EXPECT_FLOAT_EQ(x[(1 * 3 + 2) * C + 1], 1.0f + table[2 * C + 1]);  // batch 1, token 2
  EXPECT_THROW(ops::sinusoidal_table(table.data(), P, 15), std::invalid_argument);
}

// ---- fp32 fast paths --------------------------------------------------------------------------

// Values that are exactly fp32, so fp32 and fp64 runs see the same inputs.
Vec random_f32_vec(std::mt19937_64& rng, size_t n, double scale = 1.0, double shift = 0.0) {
  Vec v = random_vec(rng, n, scale, shift);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

// Runs body once per SIMD target that this CPU supports and the ops were built for (dispatch alone
// only ever exercises the best one), then restores the normal choice.
void for_each_simd_target(const std::function<void()>& body) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    EXPECT_STREQ(ops::vmath_target(), hwy::TargetName(target));
    body();
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Vmath, ErfAndErfcMatchStdOverADenseRangeTailsAndSpecials) {
  for_each_simd_target([] {
    std::vector<float> x;
    for (int64_t i = -100000; i <= 100000; ++i) x.push_back(static_cast<float>(i * 1e-4));  // [-10, 10]
    for (float t : {4.0f, 4.5f, 6.0f, 9.99f, 26.0f, 1e10f, 3.4e38f}) {
      x.push_back(t);
      x.push_back(-t);
    }
    const float tiny[] = {1e-45f, 1e-40f, 1.17549435e-38f, 1e-20f, 1e-7f};  // subnormals to small normals
    for (float t : tiny) {
      x.push_back(t);
      x.push_back(-t);
    }
    std::vector<float> erf(x.size()), erfc(x.size());
    ops::erf_f32(erf.data(), x.data(), static_cast<int64_t>(x.size()));
    ops::erfc_f32(erfc.data(), x.data(), static_cast<int64_t>(x.size()));
    double erf_err = 0, erfc_err = 0, erfc_rel_2 = 0, erfc_rel_4 = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double xd = x[i];
      erf_err = std::max(erf_err, std::fabs(erf[i] - std::erf(xd)));
      erfc_err = std::max(erfc_err, std::fabs(erfc[i] - std::erfc(xd)));
      const double rel = std::fabs(erfc[i] - std::erfc(xd)) / std::erfc(xd);
      if (xd >= 0.875 && xd < 2) erfc_rel_2 = std::max(erfc_rel_2, rel);
      if (xd >= 2 && xd < 4) erfc_rel_4 = std::max(erfc_rel_4, rel);
      ASSERT_EQ(std::signbit(erf[i]), std::signbit(x[i])) << x[i];
    }
    EXPECT_LE(erf_err, 1e-7);
    EXPECT_LE(erfc_err, 1.5e-7);
    EXPECT_LE(erfc_rel_2, 1e-5);  // the tail does not cancel: 1 − erf would be off by ~1e-7/erfc
    EXPECT_LE(erfc_rel_4, 2e-4);
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity(), 0.0f, -0.0f};
    float e[5], c[5];
    ops::erf_f32(e, special, 5);
    ops::erfc_f32(c, special, 5);
    EXPECT_TRUE(std::isnan(e[0]));
    EXPECT_TRUE(std::isnan(c[0]));
    EXPECT_EQ(e[1], 1.0f);
    EXPECT_EQ(c[1], 0.0f);
    EXPECT_EQ(e[2], -1.0f);
    EXPECT_EQ(c[2], 2.0f);
    EXPECT_EQ(e[3], 0.0f);
    EXPECT_FALSE(std::signbit(e[3]));
    EXPECT_TRUE(std::signbit(e[4]));
    EXPECT_EQ(c[3], 1.0f);
    EXPECT_EQ(c[4], 1.0f);
  });
}

TEST(Vmath, ExpMatchesStdExpOverTheFloatRangeAndTails) {
  for_each_simd_target([] {
    std::vector<float> x;
    for (double v = -103.9; v <= 88.72; v += 7.3e-4) x.push_back(static_cast<float>(v));
    for (float t : {-87.0f, -87.33654f, -88.0f, -100.0f, -103.9f, 0.0f, 1e-8f, -1e-8f, 88.72f}) x.push_back(t);
    std::vector<float> y(x.size());
    ops::exp_f32(y.data(), x.data(), static_cast<int64_t>(x.size()));
    double worst_ulp = 0, worst_subnormal = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      const float rf = static_cast<float>(ref);
      if (rf >= std::numeric_limits<float>::min()) {
        const double ulp = std::nextafter(rf, std::numeric_limits<float>::infinity()) - rf;
        worst_ulp = std::max(worst_ulp, std::fabs(y[i] - ref) / ulp);
      } else {  // gradual underflow, in units of the smallest subnormal
        worst_subnormal = std::max(worst_subnormal, std::fabs(y[i] - ref) / 0x1p-149);
      }
    }
    EXPECT_LE(worst_ulp, 2.0);
    EXPECT_LE(worst_subnormal, 8.0);
    // Every length: the partial last vector gives the same values as full vectors.
    for (int64_t n = 1; n <= 40; ++n) {
      std::vector<float> part(x.begin(), x.begin() + n);
      ops::exp_f32(part.data(), part.data(), n);  // in place
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], y[i]) << n;
    }
    const float special[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::infinity(), 88.8f, -104.5f, -1e30f};
    float e[7];
    ops::exp_f32(e, special, 7);
    EXPECT_EQ(e[0], 1.0f);
    EXPECT_TRUE(std::isnan(e[1]));
    EXPECT_EQ(e[2], 0.0f);
    EXPECT_EQ(e[3], std::numeric_limits<float>::infinity());
    EXPECT_EQ(e[4], std::numeric_limits<float>::infinity());
    EXPECT_EQ(e[5], 0.0f);
    EXPECT_EQ(e[6], 0.0f);
  });
}

TEST(Ops, GeluFp32FastPathAgreesWithFp64) {
  for_each_simd_target([] {
    std::mt19937_64 rng(21);
    Vec x = random_f32_vec(rng, 40003, 3.0);  // several chunks, and a partial vector at the end
    const double edges[] = {0,   -0.0, 1e-30, -1e-30, 0.6187, -0.6187, 1.2374, -1.2374, 5.6,
                            -5.6, 5.7, -5.7,  8,      -8,     12,      -12,    30,      -30};
    for (size_t i = 0; i < std::size(edges); ++i) x[i] = edges[i];
    const size_t n = x.size();
    std::vector<float> yf(n);
    Vec yd(n);
    const auto xf = to_f32(x);
    ops::gelu_forward(yf.data(), xf.data(), static_cast<int64_t>(n));
    ops::gelu_forward(yd.data(), x.data(), static_cast<int64_t>(n));
    double err = 0;
    for (size_t i = 0; i < n; ++i) err = std::max(err, std::fabs(yf[i] - yd[i]) / std::max(1.0, std::fabs(yd[i])));
    EXPECT_LE(err, 1.5e-7);
    // Backward accumulates: start from a nonzero gradient.
    const Vec g0 = random_f32_vec(rng, n), dy = random_f32_vec(rng, n);
    auto gf = to_f32(g0);
    Vec gd = g0;
    const auto dyf = to_f32(dy);
    ops::gelu_backward(gf.data(), xf.data(), dyf.data(), static_cast<int64_t>(n));
    ops::gelu_backward(gd.data(), x.data(), dy.data(), static_cast<int64_t>(n));
    err = 0;
    for (size_t i = 0; i < n; ++i) {
      err = std::max(err, std::fabs(gf[i] - gd[i]) / (1.0 + std::fabs(g0[i]) + std::fabs(dy[i])));
    }
    EXPECT_LE(err, 3e-7);
    const float inf = std::numeric_limits<float>::infinity();
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), inf};
    float out[2];
    ops::gelu_forward(out, special, 2);
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], inf);
  });
}

// softmax(q·kᵀ/√D + mask)·v evaluated per element in double, with Hugging Face's semantics: keys
// masked by padding or causality get probability 0, and a row that sees no key attends uniformly.
void reference_attention(Vec& att, Vec& out, const Vec& q, const Vec& k, const Vec& v, const int64_t* key_mask,
                         const ops::AttentionShape& s) {
  const int64_t C = s.H * s.D;
  att.assign(s.B * s.H * s.T * s.T, 0.0);
  out.assign(s.B * s.T * C, 0.0);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      for (int64_t t = 0; t < s.T; ++t) {
        Vec sc(s.T, 0.0);
        std::vector<bool> visible(s.T);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < s.T; ++j) {
          visible[j] = (!key_mask || key_mask[b * s.T + j]) && (!s.causal || j <= t);
          for (int64_t d = 0; d < s.D; ++d) {
            sc[j] += q[(b * s.T + t) * C + h * s.D + d] * k[(b * s.T + j) * C + h * s.D + d];
          }
          sc[j] /= std::sqrt(static_cast<double>(s.D));
          if (visible[j]) mx = std::max(mx, sc[j]);
        }
        const bool none = mx == -std::numeric_limits<double>::infinity();
        double sum = 0;
        for (int64_t j = 0; j < s.T; ++j) {
          sc[j] = none ? 1.0 : visible[j] ? std::exp(sc[j] - mx) : 0.0;
          sum += sc[j];
        }
        double* row = att.data() + ((b * s.H + h) * s.T + t) * s.T;
        for (int64_t j = 0; j < s.T; ++j) row[j] = sc[j] / sum;
        for (int64_t d = 0; d < s.D; ++d) {
          double o = 0;
          for (int64_t j = 0; j < s.T; ++j) o += row[j] * v[(b * s.T + j) * C + h * s.D + d];
          out[(b * s.T + t) * C + h * s.D + d] = o;
        }
      }
    }
  }
}

// The backward PyTorch's autograd takes through that forward (the mask is a constant added to
// the scores, so it passes p ⊙ (dp − Σ p·dp) even for uniform rows, whose scores it flattens).
void reference_attention_backward(Vec& dq, Vec& dk, Vec& dv, const Vec& dout, const Vec& att, const Vec& q,
                                  const Vec& k, const Vec& v, const ops::AttentionShape& s) {
  const int64_t C = s.H * s.D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      auto at = [&](const Vec& x, int64_t t, int64_t d) { return x[(b * s.T + t) * C + h * s.D + d]; };
      for (int64_t t = 0; t < s.T; ++t) {
        const double* p = att.data() + ((b * s.H + h) * s.T + t) * s.T;
        Vec dp(s.T, 0.0);
        double inner = 0;
        for (int64_t j = 0; j < s.T; ++j) {
          for (int64_t d = 0; d < s.D; ++d) dp[j] += at(dout, t, d) * at(v, j, d);
          inner += p[j] * dp[j];
        }
        for (int64_t j = 0; j < s.T; ++j) {
          const double ds = p[j] * (dp[j] - inner) * scale;
          for (int64_t d = 0; d < s.D; ++d) {
            dq[(b * s.T + t) * C + h * s.D + d] += ds * at(k, j, d);
            dk[(b * s.T + j) * C + h * s.D + d] += ds * at(q, t, d);
            dv[(b * s.T + j) * C + h * s.D + d] += p[j] * at(dout, t, d);
          }
        }
      }
    }
  }
}

void expect_all_near(const char* what, const Vec& a, const Vec& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << what << "[" << i << "]";
}

TEST(Ops, AttentionAcrossRowBlocksWithPaddingCausalAndEmptyRows) {
  // T spans several row blocks (one partial). Batch 0 has an interior and a trailing run of padded
  // keys. Batch 1 is left-padded: with `empty`, its first 80 causal rows see no key at all and
  // attend uniformly (forward flat in q and k there, so no finite differences); otherwise key 0
  // stays real and the rows up to 80 see only it.
  std::mt19937_64 rng(22);
  const int64_t B = 2, T = 140;
  struct Config {
    bool causal, empty;
    double dropout;
  };
  for (const Config cfg : {Config{true, false, 0.0}, Config{false, true, 0.0}, Config{true, false, 0.2},
                           Config{true, true, 0.0}}) {
    SCOPED_TRACE(testing::Message() << "causal " << cfg.causal << " empty rows " << cfg.empty << " dropout "
                                    << cfg.dropout);
    std::vector<int64_t> key_mask(B * T, 1);
    key_mask[10] = 0;
    for (int64_t j = 130; j < T; ++j) key_mask[j] = 0;
    for (int64_t j = cfg.empty ? 0 : 1; j < 80; ++j) key_mask[T + j] = 0;
    ops::AttentionShape shape{B, T, 1, 2, cfg.causal, cfg.dropout, 99};
    const int64_t n = shape.B * shape.T * shape.H * shape.D;
    Vec q = random_f32_vec(rng, n), k = random_f32_vec(rng, n), v = random_f32_vec(rng, n);
    const Vec g = random_f32_vec(rng, n);
    Vec out(n), att(shape.B * shape.H * shape.T * shape.T);
    auto loss = [&] {
      ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), key_mask.data(), shape);
      return dot(out, g);
    };
    loss();
    Vec att_ref, out_ref;
    reference_attention(att_ref, out_ref, q, k, v, key_mask.data(), shape);
    expect_all_near("att", att, att_ref, 1e-14);
    Vec dq(n, 0.0), dk(n, 0.0), dv(n, 0.0);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(),
                            shape);
    if (cfg.dropout == 0) {
      expect_all_near("out", out, out_ref, 1e-13);
      Vec dq_ref, dk_ref, dv_ref;
      reference_attention_backward(dq_ref, dk_ref, dv_ref, g, att_ref, q, k, v, shape);
      expect_all_near("dq", dq, dq_ref, 1e-12);
      expect_all_near("dk", dk, dk_ref, 1e-12);
      expect_all_near("dv", dv, dv_ref, 1e-12);
    }
    if (!(cfg.causal && cfg.empty)) {
      expect_gradient("dq", q, dq, loss, 11);
      expect_gradient("dk", k, dk, loss, 11);
      expect_gradient("dv", v, dv, loss, 11);
    }
    // fp32: the vectorised softmax, forward and backward, against fp64, on every SIMD target.
    loss();
    for_each_simd_target([&] {
      std::vector<float> of(n), af(att.size()), dqf(n, 0.0f), dkf(n, 0.0f), dvf(n, 0.0f);
      const auto qf = to_f32(q), kf = to_f32(k), vf = to_f32(v), gf = to_f32(g);
      ops::attention_forward(of.data(), af.data(), qf.data(), kf.data(), vf.data(), key_mask.data(), shape);
      expect_close_fp32(of, out);
      expect_close_fp32(af, att);
      for (size_t i = 0; i < att.size(); ++i) {
        if (att_ref[i] == 0.0) {
          ASSERT_EQ(af[i], 0.0f) << "a key the row cannot see has probability 0 exactly: " << i;
        }
      }
      for (int64_t t = 0; t < 80 && cfg.causal && cfg.empty; ++t) {  // uniform over all T keys
        for (int64_t j = 0; j < T; ++j) ASSERT_EQ(af[(T + t) * T + j], static_cast<float>(1.0 / T));
      }
      ops::attention_backward(dqf.data(), dkf.data(), dvf.data(), gf.data(), af.data(), qf.data(), kf.data(),
                              vf.data(), shape);
      expect_close_fp32(dqf, dq, 1e-5);
      expect_close_fp32(dkf, dk, 1e-5);
      expect_close_fp32(dvf, dv, 1e-5);
    });
  }
}

TEST(Ops, LinearBiasGradientIsTheColumnSumInRowOrder) {
  std::mt19937_64 rng(23);
  const int64_t N = 300, IC = 3, OC = 130;  // large enough for the threaded column bands
  const auto dout = to_f32(random_vec(rng, N * OC)), x = to_f32(random_vec(rng, N * IC)),
             w = to_f32(random_vec(rng, OC * IC));
  std::vector<float> dw(OC * IC, 0.0f), db = to_f32(random_vec(rng, OC)), expected = db;
  ops::linear_backward<float>(nullptr, dw.data(), db.data(), dout.data(), x.data(), w.data(), N, IC, OC);
  for (int64_t o = 0; o < OC; ++o) {
    float sum = 0;
    for (int64_t n = 0; n < N; ++n) sum += dout[n * OC + o];
    expected[o] += sum;
  }
  EXPECT_EQ(db, expected);
}

TEST(Ops, LayerNormWideRowsFp32AgreesAndFp64ParameterGradientsKeepTheirSums) {
  std::mt19937_64 rng(24);
  const int64_t N = 40, C = 1003;  // threaded rows and channel bands; C not a multiple of the partial sums
  const Vec x = random_f32_vec(rng, N * C, 2.0, 3.0), w = random_f32_vec(rng, C, 0.3, 1.0),
            b = random_f32_vec(rng, C), g = random_f32_vec(rng, N * C);
  Vec y(N * C), mean(N), rstd(N), dx(N * C, 0.0), dw(C, 0.0), db(C, 0.0);
  ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-5);
  ops::layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
  // fp64 parameter gradients: channel by channel over rows in order, as a plain loop sums them.
  for (int64_t c = 0; c < C; ++c) {
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      sw += g[n * C + c] * ((x[n * C + c] - mean[n]) * rstd[n]);
      sb += g[n * C + c];
    }
    ASSERT_EQ(dw[c], sw) << c;
    ASSERT_EQ(db[c], sb) << c;
  }
  std::vector<float> yf(N * C), mf(N), rf(N), dxf(N * C, 0.0f), dwf(C, 0.0f), dbf(C, 0.0f);
  const auto xf = to_f32(x), wf = to_f32(w), bf = to_f32(b), gf = to_f32(g);
  ops::layernorm_forward(yf.data(), mf.data(), rf.data(), xf.data(), wf.data(), bf.data(), N, C, 1e-5);
  ops::layernorm_backward(dxf.data(), dwf.data(), dbf.data(), gf.data(), xf.data(), wf.data(), mf.data(), rf.data(),
                          N, C);
  expect_close_fp32(yf, y);
  expect_close_fp32(dxf, dx);
  expect_close_fp32(dwf, dw, 1e-6);
  expect_close_fp32(dbf, db, 1e-6);
}

// The training loop's resume test needs bit-identical steps; element-wise ops, row-wise
// reductions and attention must also give the same bits whatever the thread count.
TEST(Ops, Fp32ResultsDoNotDependOnTheThreadCount) {
  std::mt19937_64 rng(25);
  const int64_t N = 256, C = 384, V = 97;
  const auto x = to_f32(random_vec(rng, N * C)), dy = to_f32(random_vec(rng, N * C)),
             w = to_f32(random_vec(rng, C, 0.3, 1.0)), logits = to_f32(random_vec(rng, N * V, 2.0));
  std::vector<int64_t> targets(N);
  for (int64_t i = 0; i < N; ++i) targets[i] = i % 5 == 0 ? -100 : (i * 7) % V;
  const ops::AttentionShape shape{2, 64, 3, 16, true};
  const int64_t na = shape.B * shape.T * shape.H * shape.D;
  const auto q = to_f32(random_vec(rng, na)), k = to_f32(random_vec(rng, na)), v = to_f32(random_vec(rng, na)),
             da = to_f32(random_vec(rng, na));
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<std::vector<float>> r;
    std::vector<float> y(N * C), dx(N * C, 0.0f), mean(N), rstd(N), dw(C, 0.0f), db(C, 0.0f);
    ops::gelu_forward(y.data(), x.data(), N * C);
    ops::gelu_backward(dx.data(), x.data(), dy.data(), N * C);
    r.push_back(y);
    r.push_back(dx);
    ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), w.data(), N, C, 1e-5);
    ops::layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(), rstd.data(),
                            N, C);
    r.insert(r.end(), {y, dx, dw, db});
    std::vector<float> dwl(C * C, 0.0f), dbl(C, 0.0f);
    ops::linear_backward<float>(nullptr, dwl.data(), dbl.data(), dy.data(), x.data(), nullptr, N, C, C);
    r.push_back(dbl);
    std::vector<float> probs(N * V);
    int64_t counted = 0;
    const double ce = ops::cross_entropy_forward(probs.data(), logits.data(), targets.data(), N, V, -100, &counted);
    std::vector<float> ce_bits(2);
    std::memcpy(ce_bits.data(), &ce, sizeof ce);  // compared bit for bit
    r.push_back(ce_bits);
    r.push_back(probs);
    std::vector<float> out(na), att(shape.B * shape.H * shape.T * shape.T), dq(na, 0.0f), dk(na, 0.0f), dv(na, 0.0f);
    ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), nullptr, shape);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), da.data(), att.data(), q.data(), k.data(), v.data(),
                            shape);
    r.insert(r.end(), {out, att, dq, dk, dv});
    omp_set_num_threads(saved);
    return r;
  };
  const auto one = run(1), several = run(3);
  ASSERT_EQ(one.size(), several.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], several[i]) << "result " << i;
}

}  // namespace
