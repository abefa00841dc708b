// Linear attention with RoPE (RoFormer eq. 19, src/ops/linear_attention.h): the O(N) op against a
// direct O(N²) evaluation of eq. 19 in double, float against double, the recurrent step against the
// batched causal forward, the causal chunks against the token-by-token sums, gradients against central
// differences in float64, RoPE's relative-position property, FAVOR+ random features, stabilisation at
// extreme logits, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "grad_check.h"
#include "ops/ops_testing.h"
#include "ops/linear_attention.h"
#include "rope/rope.hpp"

namespace {

using ops::FeatureMap;
using ops::LinearAttentionShape;
using ops_testing::random_vec;
using ops_testing::to_f32;
using ops_testing::Vec;

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max |a − b| relative to max(1e-300, max |b|).
template <typename A>
double rel_err(const A& a, const Vec& b) {
  double err = 0;
  for (size_t i = 0; i < b.size(); ++i) err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
  return err / std::max(1e-300, max_abs(b));
}

LinearAttentionShape make_shape(int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv, bool causal, FeatureMap fm,
                                bool rope, int64_t start = 0, int64_t m = 6) {
  LinearAttentionShape s{B, T, H, Dk, Dv, causal};
  s.feature_map = fm;
  s.favor_features = fm == FeatureMap::favor ? m : 0;
  s.rope = rope;
  s.start = start;
  return s;
}

std::string describe(const LinearAttentionShape& s) {
  const rope_config& c = s.rope_cfg;
  return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) +
         " Dk=" + std::to_string(s.Dk) + " Dv=" + std::to_string(s.Dv) + (s.causal ? " causal" : " full") +
         (s.feature_map == FeatureMap::favor ? " favor m=" + std::to_string(s.favor_features) : " elu+1") +
         (s.rope ? " rope start=" + std::to_string(s.start) + (c.layout == ROPE_LAYOUT_HALF ? " half" : " interleaved") +
                       " base=" + std::to_string(c.base) + " scaling=" + std::to_string(c.scaling.type) +
                       (c.xpos.enabled ? " xpos" : "")
                 : " no-rope") +
         " eps=" + std::to_string(s.eps) + (s.causal ? " chunk=" + std::to_string(s.chunk) : "");
}

// Eq. 19 evaluated directly, O(N²), in double, with unstabilised features. The rotation is the
// plain formula: θ_i and the attention factor from a librope plan of rope_cfg (head_dim F, checked
// by the rope tests), cos/sin from std::cos/std::sin, pairs (2i, 2i+1) or (i, i + F/2), and xPos's
// ζ_i^(±m/scale_base) for q (+) and k (−).
Vec reference(const Vec& q, const Vec& k, const Vec& v, const Vec& W, const LinearAttentionShape& s) {
  const bool favor = s.feature_map == FeatureMap::favor;
  const int64_t F = favor ? s.favor_features : s.Dk, Ck = s.H * s.Dk, Cv = s.H * s.Dv;
  rope_config rc = s.rope_cfg;
  rc.head_dim = rc.rot_dim = static_cast<int32_t>(F);
  std::vector<double> theta;
  double attention = 1;
  if (s.rope) {
    rope::Plan plan(rc);
    plan.set_seq_len(s.rope_seq_len > 0 ? s.rope_seq_len : s.start + s.T);
    theta = plan.inv_freq();
    rope::check(rope_plan_attention_factor(plan.get(), &attention));
  }
  auto phi = [&](const double* x) {
    Vec f(F);
    double half = 0;
    for (int64_t d = 0; d < s.Dk; ++d) half += 0.5 * x[d] * x[d];
    for (int64_t j = 0; j < F; ++j) {
      if (favor) {
        double wx = 0;
        for (int64_t d = 0; d < s.Dk; ++d) wx += W[j * s.Dk + d] * x[d];
        f[j] = std::exp(wx - half) / std::sqrt(static_cast<double>(F));
      } else {
        f[j] = x[j] > 0 ? x[j] + 1 : std::exp(x[j]);
      }
    }
    return f;
  };
  auto rotated = [&](Vec f, int64_t t, bool is_key) {
    if (!s.rope) return f;
    const int64_t m = s.start + t;
    for (int64_t i = 0; i < F / 2; ++i) {
      const double a = static_cast<double>(m) * theta[i];
      double scale = attention;
      if (rc.xpos.enabled) {
        const double zeta = (2.0 * i / F + rc.xpos.gamma) / (1 + rc.xpos.gamma);
        scale *= std::pow(zeta, (is_key ? -1.0 : 1.0) * static_cast<double>(m) / rc.xpos.scale_base);
      }
      const int64_t i0 = rc.layout == ROPE_LAYOUT_HALF ? i : 2 * i, i1 = rc.layout == ROPE_LAYOUT_HALF ? i + F / 2 : 2 * i + 1;
      const double x0 = f[i0], x1 = f[i1];
      f[i0] = scale * (x0 * std::cos(a) - x1 * std::sin(a));
      f[i1] = scale * (x1 * std::cos(a) + x0 * std::sin(a));
    }
    return f;
  };
  Vec out(s.B * s.T * Cv);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.H; ++h) {
      std::vector<Vec> pq, pk;
      for (int64_t t = 0; t < s.T; ++t) {
        pq.push_back(phi(&q[(b * s.T + t) * Ck + h * s.Dk]));
        pk.push_back(phi(&k[(b * s.T + t) * Ck + h * s.Dk]));
      }
      for (int64_t m = 0; m < s.T; ++m) {
        const Vec qr = rotated(pq[m], m, false);
        double den = s.eps;
        Vec num(s.Dv, 0.0);
        for (int64_t n = 0; n < (s.causal ? m + 1 : s.T); ++n) {
          const Vec kr = rotated(pk[n], n, true);
          double w = 0;
          for (int64_t j = 0; j < F; ++j) {
            w += qr[j] * kr[j];
            den += pq[m][j] * pk[n][j];
          }
          for (int64_t j = 0; j < s.Dv; ++j) num[j] += w * v[(b * s.T + n) * Cv + h * s.Dv + j];
        }
        for (int64_t j = 0; j < s.Dv; ++j) out[(b * s.T + m) * Cv + h * s.Dv + j] = num[j] / den;
      }
    }
  }
  return out;
}

