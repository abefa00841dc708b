// Softmax attention (src/ops/attention.cc): forward against a per-element evaluation, backward against
// central differences and a reference backward, padding and causal masks, probability dropout,
// rows with no visible key (uniform, as Hugging Face), several row blocks, fp32 on every SIMD
// target, and the row-statistics path against the kept probabilities bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "ops/attention.h"
#include "ops/flash_attention.h"
#include "ops/packed_linear.h"
#include "ops/vmath.h"
#include "ops/ops_testing.h"
#include "rope/convert.h"

namespace {

using namespace ops_testing;

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
                            v.data(), key_mask.data(), shape);
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
  ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(), nullptr,
                          shape);
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

// Without att (inference), one tile of rows per thread: the same outputs as the forward that keeps the
// probabilities, bit for bit (the per-block path; fp32 inference's fused kernel has tests of its own,
// flash_attention_test.cc).
template <typename T>
void expect_tiled_forward_equals(const std::vector<T>& out, const std::vector<T>& q, const std::vector<T>& k,
                                 const std::vector<T>& v, const int64_t* key_mask, const ops::AttentionShape& shape) {
  std::vector<T> tiled(out.size());
  ops::AttentionShape none = shape;
  none.saved = ops::AttentionSaved::none;
  if constexpr (std::is_same_v<T, float>) {
    if (ops::flash_attention_applies(none)) {
      ops::attention_forward_blocks(tiled.data(), q.data(), k.data(), v.data(), key_mask, none);
      EXPECT_EQ(tiled, out);
      return;
    }
  }
  ops::attention_forward(tiled.data(), static_cast<T*>(nullptr), q.data(), k.data(), v.data(), key_mask, shape);
  EXPECT_EQ(tiled, out);
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
    expect_tiled_forward_equals(out, q, k, v, key_mask.data(), shape);
    Vec att_ref, out_ref;
    reference_attention(att_ref, out_ref, q, k, v, key_mask.data(), shape);
    expect_all_near("att", att, att_ref, 1e-14);
    Vec dq(n, 0.0), dk(n, 0.0), dv(n, 0.0);
    ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(),
                            key_mask.data(), shape);
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
      expect_tiled_forward_equals(of, qf, kf, vf, key_mask.data(), shape);
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
                              vf.data(), key_mask.data(), shape);
      expect_close_fp32(dqf, dq, 1e-5);
      expect_close_fp32(dkf, dk, 1e-5);
      expect_close_fp32(dvf, dv, 1e-5);
    });
  }
}

// Row statistics instead of probabilities (memory linear in T): the same output and, after the
// backward remakes each block's probabilities, the same gradients as the kept-probabilities path, bit
// for bit, in fp64 and in fp32 on every SIMD target (where no fused kernel takes them); on random
// shapes across row blocks, with padding (interior, trailing, whole rows), causal masks, prefix
// limits, cross-attention and dropout.
template <typename T>
void expect_row_stats_path_equals(std::mt19937_64& rng, const ops::AttentionShape& kept) {
  const int64_t C = kept.H * kept.D, Tk = kept.keys(), nq = kept.B * kept.T * C, nk = kept.B * Tk * C;
  std::vector<int64_t> key_mask(kept.B * Tk, 1);
  for (int64_t& m : key_mask) m = rng() % 5 != 0;  // a fifth of the keys padded, anywhere
  for (int64_t j = 0; j < Tk; ++j) key_mask[j] = 0;  // batch 0 sees no key: uniform rows
  std::vector<T> q(nq), k(nk), v(nk), g(nq);
  std::normal_distribution<double> normal(0, 2);
  for (auto* x : {&q, &k, &v, &g}) {
    for (T& e : *x) e = static_cast<T>(normal(rng));
  }
  ops::AttentionShape stats_shape = kept;
  stats_shape.saved = ops::AttentionSaved::row_stats;
  ASSERT_EQ(ops::attention_saved_size(stats_shape), kept.B * kept.H * kept.T * 2);
  std::vector<T> out(nq), att(ops::attention_saved_size(kept)), out2(nq), stats(ops::attention_saved_size(stats_shape));
  ops::attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), key_mask.data(), kept);
  ops::attention_forward(out2.data(), stats.data(), q.data(), k.data(), v.data(), key_mask.data(), stats_shape);
  EXPECT_EQ(out2, out);
  std::vector<T> dq(nq, T(0.5)), dk(nk, T(-1)), dv(nk, T(2)), dq2 = dq, dk2 = dk, dv2 = dv;  // accumulated into
  ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), att.data(), q.data(), k.data(), v.data(),
                          key_mask.data(), kept);
  ops::attention_backward(dq2.data(), dk2.data(), dv2.data(), g.data(), stats.data(), q.data(), k.data(), v.data(),
                          key_mask.data(), stats_shape);
  EXPECT_EQ(dq2, dq);
  EXPECT_EQ(dk2, dk);
  EXPECT_EQ(dv2, dv);
}

