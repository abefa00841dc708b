// Every configuration against the __float128 oracle: random shapes, strides (bshd/sbhd/bhsd with
// padding), dtypes, layouts, partial rotary dims, positions (offsets, ids, varlen, multi-axis),
// scaling, xPos, directions, in/out of place, fused q/k with GQA, threads, both backends, and every
// SIMD target compiled in. Outputs and padding start poisoned, so each element is checked as written.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "hwy/targets.h"
#include "oracle.h"
#include "rope/rope.hpp"
#include "rope/random_case.h"

namespace rope_test {
namespace {

// fp64 storage: fp64 rounding of the exact angle's cos/sin, the scale and the rotation (a few ulps).
constexpr double kF64Tolerance = 1e-15;  // measured up to 1.5e-16

double tolerance(rope_dtype dtype) {
  // fp32: the issue's bound. 16-bit: the storage rounding (2^-9 bf16, 2^-12 fp16 relative per
  // element, a few times over for the norm), on top of the same exact arithmetic.
  switch (dtype) {
    case ROPE_DTYPE_F32: return 1e-6;
    case ROPE_DTYPE_F16: return 1e-3;
    case ROPE_DTYPE_BF16: return 5e-3;
    case ROPE_DTYPE_F64: return kF64Tolerance;
  }
  return 0;
}

// xPos scales carry exp's error on an argument up to ~10 (measured up to 1.4e-15), so fp64 gets
// 10× more with xPos.
double tolerance(const RandomCase& c) {
  return tolerance(c.dtype) * (c.dtype == ROPE_DTYPE_F64 && c.cfg.xpos.enabled ? 10 : 1);
}

// dtype: force this storage type instead of the case's random one (the rest of the case is unchanged).
void run_case(uint64_t seed, rope_backend backend, std::optional<rope_dtype> dtype = std::nullopt) {
  std::mt19937_64 rng(seed);
  RandomCase c = random_case(rng);
  if (dtype) c.dtype = *dtype;
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " head_dim " << c.cfg.head_dim << " rot "
                                    << c.cfg.rot_dim << "@" << c.cfg.rot_offset << " layout " << c.cfg.layout
                                    << " dtype " << c.dtype << " axes " << c.cfg.n_axes << " mode " << c.cfg.mode
                                    << " scaling " << c.cfg.scaling.type << " pos " << c.pos.kind);
  rope::Plan plan(c.cfg);
  if (c.pos.kind == ROPE_POSITIONS_VARLEN || uniform(rng, 0, 1)) plan.set_seq_len(uniform(rng, 1, 10000));
  const std::vector<double> theta = plan.inv_freq();
  double attention = 0;
  rope::check(rope_plan_attention_factor(plan.get(), &attention));

  const bool fused = uniform(rng, 0, 1) == 1;
  const bool in_place = uniform(rng, 0, 1) == 1;
  const bool backward = uniform(rng, 0, 1) == 1;
  const int order = static_cast<int>(uniform(rng, 0, 2));
  const rope_exec exec{static_cast<int32_t>(uniform(rng, 1, 2)), backend, nullptr};