// Random q, k, v (and W for favor) for shape s.
struct Inputs {
  Vec q, k, v, W;
};

Inputs random_inputs(std::mt19937_64& rng, const LinearAttentionShape& s, double scale = 0.7) {
  const int64_t N = s.B * s.T * s.H;
  Inputs in{random_vec(rng, N * s.Dk, scale), random_vec(rng, N * s.Dk, scale), random_vec(rng, N * s.Dv), {}};
  if (s.feature_map == FeatureMap::favor) {
    in.W.resize(s.favor_features * s.Dk);
    ops::favor_projection(in.W.data(), s.favor_features, s.Dk, rng(), true);
  }
  return in;
}

template <typename T>
std::vector<T> forward(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
                       const std::vector<T>& W, const LinearAttentionShape& s, std::vector<T>* saved = nullptr) {
  std::vector<T> out(s.B * s.T * s.H * s.Dv);
  if (saved) saved->assign(ops::linear_attention_saved_size(s), T(0));
  ops::linear_attention_forward(out.data(), saved ? saved->data() : nullptr, q.data(), k.data(), v.data(),
                                W.empty() ? nullptr : W.data(), s);
  return out;
}

// Every combination of feature map, causality and RoPE.
std::vector<LinearAttentionShape> modes(int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv, int64_t start) {
  std::vector<LinearAttentionShape> all;
  for (FeatureMap fm : {FeatureMap::elu_plus_one, FeatureMap::favor}) {
    for (bool causal : {false, true}) {
      for (bool rope : {false, true}) all.push_back(make_shape(B, T, H, Dk, Dv, causal, fm, rope, start));
    }
  }
  return all;
}

TEST(LinearAttention, MatchesDirectQuadraticEvaluation) {
  std::mt19937_64 rng(1);
  const int64_t dims[][5] = {{1, 1, 1, 2, 1}, {2, 5, 3, 4, 3}, {1, 9, 2, 6, 5}, {3, 4, 1, 8, 2}};
  for (const auto& d : dims) {
    for (int64_t start : {0, 37}) {
      for (LinearAttentionShape s : modes(d[0], d[1], d[2], d[3], d[4], start)) {
        if (s.feature_map == FeatureMap::favor) s.favor_features = d[3] == 2 ? 4 : 10;
        const Inputs in = random_inputs(rng, s);
        EXPECT_LE(rel_err(forward(in.q, in.k, in.v, in.W, s), reference(in.q, in.k, in.v, in.W, s)), 1e-12)
            << describe(s);
      }
    }
  }
}

// eps belongs to the unstabilised denominator: with eps comparable to it, the stabilised op (which
// shifts every FAVOR logit) must still agree with eq. 19 + eps.
TEST(LinearAttention, EpsIsAddedToTheUnstabilisedDenominator) {
  std::mt19937_64 rng(2);
  for (LinearAttentionShape s : modes(2, 6, 2, 4, 3, 5)) {
    s.eps = 0.5;
    const Inputs in = random_inputs(rng, s, 1.5);
    EXPECT_LE(rel_err(forward(in.q, in.k, in.v, in.W, s), reference(in.q, in.k, in.v, in.W, s)), 1e-12) << describe(s);
    LinearAttentionShape no_eps = s;
    no_eps.eps = 0;  // and eps does matter here
    EXPECT_GT(rel_err(forward(in.q, in.k, in.v, in.W, no_eps), reference(in.q, in.k, in.v, in.W, s)), 1e-3)
        << describe(s);
  }
}

