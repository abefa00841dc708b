// The paper's properties, checked on librope's outputs:
//  eq. 16 ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩ for m, n up to 2^31 − 1; norm preservation;
//  backward∘forward = identity; the partial-dim tail untouched; interleaved and half layouts give
//  the same scores after rope_permute_rows; offsets, ids and varlen agree; table = on the fly.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "hwy/targets.h"
#include "rope/rope.hpp"

namespace {

using Vec = std::vector<float>;

// Rotates one [1, n_tokens, 1, d] fp32 tensor in place at explicit positions.
void rotate(const rope::Plan& plan, Vec& x, int d, const std::vector<int64_t>& ids,
            rope_direction dir = ROPE_FORWARD, rope_role role = ROPE_ROLE_QUERY) {
  rope_positions pos{};
  pos.kind = ROPE_POSITIONS_IDS;
  pos.ids = ids.data();
  const rope_tensor t = rope::bshd(x.data(), ROPE_DTYPE_F32, 1, static_cast<int64_t>(ids.size()), 1, d);
  plan.apply(dir, role, pos, t);
}

Vec random_vec(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> normal;
  Vec v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}

class RopeProperties : public ::testing::TestWithParam<rope_layout> {};

TEST_P(RopeProperties, Eq16ScoresDependOnlyOnRelativePosition) {
  std::mt19937_64 rng(16);
  const int d = 128;
  rope_config cfg = rope::default_config(d);
  cfg.layout = GetParam();
  rope::Plan plan(cfg);
  std::uniform_int_distribution<int64_t> u(0, (int64_t{1} << 31) - 1);
  for (int trial = 0; trial < 200; ++trial) {
    const Vec q = random_vec(rng, d), k = random_vec(rng, d);
    int64_t m = u(rng), n = u(rng);
    if (trial % 4 == 0) n = m + trial;  // nearby pairs too
    if (n >= (int64_t{1} << 31)) n = m;
    Vec qm = q, kn = k;
    rotate(plan, qm, d, {m});
    rotate(plan, kn, d, {n});
    // ⟨q, R_{n−m} k⟩ for n >= m, else ⟨R_{m−n} q, k⟩ (the same by orthogonality).
    Vec a = q, b = k;
    if (n >= m) rotate(plan, b, d, {n - m}); else rotate(plan, a, d, {m - n});
    const double lhs = dot(qm, kn), rhs = dot(a, b);
    const double scale = std::sqrt(dot(q, q) * dot(k, k));
    EXPECT_LE(std::fabs(lhs - rhs) / scale, 1e-6) << "m " << m << " n " << n;
  }
}

TEST_P(RopeProperties, NormPreservedAndBackwardInvertsForward) {
  std::mt19937_64 rng(17);
  const int d = 96;
  rope_config cfg = rope::default_config(d);
  cfg.layout = GetParam();
  rope::Plan plan(cfg);
  std::uniform_int_distribution<int64_t> u(0, (int64_t{1} << 31) - 1);
  std::vector<int64_t> ids(64);
  for (auto& m : ids) m = u(rng);
  const Vec x = random_vec(rng, d * ids.size());
  Vec y = x;
  rotate(plan, y, d, ids);
  for (size_t t = 0; t < ids.size(); ++t) {
    const Vec xt(x.begin() + t * d, x.begin() + (t + 1) * d), yt(y.begin() + t * d, y.begin() + (t + 1) * d);
    EXPECT_NEAR(std::sqrt(dot(yt, yt)) / std::sqrt(dot(xt, xt)), 1.0, 1e-6);
  }
  rotate(plan, y, d, ids, ROPE_BACKWARD);
  double err = 0;
  for (size_t i = 0; i < x.size(); ++i) err = std::max(err, double(std::fabs(y[i] - x[i])));
  EXPECT_LE(err, 1e-5);
}

TEST_P(RopeProperties, PartialRotaryTailIsUntouched) {
  std::mt19937_64 rng(18);
  const int d = 80;
  rope_config cfg = rope::default_config(d);
  cfg.layout = GetParam();
  cfg.rot_offset = 6;
  cfg.rot_dim = 40;
  rope::Plan plan(cfg);
  const Vec x = random_vec(rng, d * 5);
  Vec in_place = x, out(x.size(), NAN);
  rotate(plan, in_place, d, {0, 7, 99, 12345, 2000000000});
  rope_positions pos = rope::offset_positions(3);
  const rope_tensor in_t = rope::bshd(const_cast<float*>(x.data()), ROPE_DTYPE_F32, 1, 5, 1, d);
  const rope_tensor out_t = rope::bshd(out.data(), ROPE_DTYPE_F32, 1, 5, 1, d);
  plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, pos, in_t, &out_t);
  for (int t = 0; t < 5; ++t) {
    for (int j = 0; j < d; ++j) {
      if (j >= 6 && j < 46) continue;
      EXPECT_EQ(in_place[t * d + j], x[t * d + j]);
      EXPECT_EQ(out[t * d + j], x[t * d + j]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, RopeProperties,
                         ::testing::Values(ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF));

TEST(RopeLayouts, InterleavedAndHalfAgreeAfterWeightPermutation) {
  // q = W_q x, k = W_k x per token; a Meta (interleaved) checkpoint converted to the HF (half)
  // layout by rope_permute_rows must give the same attention scores.
  std::mt19937_64 rng(19);
  const int heads = 3, d = 64, model = 48, tokens = 9, rot = 48, offset = 8;
  const Vec wq = random_vec(rng, heads * d * model), wk = random_vec(rng, heads * d * model);
  const Vec x = random_vec(rng, tokens * model);
  auto project = [&](const Vec& w) {
    Vec out(tokens * heads * d);
    for (int t = 0; t < tokens; ++t)
      for (int r = 0; r < heads * d; ++r) {
        double s = 0;
        for (int c = 0; c < model; ++c) s += double(w[r * model + c]) * x[t * model + c];
        out[t * heads * d + r] = static_cast<float>(s);
      }
    return out;
  };
  auto scores = [&](const Vec& w_q, const Vec& w_k, rope_layout layout) {
    rope_config cfg = rope::default_config(d);
    cfg.layout = layout;
    cfg.rot_dim = rot;
    cfg.rot_offset = offset;
    rope::Plan plan(cfg);
    Vec q = project(w_q), k = project(w_k);
    plan.apply_qk(ROPE_FORWARD, rope::offset_positions(1000),
                  rope::bshd(q.data(), ROPE_DTYPE_F32, 1, tokens, heads, d),
                  rope::bshd(k.data(), ROPE_DTYPE_F32, 1, tokens, heads, d));
    Vec s;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < tokens; ++i)
        for (int j = 0; j < tokens; ++j) {
          double acc = 0;
          for (int e = 0; e < d; ++e) acc += double(q[(i * heads + h) * d + e]) * k[(j * heads + h) * d + e];
          s.push_back(static_cast<float>(acc));
        }
    return s;
  };
  Vec wq_half(wq.size()), wk_half(wk.size());
  ASSERT_EQ(rope_permute_rows(wq.data(), wq_half.data(), model * sizeof(float), heads, d, rot, offset,
                              ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF), ROPE_OK);
  ASSERT_EQ(rope_permute_rows(wk.data(), wk_half.data(), model * sizeof(float), heads, d, rot, offset,
                              ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF), ROPE_OK);
  const Vec a = scores(wq, wk, ROPE_LAYOUT_INTERLEAVED), b = scores(wq_half, wk_half, ROPE_LAYOUT_HALF);
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  EXPECT_LE(std::sqrt(num / den), 1e-6);
  // And back: the permutation round-trips exactly, in place.
  Vec round = wq_half;
  ASSERT_EQ(rope_permute_rows(round.data(), round.data(), model * sizeof(float), heads, d, rot, offset,
                              ROPE_LAYOUT_HALF, ROPE_LAYOUT_INTERLEAVED), ROPE_OK);
  EXPECT_EQ(round, wq);
}

TEST(RopePositions, OffsetsIdsAndVarlenGiveTheSameBits) {
  // Two packed sequences of 5 and 7 tokens starting at positions 100 and 2^31 − 8.
  std::mt19937_64 rng(20);
  const int d = 64, heads = 2;
  const int64_t s0 = 100, s1 = (int64_t{1} << 31) - 8;
  for (rope_cos_sin_mode mode : {ROPE_MODE_ON_THE_FLY, ROPE_MODE_TABLE}) {
    rope_config cfg = rope::default_config(d);
    cfg.mode = mode;
    cfg.table_positions = int64_t{1} << 12;
    const int64_t first[2] = {s0, mode == ROPE_MODE_TABLE ? 3000 : s1};
    rope::Plan plan(cfg);
    const Vec x = random_vec(rng, 12 * heads * d);
    // varlen
    Vec a = x;
    const int64_t cu[3] = {0, 5, 12};
    rope_positions varlen{};
    varlen.kind = ROPE_POSITIONS_VARLEN;
    varlen.cu_seqlens = cu;
    varlen.n_seqs = 2;
    varlen.seq_starts = first;
    plan.apply(ROPE_FORWARD, ROPE_ROLE_KEY, varlen, rope::bshd(a.data(), ROPE_DTYPE_F32, 1, 12, heads, d));
    // ids
    Vec b = x;
    std::vector<int64_t> ids;
    for (int t = 0; t < 12; ++t) ids.push_back(t < 5 ? first[0] + t : first[1] + t - 5);
    rope_positions by_id{};
    by_id.kind = ROPE_POSITIONS_IDS;
    by_id.ids = ids.data();
    plan.apply(ROPE_FORWARD, ROPE_ROLE_KEY, by_id, rope::bshd(b.data(), ROPE_DTYPE_F32, 1, 12, heads, d));
    EXPECT_EQ(a, b);
    // offsets: each sequence separately
    Vec c = x;
    plan.apply(ROPE_FORWARD, ROPE_ROLE_KEY, rope::offset_positions(first[0]),
               rope::bshd(c.data(), ROPE_DTYPE_F32, 1, 5, heads, d));
    plan.apply(ROPE_FORWARD, ROPE_ROLE_KEY, rope::offset_positions(first[1]),
               rope::bshd(c.data() + 5 * heads * d, ROPE_DTYPE_F32, 1, 7, heads, d));
    EXPECT_EQ(a, c);
  }
}

TEST(RopeModes, TableAndOnTheFlyGiveTheSameBits) {
  std::mt19937_64 rng(21);
  for (rope_layout layout : {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF}) {
    rope_config cfg = rope::default_config(128);
    cfg.layout = layout;
    cfg.scaling.type = ROPE_SCALING_YARN;
    cfg.scaling.factor = 4;
    cfg.scaling.original_max_positions = 1024;
    rope::Plan fly(cfg);
    cfg.mode = ROPE_MODE_TABLE;
    cfg.table_positions = 4096;
    rope::Plan table(cfg);
    const Vec x = random_vec(rng, 2 * 33 * 4 * 128);
    Vec a = x, b = x;
    const int64_t starts[2] = {0, 4000};
    rope_positions pos = rope::offset_positions(0);
    pos.starts = starts;
    fly.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, pos, rope::bshd(a.data(), ROPE_DTYPE_F32, 2, 33, 4, 128));
    table.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, pos, rope::bshd(b.data(), ROPE_DTYPE_F32, 2, 33, 4, 128));
    EXPECT_EQ(a, b);
  }
}

}  // namespace