TEST(Ops, AttentionRowStatisticsGiveTheKeptProbabilitiesGradientsBitForBit) {
  std::mt19937_64 rng(77);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  std::vector<int64_t> limits;
  for (int i = 0; i < 12; ++i) {
    ops::AttentionShape s{pick(2, 3), pick(1, 150), pick(1, 3), pick(1, 24), i % 2 == 0};
    if (i % 3 == 1) s.dropout_p = 0.25, s.dropout_seed = rng(), s.dropout_row0 = pick(0, 9);
    if (i % 4 == 3 && !s.causal) s.Tk = pick(1, 90);  // cross-attention
    if (i % 5 == 2) {                                  // UniLM prefix limits
      limits.assign(s.B * s.T, 0);
      for (int64_t& l : limits) l = pick(0, s.keys());
      s.row_limit = limits.data();
    }
    SCOPED_TRACE(testing::Message() << "B " << s.B << " T " << s.T << " H " << s.H << " D " << s.D << " Tk "
                                    << s.keys() << " causal " << s.causal << " dropout " << s.dropout_p
                                    << " prefix " << (s.row_limit != nullptr));
    expect_row_stats_path_equals<double>(rng, s);
    // From 16 rows on the fused kernels take row statistics (fp32; bf16 on AVX512-BF16) and round
    // otherwise: flash_attention_test.cc holds them to the fp64 gradients.
    ops::AttentionShape stats = s;
    stats.saved = ops::AttentionSaved::row_stats;
    if (s.T < 16) for_each_simd_target([&] { expect_row_stats_path_equals<float>(rng, s); });
    if (ops::bf16_is_native()) {  // bf16 mixed-precision training: the recomputed products are bf16 too
      s.bf16_products = stats.bf16_products = true;
      if (s.T < 16 || !ops::flash_attention_bf16_applies(stats)) expect_row_stats_path_equals<float>(rng, s);
      s.bf16_products = false;
    }
    s.row_limit = nullptr;
  }
  // Full blocks of 64 rows over 256 keys or more (batch 1: batch 0 sees no key) and partial last
  // blocks, in fp64 (the per-block path's BLAS blocks; fp32 runs such shapes in the fused kernels).
  ops::AttentionShape causal{2, 400, 1, 64, true}, dropout{2, 330, 1, 64, false, 0.1, 5};
  for (const ops::AttentionShape& s : {causal, dropout}) {
    SCOPED_TRACE(testing::Message() << "T " << s.T << " causal " << s.causal);
    expect_row_stats_path_equals<double>(rng, s);
  }
}

TEST(Ops, AttentionBackwardRefusesAForwardThatSavedNothing) {
  const ops::AttentionShape s{1, 2, 1, 2, false};
  std::vector<float> x(4), dx(4);
  ops::AttentionShape none = s;
  none.saved = ops::AttentionSaved::none;
  EXPECT_THROW(ops::attention_forward(x.data(), x.data(), x.data(), x.data(), x.data(), nullptr, none),
               std::invalid_argument);
  EXPECT_THROW(ops::attention_backward(dx.data(), dx.data(), dx.data(), x.data(), static_cast<const float*>(nullptr),
                                       x.data(), x.data(), x.data(), nullptr, s),
               std::invalid_argument);
}

}  // namespace