// Loss Σ out·g; central differences for every element of q, k and v, in every mode. Gradients
// accumulate into what the buffers held.
void expect_gradients_match_central_differences(const LinearAttentionShape& s, std::mt19937_64& rng) {
  {
    Inputs in = random_inputs(rng, s);
    const Vec g = random_vec(rng, s.B * s.T * s.H * s.Dv);
    Vec saved;
    forward(in.q, in.k, in.v, in.W, s, &saved);
    Vec dq(in.q.size(), 1.0), dk(in.k.size(), 2.0), dv(in.v.size(), 3.0);
    ops::linear_attention_backward(dq.data(), dk.data(), dv.data(), g.data(), saved.data(), in.q.data(), in.k.data(),
                                   in.v.data(), in.W.empty() ? nullptr : in.W.data(), s);
    for (double& x : dq) x -= 1.0;
    for (double& x : dk) x -= 2.0;
    for (double& x : dv) x -= 3.0;
    auto loss = [&] {
      const Vec out = forward(in.q, in.k, in.v, in.W, s);
      double l = 0;
      for (size_t i = 0; i < out.size(); ++i) l += out[i] * g[i];
      return l;
    };
    auto check = [&](const char* what, Vec& param, const Vec& analytic) {
      testing_util::expect_gradient(std::string(what) + " " + describe(s), param, analytic,
                                    testing_util::every(param.size()), loss);
    };
    check("dq", in.q, dq);
    check("dk", in.k, dk);
    check("dv", in.v, dv);
  }
}

TEST(LinearAttention, GradientsMatchCentralDifferences) {
  std::mt19937_64 rng(3);
  for (LinearAttentionShape s : modes(2, 5, 2, 4, 3, 11)) {
    expect_gradients_match_central_differences(s, rng);
    if (!s.causal) continue;
    for (int64_t chunk : {1, 2}) {  // token by token, and chunks of 2 (the last one short)
      s.chunk = chunk;
      expect_gradients_match_central_differences(s, rng);
    }
  }
}

// The causal chunks against the token-by-token prefix sums, in double, forward (outputs and the saved
// buffer) and backward, over chunk sizes that leave short last chunks, a single chunk, and one token;
// falling key norms raise the FAVOR logits ℓ = w·k − ‖k‖²/2, so the running max moves inside chunks
// and across their edges (checked). Float against the double token path too.
TEST(LinearAttention, ChunksMatchTokenByToken) {
  std::mt19937_64 rng(10);
  for (int64_t T : {1, 6, 37}) {
    for (LinearAttentionShape s : modes(2, T, 2, 6, 5, 13)) {
      if (!s.causal) continue;
      Inputs in = random_inputs(rng, s);
      for (size_t i = 0; i < in.k.size(); ++i) in.k[i] *= 2.9 - static_cast<double>(i) / in.k.size() * 2.5;
      const Vec g = random_vec(rng, s.B * s.T * s.H * s.Dv);
      const double* W = in.W.empty() ? nullptr : in.W.data();
      auto run = [&](const LinearAttentionShape& shape, Vec* saved, Vec* dq, Vec* dk, Vec* dv) {
        const Vec out = forward(in.q, in.k, in.v, in.W, shape, saved);
        dq->assign(in.q.size(), 0.5);
        dk->assign(in.k.size(), 0.5);
        dv->assign(in.v.size(), 0.5);
        ops::linear_attention_backward(dq->data(), dk->data(), dv->data(), g.data(), saved->data(), in.q.data(),
                                       in.k.data(), in.v.data(), W, shape);
        return out;
      };
      s.chunk = 1;
      Vec saved1, dq1, dk1, dv1;
      const Vec out1 = run(s, &saved1, &dq1, &dk1, &dv1);
      if (s.feature_map == FeatureMap::favor && T == 37) {  // the shifts (B, T, H) move within and across chunks
        const int64_t n = s.B * T * s.H, F = s.favor_features;
        const double* r = saved1.data() + 2 * n * F + n;
        for (int64_t chunk : {2, 5}) {
          int64_t inside = 0, across = 0;
          for (int64_t b = 0; b < s.B; ++b) {
            for (int64_t h = 0; h < s.H; ++h) {
              for (int64_t t = chunk; t < T; ++t) {  // after the first chunk
                const bool moved = r[(b * T + t) * s.H + h] != r[(b * T + t - 1) * s.H + h];
                (t % chunk == 0 ? across : inside) += moved;
              }
            }
          }
          EXPECT_GT(inside, 0) << "chunk " << chunk << " " << describe(s);
          EXPECT_GT(across, 0) << "chunk " << chunk << " " << describe(s);
        }
      }
      Vec net[3] = {dq1, dk1, dv1};  // the gradients alone, for the float runs (which start from zero)
      for (Vec& d : net) {
        for (double& x : d) x -= 0.5;
      }
      const auto qf = to_f32(in.q), kf = to_f32(in.k), vf = to_f32(in.v), Wf = to_f32(in.W), gf = to_f32(g);
      for (int64_t chunk : {2, 5, 16, 64}) {
        s.chunk = chunk;
        Vec saved, dq, dk, dv;
        EXPECT_LE(rel_err(run(s, &saved, &dq, &dk, &dv), out1), 1e-12) << describe(s);
        EXPECT_LE(rel_err(saved, saved1), 1e-12) << describe(s);
        EXPECT_LE(rel_err(dq, dq1), 1e-12) << "dq " << describe(s);
        EXPECT_LE(rel_err(dk, dk1), 1e-12) << "dk " << describe(s);
        EXPECT_LE(rel_err(dv, dv1), 1e-12) << "dv " << describe(s);
        std::vector<float> saved_f, dqf(dq.size()), dkf(dk.size()), dvf(dv.size());
        EXPECT_LE(rel_err(forward(qf, kf, vf, Wf, s, &saved_f), out1), 1e-5) << "float " << describe(s);
        ops::linear_attention_backward(dqf.data(), dkf.data(), dvf.data(), gf.data(), saved_f.data(), qf.data(),
                                       kf.data(), vf.data(), Wf.empty() ? nullptr : Wf.data(), s);
        if (T > 1) {  // one token: out = v·(1 − eps/den), so dq and dk are eps-sized and float rounding dominates
          EXPECT_LE(rel_err(dqf, net[0]), 2e-5) << "float dq " << describe(s);
          EXPECT_LE(rel_err(dkf, net[1]), 2e-5) << "float dk " << describe(s);
        }
        EXPECT_LE(rel_err(dvf, net[2]), 2e-5) << "float dv " << describe(s);
      }
    }
  }
}

TEST(LinearAttention, FloatMatchesDouble) {
  std::mt19937_64 rng(4);
  for (const LinearAttentionShape& s : modes(2, 16, 3, 8, 4, 100)) {
    const Inputs in = random_inputs(rng, s);
    const Vec g = random_vec(rng, s.B * s.T * s.H * s.Dv);
    const auto qf = to_f32(in.q), kf = to_f32(in.k), vf = to_f32(in.v), Wf = to_f32(in.W), gf = to_f32(g);
    Vec saved;
    std::vector<float> saved_f;
    const Vec out = forward(in.q, in.k, in.v, in.W, s, &saved);
    EXPECT_LE(rel_err(forward(qf, kf, vf, Wf, s, &saved_f), out), 1e-5) << describe(s);
    Vec dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
    std::vector<float> dqf(dq.size()), dkf(dk.size()), dvf(dv.size());
    const double* W = in.W.empty() ? nullptr : in.W.data();
    ops::linear_attention_backward(dq.data(), dk.data(), dv.data(), g.data(), saved.data(), in.q.data(), in.k.data(),
                                   in.v.data(), W, s);
    ops::linear_attention_backward(dqf.data(), dkf.data(), dvf.data(), gf.data(), saved_f.data(), qf.data(), kf.data(),
                                   vf.data(), Wf.empty() ? nullptr : Wf.data(), s);
    EXPECT_LE(rel_err(dqf, dq), 2e-5) << "dq " << describe(s);
    EXPECT_LE(rel_err(dkf, dk), 2e-5) << "dk " << describe(s);
    EXPECT_LE(rel_err(dvf, dv), 2e-5) << "dv " << describe(s);
  }
}

// Token-by-token generation with the recurrent state reproduces the batched causal forward.
template <typename T>
void expect_step_matches_forward(const LinearAttentionShape& s, const Inputs& in, double tol) {
  const std::vector<T> q(in.q.begin(), in.q.end()), k(in.k.begin(), in.k.end()), v(in.v.begin(), in.v.end()),
      W(in.W.begin(), in.W.end());
  const std::vector<T> full = forward(q, k, v, W, s);
  const int64_t Ck = s.H * s.Dk, Cv = s.H * s.Dv;
  ops::LinearAttentionState<T> st = ops::linear_attention_state<T>(s);
  EXPECT_EQ(st.pos, s.start);
  std::vector<T> qt(s.B * Ck), kt(s.B * Ck), vt(s.B * Cv), out(s.B * Cv);
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t b = 0; b < s.B; ++b) {
      std::copy_n(&q[(b * s.T + t) * Ck], Ck, &qt[b * Ck]);
      std::copy_n(&k[(b * s.T + t) * Ck], Ck, &kt[b * Ck]);
      std::copy_n(&v[(b * s.T + t) * Cv], Cv, &vt[b * Cv]);
    }
    ops::linear_attention_step(out.data(), qt.data(), kt.data(), vt.data(), W.empty() ? nullptr : W.data(), s, st);
    double err = 0, mag = 0;
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t j = 0; j < Cv; ++j) {
        const double want = full[(b * s.T + t) * Cv + j];
        err = std::max(err, std::fabs(static_cast<double>(out[b * Cv + j]) - want));
        mag = std::max(mag, std::fabs(want));
      }
    }
    EXPECT_LE(err, tol * std::max(1.0, mag)) << "token " << t << " " << describe(s);
  }
  EXPECT_EQ(st.pos, s.start + s.T);
}

TEST(LinearAttention, StepMatchesBatchedCausalForward) {
  std::mt19937_64 rng(5);
  for (const LinearAttentionShape& s : modes(2, 12, 3, 6, 4, 9)) {
    if (!s.causal) continue;
    Inputs in = random_inputs(rng, s);
    // Rising key norms move the FAVOR running max, exercising the state's rescaling.
    for (size_t i = 0; i < in.k.size(); ++i) in.k[i] *= 0.5 + static_cast<double>(i) / in.k.size() * 2.0;
    expect_step_matches_forward<double>(s, in, 1e-12);
    expect_step_matches_forward<float>(s, in, 1e-5);
  }
}

// RoPE's relative-position property: numerator terms (R_m φ(q))ᵀ(R_n φ(k)) depend on m − n only and
// the denominator on no position, so shifting every position leaves the output unchanged, while RoPE
// itself does change it.
TEST(LinearAttention, OutputDependsOnlyOnRelativePositions) {
  std::mt19937_64 rng(6);
  for (LinearAttentionShape s : modes(2, 7, 2, 6, 3, 0)) {
    if (!s.rope) continue;
    const Inputs in = random_inputs(rng, s);
    const Vec base = forward(in.q, in.k, in.v, in.W, s);
    for (int64_t start : {1, 1000, 123456}) {
      s.start = start;
      EXPECT_LE(rel_err(forward(in.q, in.k, in.v, in.W, s), base), 1e-9) << describe(s);
    }
    s.rope = false;
    EXPECT_GT(rel_err(forward(in.q, in.k, in.v, in.W, s), base), 1e-3) << describe(s);
  }
}

// librope configurations beyond the paper's: the half layout (pairs (i, i + F/2)), other bases, every
// scaling method with its attention factor (original context 8, so the test sequences run past it and
// dynamic NTK scales), and xPos.
std::vector<rope_config> rope_variants() {
  std::vector<rope_config> all;
  auto add = [&](const char* spec, bool half, double base = 10000) {
    rope_config c = rope::default_config(0);
    c.layout = half ? ROPE_LAYOUT_HALF : ROPE_LAYOUT_INTERLEAVED;
    c.base = base;
    rope::apply_scaling_spec(spec, &c);
    all.push_back(c);
  };
  add("none", true);
  add("linear:4", false);
  add("ntk:4", true);
  add("dynamic-ntk:4:8", false);
  add("dynamic-ntk:3:4", true, 500000);
  add("yarn:4:8", true);
  add("yarn:8:4", false, 500000);
  add("llama3:4:8", false);
  add("llama3:8:8", true);
  rope_config xpos = rope::default_config(0);
  xpos.xpos.enabled = 1;
  xpos.xpos.scale_base = 16;
  all.push_back(xpos);
  return all;
}

// modes() with RoPE on, for every variant.
std::vector<LinearAttentionShape> variant_modes(int64_t B, int64_t T, int64_t H, int64_t Dk, int64_t Dv, int64_t start) {
  std::vector<LinearAttentionShape> all;
  for (const rope_config& c : rope_variants()) {
    for (LinearAttentionShape s : modes(B, T, H, Dk, Dv, start)) {
      if (!s.rope) continue;
      s.rope_cfg = c;
      all.push_back(s);
    }
  }
  return all;
}

TEST(LinearAttentionRopeConfig, MatchesDirectQuadraticEvaluation) {
  std::mt19937_64 rng(11);
  for (int64_t start : {0, 5, 1000}) {
    for (LinearAttentionShape s : variant_modes(2, 6, 2, 6, 3, start)) {
      const Inputs in = random_inputs(rng, s);
      const Vec out = forward(in.q, in.k, in.v, in.W, s);
      EXPECT_LE(rel_err(out, reference(in.q, in.k, in.v, in.W, s)), 1e-12) << describe(s);
      LinearAttentionShape plain = s;  // and the configuration matters (dynamic NTK: once past its context)
      plain.rope_cfg = rope::default_config(0);
      const rope_scaling& sc = s.rope_cfg.scaling;
      if (sc.type != ROPE_SCALING_DYNAMIC_NTK || s.start + s.T > sc.original_max_positions) {
        EXPECT_GT(rel_err(forward(in.q, in.k, in.v, in.W, plain), out), 1e-6) << describe(s);
      } else {
        EXPECT_EQ(forward(in.q, in.k, in.v, in.W, plain), out) << describe(s);
      }
      const auto f = forward(to_f32(in.q), to_f32(in.k), to_f32(in.v), to_f32(in.W), s);
      EXPECT_LE(rel_err(f, out), 1e-5) << "float " << describe(s);
    }
  }
}