namespace {

TEST(RopeThreads, HeadsSplitAcrossThreadsGiveTheSameBits) {
  // One decode token with 384 q heads and 96 k heads: 240 KiB, enough work for 3 threads (librope
  // gives each at least 64 KiB), which split the row's heads.
  std::mt19937_64 rng(22);
  rope_config cfg = rope::default_config(128);
  rope::Plan plan(cfg);
  const int hq = 384, hk = 96;
  const Vec q = random_vec(rng, hq * 128), k = random_vec(rng, hk * 128);
  for (rope_backend backend : {ROPE_BACKEND_AUTO, ROPE_BACKEND_REFERENCE}) {
    Vec q1 = q, k1 = k, q3 = q, k3 = k;
    const rope_exec one{1, backend, nullptr}, three{3, backend, nullptr};
    const rope_positions pos = rope::offset_positions(777777);
    plan.apply_qk(ROPE_FORWARD, pos, rope::bshd(q1.data(), ROPE_DTYPE_F32, 1, 1, hq, 128),
                  rope::bshd(k1.data(), ROPE_DTYPE_F32, 1, 1, hk, 128), nullptr, nullptr, &one);
    plan.apply_qk(ROPE_FORWARD, pos, rope::bshd(q3.data(), ROPE_DTYPE_F32, 1, 1, hq, 128),
                  rope::bshd(k3.data(), ROPE_DTYPE_F32, 1, 1, hk, 128), nullptr, nullptr, &three);
    EXPECT_EQ(q1, q3);
    EXPECT_EQ(k1, k3);
    EXPECT_NE(q1, q);
  }
}

}  // namespace

