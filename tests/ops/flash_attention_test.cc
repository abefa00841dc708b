// The fused inference forward of softmax attention (src/ops/flash_attention.cc) against
// attention_forward in fp64 (the reference the fp32 paths are held to), on every SIMD target: random
// shapes over several row blocks and key tiles, head dims that are and are not multiples of the
// vector width, key padding masks (interior, trailing, whole batch rows: uniform rows), causal masks
// with queries at an offset (a cache's prefill), prefix limits, cross-attention, keys strided by a
// cache's capacity; the output written over the queries; the same bits whatever the thread count; and
// what it refuses.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "ops/attention.h"
#include "ops/flash_attention.h"
#include "ops/ops_testing.h"

namespace {

using namespace ops_testing;

// One random case: inputs exactly fp32, a key mask and prefix limits as the shape asks.
struct FlashCase {
  ops::AttentionShape s;
  Vec q, k, v;
  std::vector<int64_t> key_mask, limits;
  bool masked = false;
};

FlashCase make_case(std::mt19937_64& rng, ops::AttentionShape s, bool masked, bool limits) {
  FlashCase c{s, {}, {}, {}, {}, {}, masked};
  const int64_t C = s.H * s.D, Tk = s.keys();
  c.q = random_f32_vec(rng, s.B * s.T * C, 1.5);
  c.k = random_f32_vec(rng, s.B * s.key_stride() * C, 1.5);
  c.v = random_f32_vec(rng, s.B * s.key_stride() * C);
  if (masked) {
    c.key_mask.assign(s.B * Tk, 1);
    for (int64_t& m : c.key_mask) m = rng() % 4 != 0;            // a quarter padded, anywhere
    for (int64_t j = Tk * 2 / 3; j < Tk; ++j) c.key_mask[j] = 0;  // batch 0: a trailing run too
    if (s.B > 1) {
      for (int64_t j = 0; j < Tk; ++j) c.key_mask[Tk + j] = 0;  // batch 1 sees no key: uniform rows
    }
  }
  if (limits) {
    c.limits.resize(s.B * s.T);
    for (int64_t& l : c.limits) l = static_cast<int64_t>(rng() % (Tk + 2));  // 0 (uniform) up to past Tk
  }
  c.s.row_limit = limits ? c.limits.data() : nullptr;
  c.s.saved = ops::AttentionSaved::none;
  return c;
}

// attention_forward in fp64, nothing kept.
Vec reference(const FlashCase& c) {
  Vec out(c.q.size());
  ops::attention_forward<double>(out.data(), nullptr, c.q.data(), c.k.data(), c.v.data(),
                                 c.masked ? c.key_mask.data() : nullptr, c.s);
  return out;
}

std::vector<float> fused(const FlashCase& c) {
  std::vector<float> out(c.q.size());
  const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v);
  ops::flash_attention_forward(out.data(), q.data(), k.data(), v.data(), c.masked ? c.key_mask.data() : nullptr, c.s);
  return out;
}

std::string describe(const FlashCase& c) {
  const auto& s = c.s;
  return testing::PrintToString(std::vector<int64_t>{s.B, s.T, s.H, s.D, s.keys(), s.key_stride(), s.q_start}) +
         " (B T H D Tk stride start) causal " + std::to_string(s.causal) + " mask " + std::to_string(c.masked) +
         " prefix " + std::to_string(s.row_limit != nullptr);
}

TEST(FlashAttention, MatchesTheFp64ForwardOnRandomShapesOnEverySimdTarget) {
  std::mt19937_64 rng(53);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  const int64_t dims[] = {1, 3, 8, 24, 64, 80, 128};
  for (int i = 0; i < 28; ++i) {
    ops::AttentionShape s{pick(1, 3), pick(1, 150), pick(1, 3), dims[i % 7], i % 3 != 1};
    switch (i % 4) {
      case 1:  // a cache's prefill: queries after q_start cached keys, rows kv_stride apart
        s.q_start = pick(0, 90);
        s.Tk = s.q_start + s.T;
        s.kv_stride = s.Tk + pick(0, 20);
        break;
      case 3:  // cross-attention (causal too: query t sees keys [0, t])
        s.Tk = pick(1, 200);
        s.kv_stride = s.Tk + pick(0, 3);
        break;
      default: break;
    }
    const FlashCase c = make_case(rng, s, i % 2 == 0 || i % 7 == 3, i % 5 == 4);
    SCOPED_TRACE(describe(c));
    const Vec ref = reference(c);
    for_each_simd_target([&] { expect_close_fp32(fused(c), ref, 5e-6); });
  }
}

// Shapes of the models: RoFormer-base's heads over several row blocks and key tiles (a partial last
// one), causal and not, with trailing padding.
TEST(FlashAttention, MatchesTheFp64ForwardAtModelShapes) {
  std::mt19937_64 rng(54);
  for (bool causal : {false, true}) {
    ops::AttentionShape s{2, 300, 2, 64, causal};
    FlashCase c = make_case(rng, s, false, false);
    c.key_mask.assign(s.B * s.T, 1);
    for (int64_t j = 250; j < s.T; ++j) c.key_mask[s.T + j] = 0;
    c.masked = true;
    SCOPED_TRACE(describe(c));
    const Vec ref = reference(c);
    for_each_simd_target([&] { expect_close_fp32(fused(c), ref, 5e-6); });
  }
}

TEST(FlashAttention, RowsThatSeeNoKeyAttendUniformlyOverAllKeys) {
  std::mt19937_64 rng(55);
  ops::AttentionShape s{1, 5, 2, 8, false};
  FlashCase c = make_case(rng, s, false, false);
  c.key_mask.assign(s.T, 0);
  c.masked = true;
  const std::vector<float> out = fused(c);
  for (int64_t t = 0; t < s.T; ++t) {
    for (int64_t x = 0; x < s.H * s.D; ++x) {
      double mean = 0;
      for (int64_t j = 0; j < s.T; ++j) mean += c.v[j * s.H * s.D + x] / s.T;
      EXPECT_NEAR(out[t * s.H * s.D + x], mean, 1e-6);
    }
  }
}

// Inference writes the context over the queries: each block reads its queries before it writes.
TEST(FlashAttention, OutputMayOverwriteTheQueries) {
  std::mt19937_64 rng(56);
  for (bool causal : {false, true}) {
    ops::AttentionShape s{2, 150, 3, 24, causal};
    const FlashCase c = make_case(rng, s, true, false);
    const auto k = to_f32(c.k), v = to_f32(c.v);
    std::vector<float> over = to_f32(c.q);
    ops::flash_attention_forward(over.data(), over.data(), k.data(), v.data(), c.key_mask.data(), c.s);
    EXPECT_EQ(over, fused(c));
  }
}

// Each block's arithmetic is its own: 1 and 2 threads give the same bits.
TEST(FlashAttention, SameBitsWhateverTheThreadCount) {
  std::mt19937_64 rng(57);
  const FlashCase c = make_case(rng, ops::AttentionShape{2, 200, 3, 64, true}, true, false);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = fused(c);
  omp_set_num_threads(2);
  const std::vector<float> two = fused(c);
  omp_set_num_threads(threads);
  EXPECT_EQ(one, two);
}

// attention_forward runs fp32 inference of 16 query rows or more through the fused kernel (the same
// bits), fewer through its per-block products (attention_forward_blocks).
TEST(FlashAttention, AttentionForwardRoutesFp32InferenceFrom16Rows) {
  std::mt19937_64 rng(58);
  for (int64_t T : {15, 16, 100}) {
    SCOPED_TRACE(T);
    const FlashCase c = make_case(rng, ops::AttentionShape{2, T, 2, 32, true}, true, false);
    const auto q = to_f32(c.q), k = to_f32(c.k), v = to_f32(c.v);
    std::vector<float> routed(q.size()), blocks(q.size());
    ops::attention_forward(routed.data(), static_cast<float*>(nullptr), q.data(), k.data(), v.data(),
                           c.key_mask.data(), c.s);
    ops::attention_forward_blocks(blocks.data(), q.data(), k.data(), v.data(), c.key_mask.data(), c.s);
    if (T >= 16) {
      EXPECT_EQ(routed, fused(c));
      EXPECT_NE(routed, blocks);  // another order of sums somewhere
    } else {
      EXPECT_EQ(routed, blocks);
    }
  }
}

TEST(FlashAttention, RefusesWhatIsNotFp32Inference) {
  std::vector<float> x(4);
  ops::AttentionShape s{1, 2, 1, 2, false};
  s.saved = ops::AttentionSaved::none;
  EXPECT_TRUE(ops::flash_attention_applies(s));
  for (int i = 0; i < 3; ++i) {
    ops::AttentionShape bad = s;
    if (i == 0) bad.saved = ops::AttentionSaved::row_stats;
    if (i == 1) bad.dropout_p = 0.1;
    if (i == 2) bad.bf16_products = true;
    EXPECT_FALSE(ops::flash_attention_applies(bad));
    EXPECT_THROW(ops::flash_attention_forward(x.data(), x.data(), x.data(), x.data(), nullptr, bad),
                 std::invalid_argument);
  }
}

}  // namespace