  TestTensor q = make_tensor(c.dtype, c.b, c.s, c.hq, c.cfg.head_dim, order, rng, true);
  TestTensor k = make_tensor(c.dtype, c.b, c.s, c.hk, c.cfg.head_dim, static_cast<int>(uniform(rng, 0, 2)), rng, true);
  q.randomize(rng);
  k.randomize(rng);
  TestTensor q_out = in_place ? q : make_tensor(c.dtype, c.b, c.s, c.hq, c.cfg.head_dim, order, rng, true);
  TestTensor k_out = in_place ? k : make_tensor(c.dtype, c.b, c.s, c.hk, c.cfg.head_dim, 0, rng, true);
  if (!in_place) {
    q_out.poison();
    k_out.poison();
  }
  const std::vector<uint8_t> q_before = q.buffer;
  const rope_direction dir = backward ? ROPE_BACKWARD : ROPE_FORWARD;
  // In place: rotate the copy in *_out; sometimes say so with out == NULL, sometimes with out == in.
  rope_tensor q_src = in_place ? q_out.view() : q.view(), q_dst = q_out.view();
  rope_tensor k_src = in_place ? k_out.view() : k.view(), k_dst = k_out.view();
  const bool null_out = in_place && uniform(rng, 0, 1) == 1;
  const rope_tensor* q_dst_arg = null_out ? nullptr : &q_dst;
  const rope_tensor* k_dst_arg = null_out ? nullptr : &k_dst;
  if (fused) {
    ASSERT_EQ(rope_apply_qk(plan.get(), dir, &c.pos, &q_src, q_dst_arg, &k_src, k_dst_arg, &exec), ROPE_OK)
        << rope_last_error();
  } else {
    ASSERT_EQ(rope_apply(plan.get(), dir, ROPE_ROLE_QUERY, &c.pos, &q_src, q_dst_arg, &exec), ROPE_OK)
        << rope_last_error();
  }
  const auto expect_q = oracle_apply(c.cfg, theta, attention, c.pos, backward, false, q);
  EXPECT_LE(relative_error(q_out, expect_q), tolerance(c));
  EXPECT_TRUE(q_out.padding_untouched());
  if (!in_place) {
    EXPECT_EQ(q.buffer, q_before) << "input modified";
  }
  if (fused) {
    const auto expect_k = oracle_apply(c.cfg, theta, attention, c.pos, backward, true, k);
    EXPECT_LE(relative_error(k_out, expect_k), tolerance(c));
    EXPECT_TRUE(k_out.padding_untouched());
  }
}

class RopeApplyTarget : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_P(RopeApplyTarget, DispatchesToTheTarget) {
  EXPECT_STREQ(rope_cpu_target(), hwy::TargetName(GetParam()));
}

TEST_P(RopeApplyTarget, RandomCasesMatchOracle) {
  for (uint64_t seed = 1; seed <= 150; ++seed) run_case(seed * 7919 + GetParam() % 97, ROPE_BACKEND_AUTO);
}

TEST_P(RopeApplyTarget, SixteenBitStoresRoundToNearestEvenForEveryBitPattern) {
  // At position 0 (cos 1, sin 0) with attention factor 1.5, y = round(x·1.5 ∓ partner·0), where
  // x·1.5 is exact in fp32; so every output must equal the RNE of that value bit for bit.
  // Head dims 64, 128 and 256: the AVX512-BF16 kernels test the packed words of all of a head's 2 or
  // 4 vectors at once (interleaved), and 256 takes two tiles.
  for (const int head_dim : {64, 128, 256}) {
    const int heads = 65536 / head_dim;
    for (rope_dtype dtype : {ROPE_DTYPE_BF16, ROPE_DTYPE_F16}) {
      for (rope_layout layout : {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF}) {
        rope_config cfg = rope::default_config(head_dim);
        cfg.layout = layout;
        cfg.scaling.attention_factor = 1.5;
        rope::Plan plan(cfg);
        std::vector<uint16_t> x(65536);
        for (uint32_t i = 0; i < 65536; ++i) x[i] = static_cast<uint16_t>(i);
        std::vector<uint16_t> y = x;
        plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, rope::offset_positions(0),
                   rope::bshd(y.data(), dtype, 1, 1, heads, head_dim));
        auto to_f32 = [&](uint16_t v) { return dtype == ROPE_DTYPE_BF16 ? rope::bf16_to_f32(v) : rope::f16_to_f32(v); };
        auto to_16 = [&](float v) { return dtype == ROPE_DTYPE_BF16 ? rope::f32_to_bf16(v) : rope::f32_to_f16(v); };
        int bad = 0;
        for (int h = 0; h < heads; ++h) {
          for (int i = 0; i < head_dim / 2; ++i) {
            const int a = h * head_dim + (layout == ROPE_LAYOUT_INTERLEAVED ? 2 * i : i);
            const int b = a + (layout == ROPE_LAYOUT_INTERLEAVED ? 1 : head_dim / 2);
            const float xa = to_f32(x[a]), xb = to_f32(x[b]);
            const float want[2] = {xa * 1.5f - xb * 0.0f, xb * 1.5f + xa * 0.0f};
            const int idx[2] = {a, b};
            for (int r = 0; r < 2; ++r) {
              const bool ok = std::isnan(want[r]) ? std::isnan(to_f32(y[idx[r]])) : y[idx[r]] == to_16(want[r]);
              if (!ok && ++bad <= 5) {
                ADD_FAILURE() << "head_dim " << head_dim << " dtype " << dtype << " layout " << layout
                              << " input 0x" << std::hex << x[idx[r]] << " got 0x" << y[idx[r]] << " want 0x"
                              << to_16(want[r]);
              }
            }
          }
        }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, RopeApplyTarget,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return std::string(hwy::TargetName(info.param));
                         });

TEST(RopeApplyReference, RandomCasesMatchOracle) {
  for (uint64_t seed = 1; seed <= 150; ++seed) run_case(seed * 104729, ROPE_BACKEND_REFERENCE);
}

// ROPE_DTYPE_F64: the same random cases (shapes, strides, layouts, positions, scaling, xPos, table
// plans, backward, in/out of place, fused q+k with GQA) stored in fp64, against the oracle to ~1e-15.
// AUTO must route fp64 to the reference code as well.
TEST(RopeApplyF64, RandomCasesMatchOracle) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    run_case(seed * 15485863, seed % 2 ? ROPE_BACKEND_AUTO : ROPE_BACKEND_REFERENCE, ROPE_DTYPE_F64);
  }
}