// The rope_cfg (any head_dim: linear attention sets it to F) is honoured whatever F is: elu + 1 with
// F = Dk = 6 and favor with F = m = 6 above; here the model's config (head_dim = Dk) with favor m = 10.
TEST(LinearAttentionRopeConfig, HeadDimIsReplacedByF) {
  std::mt19937_64 rng(12);
  for (LinearAttentionShape s : variant_modes(1, 5, 2, 4, 3, 3)) {
    if (s.feature_map != FeatureMap::favor) continue;
    s.favor_features = 10;
    s.rope_cfg.head_dim = s.rope_cfg.rot_dim = 4;
    const Inputs in = random_inputs(rng, s);
    EXPECT_LE(rel_err(forward(in.q, in.k, in.v, in.W, s), reference(in.q, in.k, in.v, in.W, s)), 1e-12) << describe(s);
  }
}

TEST(LinearAttentionRopeConfig, GradientsMatchCentralDifferences) {
  std::mt19937_64 rng(13);
  for (LinearAttentionShape s : variant_modes(2, 5, 2, 4, 3, 11)) {
    expect_gradients_match_central_differences(s, rng);
    if (s.causal) {  // and across chunk edges (chunks of 2)
      s.chunk = 2;
      expect_gradients_match_central_differences(s, rng);
    }
  }
}

TEST(LinearAttentionRopeConfig, StepMatchesBatchedCausalForward) {
  std::mt19937_64 rng(14);
  for (LinearAttentionShape s : variant_modes(2, 10, 2, 6, 4, 9)) {
    if (!s.causal) continue;
    Inputs in = random_inputs(rng, s);
    for (size_t i = 0; i < in.k.size(); ++i) in.k[i] *= 0.5 + static_cast<double>(i) / in.k.size() * 2.0;
    expect_step_matches_forward<double>(s, in, 1e-12);
    expect_step_matches_forward<float>(s, in, 1e-5);
  }
}

// Dynamic NTK takes its length from rope_seq_len when set (else start + T), in the step too.
TEST(LinearAttentionRopeConfig, DynamicNtkLength) {
  std::mt19937_64 rng(15);
  LinearAttentionShape s = make_shape(1, 6, 1, 6, 2, true, FeatureMap::elu_plus_one, true, 2);
  rope::apply_scaling_spec("dynamic-ntk:4:4", &s.rope_cfg);
  const Inputs in = random_inputs(rng, s);
  const Vec by_batch = forward(in.q, in.k, in.v, in.W, s);
  s.rope_seq_len = 8;  // = start + T
  EXPECT_EQ(forward(in.q, in.k, in.v, in.W, s), by_batch);
  s.rope_seq_len = 64;
  const Vec longer = forward(in.q, in.k, in.v, in.W, s);
  EXPECT_GT(rel_err(longer, by_batch), 1e-6);
  EXPECT_LE(rel_err(longer, reference(in.q, in.k, in.v, in.W, s)), 1e-12);
  expect_step_matches_forward<double>(s, in, 1e-12);
}

TEST(LinearAttention, FavorProjectionIsSeededAndOrthogonalInBlocks) {
  const int64_t m = 10, D = 4;
  Vec W(m * D), again(m * D), other(m * D);
  ops::favor_projection(W.data(), m, D, 42, true);
  ops::favor_projection(again.data(), m, D, 42, true);
  ops::favor_projection(other.data(), m, D, 43, true);
  EXPECT_EQ(W, again);
  EXPECT_NE(W, other);
  auto dot = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int64_t d = 0; d < D; ++d) s += W[i * D + d] * W[j * D + d];
    return s;
  };
  for (int64_t b0 = 0; b0 < m; b0 += D) {  // blocks of rows 0-3, 4-7, 8-9
    for (int64_t i = b0; i < std::min(m, b0 + D); ++i) {
      for (int64_t j = b0; j < i; ++j) EXPECT_NEAR(dot(i, j) / std::sqrt(dot(i, i) * dot(j, j)), 0.0, 1e-12);
    }
  }
  EXPECT_NE(dot(0, 0), dot(1, 1));  // chi-distributed norms, not unit rows
  std::vector<float> Wf(m * D);
  ops::favor_projection(Wf.data(), m, D, 42, true);
  EXPECT_LE(rel_err(Wf, W), 1e-7);
}

// E[φ(q)·φ(k)] = exp(q·k): with many features, normalised weights approach softmax(q·k). Values
// one-hot per key (Dv = T, v_n = e_n) make the output the weight row.
TEST(LinearAttention, FavorApproximatesTheSoftmaxKernel) {
  std::mt19937_64 rng(7);
  const int64_t T = 4, D = 4;
  for (bool orthogonal : {true, false}) {
    LinearAttentionShape s = make_shape(1, T, 1, D, T, false, FeatureMap::favor, false, 0, 8192);
    s.eps = 0;
    const Vec q = random_vec(rng, T * D, 0.5), k = random_vec(rng, T * D, 0.5);
    Vec v(T * T, 0.0), W(s.favor_features * D);
    for (int64_t n = 0; n < T; ++n) v[n * T + n] = 1;
    ops::favor_projection(W.data(), s.favor_features, D, 99, orthogonal);
    const Vec out = forward(q, k, v, W, s);
    for (int64_t m = 0; m < T; ++m) {
      Vec w(T);
      double sum = 0;
      for (int64_t n = 0; n < T; ++n) {
        double qk = 0;
        for (int64_t d = 0; d < D; ++d) qk += q[m * D + d] * k[n * D + d];
        sum += w[n] = std::exp(qk);
      }
      for (int64_t n = 0; n < T; ++n) EXPECT_NEAR(out[m * T + n], w[n] / sum, 0.02) << m << "," << n;
    }
  }
}

// Logits with a large common offset, ≈ −150 (features underflow float's exp: 0/0 unstabilised) or
// ≈ +200 (they overflow it), yet the stabilised float op matches eq. 19 evaluated in double. W and the
// inputs are built so that the offset is large and the spread across features moderate: W = [G | 0 c]
// with G (m, 4) random features and c constant, x = (x_0..3 small, x_4, x_5), so ℓ_j = g_j·x_0..3 +
// c·x_5 − ‖x‖²/2. Offsets differ from token to token and keys come in decreasing order, which moves
// the causal running max.
TEST(LinearAttention, FavorIsStableAtExtremeLogits) {
  std::mt19937_64 rng(8);
  std::uniform_real_distribution<double> unif(0, 1);
  const int64_t Dk = 6, G = 4;
  for (bool overflow : {false, true}) {
    for (int64_t chunk : {0, 1, 3, 64}) {  // 0: not causal; else causal in chunks of that many tokens
      const bool causal = chunk > 0;
      LinearAttentionShape s = make_shape(1, 10, 2, Dk, 3, causal, FeatureMap::favor, true, 3, 8);
      if (causal) s.chunk = chunk;
      s.eps = overflow ? 1e-6 : 0;  // with offsets ≈ −150 any eps > 0 would swamp the true ≈ e^-300 denominator
      Inputs in = random_inputs(rng, s, 0.7);
      const double c = overflow ? 20 : 0;
      Vec gw(s.favor_features * G);
      ops::favor_projection(gw.data(), s.favor_features, G, 77);
      for (int64_t j = 0; j < s.favor_features; ++j) {
        for (int64_t d = 0; d < Dk; ++d) in.W[j * Dk + d] = d < G ? gw[j * G + d] : (d == 5 ? c : 0.0);
      }
      const int64_t rows = s.B * s.T * s.H;
      for (Vec* x : {&in.q, &in.k}) {
        for (int64_t r = 0; r < rows; ++r) {
          const double order = x == &in.k ? 1.0 - static_cast<double>(r) / rows : unif(rng);  // keys: decreasing
          (*x)[r * Dk + 4] = overflow ? 8 * (1 - order) : 10 + 8 * order;
          (*x)[r * Dk + 5] = overflow ? 20 + 0.1 * unif(rng) : 10;
        }
      }
      const auto qf = to_f32(in.q), kf = to_f32(in.k), vf = to_f32(in.v), Wf = to_f32(in.W);
      Vec saved;
      std::vector<float> saved_f;
      const auto got = forward(qf, kf, vf, Wf, s, &saved_f);
      for (float x : got) ASSERT_TRUE(std::isfinite(x)) << describe(s);
      EXPECT_LE(rel_err(got, reference(in.q, in.k, in.v, in.W, s)), 1e-4) << describe(s);
      // The float backward agrees with the double one (itself checked by central differences above).
      forward(in.q, in.k, in.v, in.W, s, &saved);
      const Vec g = random_vec(rng, got.size());
      const auto gf = to_f32(g);
      Vec dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
      std::vector<float> dqf(dq.size()), dkf(dk.size()), dvf(dv.size());
      ops::linear_attention_backward(dq.data(), dk.data(), dv.data(), g.data(), saved.data(), in.q.data(), in.k.data(),
                                     in.v.data(), in.W.data(), s);
      ops::linear_attention_backward(dqf.data(), dkf.data(), dvf.data(), gf.data(), saved_f.data(), qf.data(),
                                     kf.data(), vf.data(), Wf.data(), s);
      // dq of the causal case is the ill-conditioned one (0.94e-3 with the old scalar fp32 rotation,
      // 1.09e-3 with librope's SIMD kernel: the same rotation, rounded differently).
      EXPECT_LE(rel_err(dqf, dq), 2e-3) << "dq " << describe(s);
      EXPECT_LE(rel_err(dkf, dk), 1e-3) << "dk " << describe(s);
      EXPECT_LE(rel_err(dvf, dv), 1e-3) << "dv " << describe(s);
    }
  }
}