// bf16 products: refused for fp64 tensors on every CPU; against the fp64 reference within bf16's
// rounding, on several row blocks with padding and a causal mask, where the CPU has native bf16.
// (The op × dtype table checks their backward too.)
TEST(Ops, AttentionBf16ProductsMatchTheReferenceWithinBf16Rounding) {
  std::mt19937_64 rng(31);
  const int64_t B = 2, T = 150, H = 3, D = 64, n = B * T * H * D;
  std::vector<int64_t> key_mask(B * T, 1);
  for (int64_t j = 120; j < T; ++j) key_mask[T + j] = 0;
  ops::AttentionShape bf16_shape{B, T, H, D, false};
  bf16_shape.bf16_products = true;
  std::vector<float> out(n);
  std::vector<double> out64(n), att64(B * H * T * T), x(n);
  EXPECT_THROW(ops::attention_forward(out64.data(), att64.data(), x.data(), x.data(), x.data(), key_mask.data(), bf16_shape),
               std::invalid_argument);
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 on this CPU (" << ops::cpu_isa_name() << ")";
  for (bool causal : {false, true}) {
    SCOPED_TRACE(testing::Message() << "causal " << causal);
    ops::AttentionShape shape{B, T, H, D, causal};
    const Vec q = random_f32_vec(rng, n), k = random_f32_vec(rng, n), v = random_f32_vec(rng, n);
    Vec att_ref, out_ref;
    reference_attention(att_ref, out_ref, q, k, v, key_mask.data(), shape);
    shape.bf16_products = true;
    const auto qf = to_f32(q), kf = to_f32(k), vf = to_f32(v);
    ops::attention_forward(out.data(), static_cast<float*>(nullptr), qf.data(), kf.data(), vf.data(), key_mask.data(),
                           shape);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(out[i] - out_ref[i]));
    EXPECT_LT(worst, 0.05) << "largest |out − reference|";  // |v| ~ 1, products of 8-bit mantissas
    EXPECT_GT(worst, 0.0) << "bf16 products should differ from fp64 somewhere";
  }
}

// Inference writes the context over the queries (model::AttentionActs::chunk_rows): each block of
// query rows is read before its output rows, which no other block reads, are written; bit for bit the
// separate output, over several row blocks with padding, causal or not, fp32 and bf16 products.
TEST(Ops, AttentionOutputMayOverwriteTheQueries) {
  std::mt19937_64 rng(41);
  const int64_t B = 2, T = 150, H = 3, D = 16, n = B * T * H * D;
  std::vector<int64_t> key_mask(B * T, 1);
  for (int64_t j = 120; j < T; ++j) key_mask[T + j] = 0;
  for (bool causal : {false, true}) {
    for (bool bf16 : {false, true}) {
      if (bf16 && !ops::bf16_is_native()) continue;
      SCOPED_TRACE(testing::Message() << "causal " << causal << " bf16 " << bf16);
      ops::AttentionShape shape{B, T, H, D, causal};
      shape.bf16_products = bf16;
      shape.saved = ops::AttentionSaved::none;
      const auto q = to_f32(random_f32_vec(rng, n)), k = to_f32(random_f32_vec(rng, n)),
                 v = to_f32(random_f32_vec(rng, n));
      std::vector<float> out(n), over = q;
      ops::attention_forward(out.data(), static_cast<float*>(nullptr), q.data(), k.data(), v.data(), key_mask.data(),
                             shape);
      ops::attention_forward(over.data(), static_cast<float*>(nullptr), over.data(), k.data(), v.data(),
                             key_mask.data(), shape);
      EXPECT_EQ(over, out);
    }
  }
}