// A copy of t in another dtype (random layout and padding), holding the same values.
TestTensor convert(const TestTensor& t, rope_dtype dtype, std::mt19937_64& rng) {
  TestTensor o = make_tensor(dtype, t.b, t.s, t.h, t.d, static_cast<int>(uniform(rng, 0, 2)), rng, true);
  for (int64_t bi = 0; bi < t.b; ++bi)
    for (int64_t si = 0; si < t.s; ++si)
      for (int64_t hi = 0; hi < t.h; ++hi)
        for (int64_t di = 0; di < t.d; ++di) o.set(o.index(bi, si, hi, di), t.get(t.index(bi, si, hi, di)));
  return o;
}

// Values of t in view order [b][s][h][d].
std::vector<double> values(const TestTensor& t) {
  std::vector<double> v;
  for (int64_t bi = 0; bi < t.b; ++bi)
    for (int64_t si = 0; si < t.s; ++si)
      for (int64_t hi = 0; hi < t.h; ++hi)
        for (int64_t di = 0; di < t.d; ++di) v.push_back(t.get(t.index(bi, si, hi, di)));
  return v;
}

// The fp32 path is the fp64 path rounded: the same inputs (fp32 values) rotated as F32 (SIMD or
// reference) and as F64 agree to fp32 precision, for q and k, forward and backward.
TEST(RopeApplyF64, Fp32PathIsFp64PathRounded) {
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    std::mt19937_64 rng(seed * 7727);
    RandomCase c = random_case(rng);
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " layout " << c.cfg.layout << " mode " << c.cfg.mode
                                      << " scaling " << c.cfg.scaling.type << " xpos " << c.cfg.xpos.enabled);
    rope::Plan plan(c.cfg);
    if (c.pos.kind == ROPE_POSITIONS_VARLEN || uniform(rng, 0, 1)) plan.set_seq_len(uniform(rng, 1, 10000));
    const rope_direction dir = uniform(rng, 0, 1) ? ROPE_BACKWARD : ROPE_FORWARD;
    const rope_exec exec{1, uniform(rng, 0, 1) ? ROPE_BACKEND_AUTO : ROPE_BACKEND_REFERENCE, nullptr};
    TestTensor q = make_tensor(ROPE_DTYPE_F32, c.b, c.s, c.hq, c.cfg.head_dim, 0, rng, true);
    TestTensor k = make_tensor(ROPE_DTYPE_F32, c.b, c.s, c.hk, c.cfg.head_dim, 1, rng, true);
    q.randomize(rng);
    k.randomize(rng);
    TestTensor q64 = convert(q, ROPE_DTYPE_F64, rng), k64 = convert(k, ROPE_DTYPE_F64, rng);
    rope_tensor qv = q.view(), kv = k.view(), q64v = q64.view(), k64v = k64.view();
    ASSERT_EQ(rope_apply_qk(plan.get(), dir, &c.pos, &qv, nullptr, &kv, nullptr, &exec), ROPE_OK) << rope_last_error();
    ASSERT_EQ(rope_apply_qk(plan.get(), dir, &c.pos, &q64v, nullptr, &k64v, nullptr, &exec), ROPE_OK)
        << rope_last_error();
    EXPECT_LE(relative_error(q, values(q64)), 1e-6);
    EXPECT_LE(relative_error(k, values(k64)), 1e-6);
  }
}

