// The engine's ops: every backward against central finite differences in float64 (loss = Σ out·g
// for a random g), fp32 forwards against fp64, known values, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/position.h"

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

// Central differences of `loss` with respect to every element of `param`, against `analytic`.
void expect_gradient(const char* what, Vec& param, const Vec& analytic, const std::function<double()>& loss) {
  ASSERT_EQ(param.size(), analytic.size()) << what;
  for (size_t i = 0; i < param.size(); ++i) {
    const double saved = param[i], h = 1e-6 * std::max(1.0, std::fabs(saved));
    param[i] = saved + h;
    const double up = loss();
    param[i] = saved - h;
    const double down = loss();
    param[i] = saved;
    const double numeric = (up - down) / (2 * h);
    EXPECT_NEAR(analytic[i], numeric, 1e-6 * std::max(1.0, std::fabs(numeric))) << what << "[" << i << "]";
  }
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

}  // namespace