// Over a bf16 cache the decode kernel reads each key and value widened, and gives the fp32 kernel's
// result over the widened cache bit for bit, on every SIMD target, with the cache laid out by
// position (H·D per key) or head-major.
TEST(Ops, AttentionDecodeOverABf16CacheEqualsTheFp32KernelOverItsValues) {
  std::mt19937_64 rng(9);
  std::normal_distribution<float> z;
  for (const int64_t D : {1, 7, 16, 24, 64, 80}) {
    const int64_t H = 3, C = H * D, stride = 45;
    const std::vector<int64_t> keys = {1, 17, 45, 9, 30}, rows = {3, 1, 0, 2, 4};
    const int64_t B = static_cast<int64_t>(keys.size());
    std::vector<float> q(B * C), k(B * stride * C), v(B * stride * C);
    for (auto* x : {&q, &k, &v}) for (float& e : *x) e = z(rng);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    ops::bf16_from_f32(k16.data(), k.data(), static_cast<int64_t>(k.size()));
    ops::bf16_from_f32(v16.data(), v.data(), static_cast<int64_t>(v.size()));
    std::vector<float> kw(k.size()), vw(v.size());
    ops::f32_from_bf16(kw.data(), k16.data(), static_cast<int64_t>(k.size()));
    ops::f32_from_bf16(vw.data(), v16.data(), static_cast<int64_t>(v.size()));
    for (size_t i = 0; i < k.size(); ++i) ASSERT_EQ(kw[i], rope::bf16_to_f32(k16[i])) << i;  // widening is exact
    const ops::DecodeAttentionShape s{B, H, D, keys.data(), rows.data(), stride};
    // The same cache head-major, (rows, H, stride, D), as model::KVCache keeps a bf16 one.
    std::vector<uint16_t> kh(k.size()), vh(v.size());
    for (int64_t r = 0; r < B; ++r) {
      for (int64_t t = 0; t < stride; ++t) {
        for (int64_t h = 0; h < H; ++h) {
          std::copy_n(k16.begin() + (r * stride + t) * C + h * D, D, kh.begin() + ((r * H + h) * stride + t) * D);
          std::copy_n(v16.begin() + (r * stride + t) * C + h * D, D, vh.begin() + ((r * H + h) * stride + t) * D);
        }
      }
    }
    ops::DecodeAttentionShape sh = s;
    sh.heads_major = true;
    ops_testing::for_each_simd_target([&] {
      std::vector<float> want(B * C), got(B * C), heads(B * C);
      ops::attention_decode_forward<float>(want.data(), q.data(), kw.data(), vw.data(), s);
      ops::attention_decode_forward(got.data(), q.data(), k16.data(), v16.data(), s);
      ops::attention_decode_forward(heads.data(), q.data(), kh.data(), vh.data(), sh);
      EXPECT_EQ(got, want) << "D " << D;
      EXPECT_EQ(heads, want) << "D " << D;
    });
  }
}