// One fused call may mix dtypes: fp64 q with fp32 k, each rotated as its own dtype would be alone.
TEST(RopeApplyF64, MixedDtypesInOneFusedCall) {
  std::mt19937_64 rng(99);
  rope_config cfg = rope::default_config(64);
  cfg.layout = ROPE_LAYOUT_HALF;
  cfg.scaling.type = ROPE_SCALING_YARN;
  cfg.scaling.factor = 4;
  cfg.scaling.original_max_positions = 2048;
  rope::Plan plan(cfg);
  double attention = 0;
  rope::check(rope_plan_attention_factor(plan.get(), &attention));
  const rope_positions pos = rope::offset_positions(123456789);
  TestTensor q = make_tensor(ROPE_DTYPE_F64, 2, 5, 4, 64, 0, rng, true);
  TestTensor k = make_tensor(ROPE_DTYPE_F32, 2, 5, 2, 64, 2, rng, true);
  q.randomize(rng);
  k.randomize(rng);
  const auto expect_q = oracle_apply(cfg, plan.inv_freq(), attention, pos, false, false, q);
  const auto expect_k = oracle_apply(cfg, plan.inv_freq(), attention, pos, false, true, k);
  plan.apply_qk(ROPE_FORWARD, pos, q.view(), k.view());
  EXPECT_LE(relative_error(q, expect_q), kF64Tolerance);
  EXPECT_LE(relative_error(k, expect_k), 1e-6);
  EXPECT_TRUE(q.padding_untouched());
  EXPECT_TRUE(k.padding_untouched());
}

// fp64 in and out must agree in dtype like the others; an unknown dtype is still rejected.
TEST(RopeApplyF64, DtypeMismatchIsRejected) {
  rope::Plan plan(rope::default_config(8));
  std::vector<double> x(8, 1.0);
  std::vector<float> y(8);
  const rope_tensor in = rope::bshd(x.data(), ROPE_DTYPE_F64, 1, 1, 1, 8);
  const rope_tensor out = rope::bshd(y.data(), ROPE_DTYPE_F32, 1, 1, 1, 8);
  const rope_positions pos = rope::offset_positions(3);
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &in, &out, nullptr), ROPE_ERR_BAD_SHAPE);
  const rope_tensor bad = rope::bshd(x.data(), static_cast<rope_dtype>(4), 1, 1, 1, 8);
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &bad, nullptr, nullptr),
            ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &in, nullptr, nullptr), ROPE_OK);
}

}  // namespace
}  // namespace rope_test