template <typename F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(LinearAttention, RejectsBadInput) {
  std::vector<float> buf(1024, 0.1f), W(64, 0.1f);
  auto fwd = [&](const LinearAttentionShape& s, const float* w) {
    ops::linear_attention_forward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), w, s);
  };
  // Odd F with RoPE: elu + 1 (F = Dk) and favor (F = m).
  expect_invalid([&] { fwd(make_shape(1, 2, 1, 3, 2, false, FeatureMap::elu_plus_one, true), nullptr); },
                 "feature dimension F must be even; got F = 3");
  expect_invalid([&] { fwd(make_shape(1, 2, 1, 4, 2, true, FeatureMap::favor, true, 0, 5), W.data()); },
                 "must be even; got F = 5");
  expect_invalid(
      [&] { ops::linear_attention_state<float>(make_shape(1, 1, 1, 3, 1, true, FeatureMap::elu_plus_one, true)); },
      "must be even");
  LinearAttentionShape no_chunk = make_shape(1, 2, 1, 4, 2, true, FeatureMap::elu_plus_one, false);
  no_chunk.chunk = 0;
  expect_invalid([&] { fwd(no_chunk, nullptr); }, "chunk must be >= 1 (tokens per causal chunk), got 0");
  // Without RoPE an odd F is fine.
  EXPECT_NO_THROW(fwd(make_shape(1, 2, 1, 3, 2, false, FeatureMap::elu_plus_one, false), nullptr));
  EXPECT_NO_THROW(fwd(make_shape(1, 2, 1, 4, 2, false, FeatureMap::favor, false, 0, 5), W.data()));
  expect_invalid([&] { fwd(make_shape(1, 2, 1, 4, 2, false, FeatureMap::favor, true, 0, 6), nullptr); },
                 "projection W");
  expect_invalid([&] { fwd(make_shape(1, 2, 1, 4, 2, false, FeatureMap::favor, true, 0, 0), W.data()); },
                 "favor_features");
  LinearAttentionShape s = make_shape(1, 2, 1, 4, 2, false, FeatureMap::elu_plus_one, true);
  s.favor_features = 6;
  expect_invalid([&] { fwd(s, nullptr); }, "favor_features must be 0 or Dk");
  s = make_shape(1, 2, 1, 4, 2, false, FeatureMap::elu_plus_one, true);
  s.eps = -1;
  expect_invalid([&] { fwd(s, nullptr); }, "eps");
  expect_invalid([&] { fwd(make_shape(0, 2, 1, 4, 2, false, FeatureMap::elu_plus_one, true), nullptr); }, "bad shape");
  expect_invalid(
      [&] {
        ops::linear_attention_backward(buf.data(), buf.data(), buf.data(), buf.data(),
                                       static_cast<const float*>(nullptr), buf.data(), buf.data(), buf.data(), nullptr,
                                       make_shape(1, 2, 1, 4, 2, false, FeatureMap::elu_plus_one, true));
      },
      "saved");
  auto st = ops::linear_attention_state<float>(make_shape(1, 1, 1, 4, 2, true, FeatureMap::elu_plus_one, true));
  expect_invalid(
      [&] {
        ops::linear_attention_step(buf.data(), buf.data(), buf.data(), buf.data(), nullptr,
                                   make_shape(2, 1, 1, 4, 2, true, FeatureMap::elu_plus_one, true), st);
      },
      "state does not match");
  expect_invalid([&] { ops::favor_projection(W.data(), 0, 4, 1); }, "favor_projection");
  // rope_cfg: whole-vector rotation only, text positions, a valid librope config, positions in range.
  s = make_shape(1, 2, 1, 4, 2, false, FeatureMap::elu_plus_one, true);
  s.rope_cfg = rope::default_config(4);
  s.rope_cfg.rot_dim = 2;
  expect_invalid([&] { fwd(s, nullptr); }, "rot_dim == head_dim");
  s.rope_cfg = rope::default_config(4);
  s.rope_cfg.n_axes = 2;
  expect_invalid([&] { fwd(s, nullptr); }, "n_axes");
  s.rope_cfg = rope::default_config(4);
  s.rope_cfg.scaling.type = ROPE_SCALING_LINEAR;
  s.rope_cfg.scaling.factor = 0;
  expect_invalid([&] { fwd(s, nullptr); }, "rope_cfg: ");
  expect_invalid([&] { ops::linear_attention_state<float>(s); }, "rope_cfg: ");
  const double ff[3] = {1, 2, 3};  // F/2 = 2 needed
  s.rope_cfg = rope::default_config(6);
  s.rope_cfg.freq_factors = ff;
  expect_invalid([&] { fwd(s, nullptr); }, "F/2 = 2");
  s.rope_cfg = rope::default_config(4);
  s.rope_seq_len = -1;
  expect_invalid([&] { fwd(s, nullptr); }, "rope_seq_len");
  s.rope_seq_len = 0;
  s.start = ROPE_MAX_POSITION - 1;  // token 1 is past librope's last position
  expect_invalid([&] { fwd(s, nullptr); }, "RoPE: ");
}

}  // namespace