// A position-major cache is read a row's heads at a time (one run per key), in groups of heads when
// there are fewer rows than threads: every grouping gives the per-head kernel's bits (over the same
// cache laid out head-major), on every SIMD target, and attention_forward's result in double.
TEST(Ops, AttentionDecodeGivesThePerHeadBitsHoweverTheHeadsAreGrouped) {
  std::mt19937_64 rng(11);
  std::normal_distribution<float> z;
  const int saved_threads = omp_get_max_threads();
  for (const int64_t D : {8, 64, 24}) {
    for (const std::vector<int64_t>& keys : {std::vector<int64_t>{300}, {1, 250}, {77, 300, 5, 120, 299}}) {
      const int64_t H = 5, C = H * D, stride = 300, B = static_cast<int64_t>(keys.size());
      std::vector<int64_t> rows(B);
      for (int64_t b = 0; b < B; ++b) rows[b] = B - 1 - b;
      std::vector<float> q(B * C), k(B * stride * C), v(B * stride * C), kh(k.size()), vh(v.size());
      for (auto* x : {&q, &k, &v}) for (float& e : *x) e = z(rng);
      for (int64_t r = 0; r < B; ++r) {  // head-major copies, (rows, H, stride, D)
        for (int64_t t = 0; t < stride; ++t) {
          for (int64_t h = 0; h < H; ++h) {
            std::copy_n(k.begin() + (r * stride + t) * C + h * D, D, kh.begin() + ((r * H + h) * stride + t) * D);
            std::copy_n(v.begin() + (r * stride + t) * C + h * D, D, vh.begin() + ((r * H + h) * stride + t) * D);
          }
        }
      }
      const ops::DecodeAttentionShape s{B, H, D, keys.data(), rows.data(), stride};
      ops::DecodeAttentionShape sh = s;
      sh.heads_major = true;
      // attention_forward in double, each row on its own cache row
      std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want(B * C);
      for (int64_t b = 0; b < B; ++b) {
        ops::AttentionShape a{1, 1, H, D, true};
        a.Tk = keys[b], a.kv_stride = stride, a.q_start = keys[b] - 1, a.saved = ops::AttentionSaved::none;
        ops::attention_forward<double>(want.data() + b * C, nullptr, qd.data() + b * C, kd.data() + rows[b] * stride * C,
                                       vd.data() + rows[b] * stride * C, nullptr, a);
      }
      for (const int threads : {1, 2, 3, 8}) {  // G = 1 .. H groups of heads per row
        omp_set_num_threads(threads);
        ops_testing::for_each_simd_target([&] {
          std::vector<float> grouped(B * C), per_head(B * C);
          ops::attention_decode_forward<float>(grouped.data(), q.data(), k.data(), v.data(), s);
          ops::attention_decode_forward<float>(per_head.data(), q.data(), kh.data(), vh.data(), sh);
          EXPECT_EQ(grouped, per_head) << "D " << D << ", " << B << " rows, " << threads << " threads";
          for (int64_t i = 0; i < B * C; ++i) ASSERT_NEAR(grouped[i], want[i], 2e-5) << i;
        });
      }
    }
  }
  omp_set_num_threads(saved_threads);
}

// The decode kernel is attention_forward at T = 1 (causal, the query at the last key) for each row on
// its own cache row, in double to 1e-12 and in fp32 to float rounding; bad key counts are refused.
TEST(Ops, AttentionDecodeEqualsTheForwardOfEachRow) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> z;
  const int64_t H = 3, D = 16, C = H * D, stride = 40;
  const std::vector<int64_t> keys = {1, 17, 40, 9}, rows = {3, 1, 0, 2};
  const int64_t B = static_cast<int64_t>(keys.size());
  std::vector<double> q(B * C), k(B * stride * C), v(B * stride * C);
  for (auto* x : {&q, &k, &v}) for (double& e : *x) e = z(rng);
  std::vector<double> fast(B * C), general(B * C);
  ops::attention_decode_forward<double>(fast.data(), q.data(), k.data(), v.data(), {B, H, D, keys.data(), rows.data(), stride});
  for (int64_t b = 0; b < B; ++b) {
    ops::AttentionShape s{1, 1, H, D, true};
    s.Tk = keys[b], s.kv_stride = stride, s.q_start = keys[b] - 1, s.saved = ops::AttentionSaved::none;
    ops::attention_forward<double>(general.data() + b * C, nullptr, q.data() + b * C, k.data() + rows[b] * stride * C,
                                   v.data() + rows[b] * stride * C, nullptr, s);
  }
  for (int64_t i = 0; i < B * C; ++i) EXPECT_NEAR(fast[i], general[i], 1e-12) << i;
  std::vector<float> qf(q.begin(), q.end()), kf(k.begin(), k.end()), vf(v.begin(), v.end()), of(B * C);
  ops::attention_decode_forward<float>(of.data(), qf.data(), kf.data(), vf.data(), {B, H, D, keys.data(), rows.data(), stride});
  for (int64_t i = 0; i < B * C; ++i) EXPECT_NEAR(of[i], general[i], 1e-5) << i;
  const std::vector<int64_t> none = {0}, too_many = {41};
  EXPECT_THROW(ops::attention_decode_forward<double>(fast.data(), q.data(), k.data(), v.data(), {1, H, D, none.data(), nullptr, stride}),
               std::invalid_argument);
  EXPECT_THROW(ops::attention_decode_forward<double>(fast.data(), q.data(), k.data(), v.data(), {1, H, D, too_many.data(), nullptr, stride}),
               std::invalid_argument);
}