namespace {

TEST(RopeStreaming, LargeOutOfPlaceEqualsInPlace) {
  // Outputs beyond the cache-resident size are written with non-temporal stores where aligned, and
  // rows streamed from DRAM prefetch ahead; the results must be the same bits as in place, for
  // aligned and misaligned outputs, on every SIMD target (each has its own streaming loops).
  std::mt19937_64 rng(23);
  const int64_t tokens = 700, heads = 8, d = 128;  // 2.9 MB of fp32 per tensor
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_BF16, ROPE_DTYPE_F16}) {
      for (rope_layout layout : {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF}) {
        for (int misalign : {0, 1}) {
          rope_config cfg = rope::default_config(d);
          cfg.layout = layout;
          rope::Plan plan(cfg);
          const size_t es = dtype == ROPE_DTYPE_F32 ? 4 : 2, n = tokens * heads * d;
          std::vector<uint8_t> x(n * es), in_place, out((n + 64) * es, 0xff);
          for (size_t i = 0; i < n; ++i) {
            const float v = std::normal_distribution<float>()(rng);
            if (dtype == ROPE_DTYPE_F32) {
              std::memcpy(&x[4 * i], &v, 4);
            } else {
              const uint16_t h = static_cast<uint16_t>(i * 2654435761u >> 8) & 0x3fff;  // finite 16-bit values
              std::memcpy(&x[2 * i], &h, 2);
            }
          }
          in_place = x;
          // 64-byte aligned (or off by one element) output inside `out`.
          uint8_t* base = out.data() + (64 - reinterpret_cast<uintptr_t>(out.data()) % 64) % 64 + misalign * es;
          const rope_tensor src = rope::bshd(x.data(), dtype, 1, tokens, heads, d);
          const rope_tensor dst = rope::bshd(base, dtype, 1, tokens, heads, d);
          const rope_exec exec{2, ROPE_BACKEND_AUTO, nullptr};
          plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, rope::offset_positions(5), src, &dst, &exec);
          plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, rope::offset_positions(5),
                     rope::bshd(in_place.data(), dtype, 1, tokens, heads, d), nullptr, &exec);
          EXPECT_EQ(0, std::memcmp(base, in_place.data(), n * es))
              << hwy::TargetName(target) << " dtype " << dtype << " layout " << layout << " misalign " << misalign;
          // The streaming kernels (256-bit at most, head after head) against the cache-resident ones
          // (full vectors, all heads per chunk), which the oracle tests check: one token at a time.
          for (int64_t t : {int64_t{0}, int64_t{1}, tokens / 2, tokens - 1}) {
            std::vector<uint8_t> row(x.begin() + t * heads * d * es, x.begin() + (t + 1) * heads * d * es);
            plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, rope::offset_positions(5 + t),
                       rope::bshd(row.data(), dtype, 1, 1, heads, d), nullptr, &exec);
            EXPECT_EQ(0, std::memcmp(row.data(), in_place.data() + t * heads * d * es, row.size()))
                << hwy::TargetName(target) << " dtype " << dtype << " layout " << layout << " token " << t;
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace
