// Every invalid argument gets its status code and a message, never undefined behaviour (the debug
// preset runs this under ASan and UBSan).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "rope/rope.hpp"

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

#define EXPECT_STATUS(expr, status)                                   \
  do {                                                                \
    const rope_status s_ = (expr);                                    \
    EXPECT_EQ(s_, status) << #expr << ": " << rope_last_error();      \
    if (s_ != ROPE_OK) {                                              \
      EXPECT_STRNE(rope_last_error(), "") << #expr;                   \
    }                                                                 \
  } while (0)

rope_status create(const rope_config& cfg) {
  rope_plan* plan = nullptr;
  const rope_status s = rope_plan_create(&cfg, &plan);
  if (s != ROPE_OK) {
    EXPECT_EQ(plan, nullptr);
  }
  rope_plan_destroy(plan);
  return s;
}

// An odd head_dim with the default rot_dim names head_dim, the value the caller set.
TEST(RopeErrors, OddHeadDimIsNamed) {
  EXPECT_STATUS(create(rope::default_config(7)), ROPE_ERR_BAD_SHAPE);
  EXPECT_NE(std::string(rope_last_error()).find("head_dim 7 is odd"), std::string::npos) << rope_last_error();
}

TEST(RopeErrors, Config) {
  const rope_config ok = rope::default_config(64);
  EXPECT_STATUS(create(ok), ROPE_OK);
  rope_plan* plan = nullptr;
  EXPECT_STATUS(rope_plan_create(nullptr, &plan), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_plan_create(&ok, nullptr), ROPE_ERR_NULL_POINTER);

  auto with = [&](auto edit) {
    rope_config c = ok;
    edit(c);
    return create(c);
  };
  EXPECT_STATUS(with([](rope_config& c) { c.head_dim = 0; }), ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(with([](rope_config& c) { c.head_dim = -4; }), ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(with([](rope_config& c) { c.rot_dim = 63; }), ROPE_ERR_BAD_SHAPE);   // odd
  EXPECT_STATUS(with([](rope_config& c) { c.rot_dim = 66; }), ROPE_ERR_BAD_SHAPE);   // > head_dim
  EXPECT_STATUS(with([](rope_config& c) { c.rot_dim = 0; }), ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(with([](rope_config& c) { c.rot_offset = 2; }), ROPE_ERR_BAD_SHAPE); // 2 + 64 > 64
  EXPECT_STATUS(with([](rope_config& c) { c.rot_offset = -2; c.rot_dim = 32; }), ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(with([](rope_config& c) { c.layout = static_cast<rope_layout>(7); }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.base = kNaN; }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.base = -1; }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.base = 1; }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.scaling.type = static_cast<rope_scaling_type>(99); }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.scaling.type = ROPE_SCALING_LINEAR; c.scaling.factor = kInf; }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.scaling.type = ROPE_SCALING_LINEAR; c.scaling.factor = 0; }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.scaling.type = ROPE_SCALING_YARN; c.scaling.factor = 4; }),
                ROPE_ERR_INVALID_ARGUMENT);  // no original_max_positions
  EXPECT_STATUS(with([](rope_config& c) {
                  c.scaling.type = ROPE_SCALING_YARN;
                  c.scaling.factor = 4;
                  c.scaling.original_max_positions = 4096;
                  c.scaling.beta_fast = kNaN;
                }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) {
                  c.scaling.type = ROPE_SCALING_YARN;
                  c.scaling.factor = 4;
                  c.scaling.original_max_positions = 4096;
                  c.scaling.mscale = -1;
                }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.scaling.attention_factor = kNaN; }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) {
                  c.scaling.type = ROPE_SCALING_LLAMA3;
                  c.scaling.factor = 8;
                  c.scaling.original_max_positions = 8192;
                  c.scaling.low_freq_factor = 4;
                  c.scaling.high_freq_factor = 4;
                }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) {
                  c.scaling.type = ROPE_SCALING_LONGROPE;
                  c.scaling.factor = 8;
                  c.scaling.original_max_positions = 4096;
                }),
                ROPE_ERR_NULL_POINTER);  // factors missing
  std::vector<double> bad(32, 1.0);
  bad[5] = kNaN;
  EXPECT_STATUS(with([&](rope_config& c) { c.freq_factors = bad.data(); }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.scaling.type = ROPE_SCALING_NTK; c.scaling.factor = 2; c.rot_dim = 2; }),
                ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(with([](rope_config& c) { c.xpos.enabled = 1; c.xpos.scale_base = 0; }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.xpos.enabled = 3; }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.n_axes = 0; }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.n_axes = 3; c.sections[0] = 10; }), ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(with([](rope_config& c) {
                  c.n_axes = 2;
                  c.sections[0] = -1;
                  c.sections[1] = 33;
                }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.n_axes = 2; c.axes_mode = static_cast<rope_axes_mode>(9); }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.mode = static_cast<rope_cos_sin_mode>(5); }), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(with([](rope_config& c) { c.mode = ROPE_MODE_TABLE; }), ROPE_ERR_INVALID_ARGUMENT);  // 0 rows
  EXPECT_STATUS(with([](rope_config& c) { c.mode = ROPE_MODE_TABLE; c.table_positions = int64_t{1} << 40; }),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(rope_config_preset(nullptr, ROPE_PRESET_LLAMA, 64), ROPE_ERR_NULL_POINTER);
  rope_config c;
  EXPECT_STATUS(rope_config_preset(&c, static_cast<rope_preset>(42), 64), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(rope_config_preset(&c, ROPE_PRESET_GPTJ, 32), ROPE_ERR_BAD_SHAPE);  // rot 64 > 32
}

TEST(RopeErrors, PlanQueries) {
  rope::Plan plan(rope::default_config(8));
  float c[4], s[4];
  double f[4];
  EXPECT_STATUS(rope_plan_cos_sin(plan.get(), -1, c, s), ROPE_ERR_BAD_POSITION);
  EXPECT_STATUS(rope_plan_cos_sin(plan.get(), ROPE_MAX_POSITION, c, s), ROPE_ERR_BAD_POSITION);
  EXPECT_STATUS(rope_plan_cos_sin(nullptr, 0, c, s), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_plan_cos_sin(plan.get(), 0, nullptr, s), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_plan_inv_freq(nullptr, f), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_plan_attention_factor(plan.get(), nullptr), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_plan_set_seq_len(plan.get(), -5), ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(rope_plan_set_seq_len(nullptr, 5), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_plan_cos_sin(plan.get(), 3, c, s), ROPE_OK);
  EXPECT_STREQ(rope_last_error(), "") << "a successful call clears the message";
}

class RopeApplyErrors : public ::testing::Test {
 protected:
  static constexpr int kD = 16;
  RopeApplyErrors() : plan(rope::default_config(kD)), q(4 * 3 * kD, 1.0f), k(4 * 2 * kD, 1.0f), out(q.size()) {}
  rope_tensor qt() { return rope::bshd(q.data(), ROPE_DTYPE_F32, 1, 4, 3, kD); }
  rope_tensor kt() { return rope::bshd(k.data(), ROPE_DTYPE_F32, 1, 4, 2, kD); }
  rope_status apply(const rope_tensor& x, const rope_positions& p, const rope_tensor* o = nullptr) {
    return rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &p, &x, o, nullptr);
  }
  rope::Plan plan;
  std::vector<float> q, k, out;
  rope_positions pos = rope::offset_positions(0);
};

TEST_F(RopeApplyErrors, Tensors) {
  EXPECT_STATUS(apply(qt(), pos), ROPE_OK);
  rope_tensor t = qt();
  EXPECT_STATUS(rope_apply(nullptr, ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, nullptr), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, nullptr, &t, nullptr, nullptr), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, nullptr, nullptr, nullptr), ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_apply(plan.get(), static_cast<rope_direction>(2), ROPE_ROLE_QUERY, &pos, &t, nullptr, nullptr),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(rope_apply(plan.get(), ROPE_FORWARD, static_cast<rope_role>(2), &pos, &t, nullptr, nullptr),
                ROPE_ERR_INVALID_ARGUMENT);
  t.data = nullptr;
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_NULL_POINTER);
  t = qt(); t.dtype = static_cast<rope_dtype>(9);
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_INVALID_ARGUMENT);
  t = qt(); t.n_tokens = 0;
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_BAD_SHAPE);
  t = qt(); t.n_heads = -1;
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_BAD_SHAPE);
  t = qt(); t.head_stride = 8;  // heads overlap (head_dim 16)
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_BAD_STRIDE);
  t = qt(); t.token_stride = -48;
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_BAD_STRIDE);
  t = qt(); t.token_stride = 0;  // every token on the same memory
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_BAD_STRIDE);
  t = qt(); t.n_tokens = int64_t{1} << 50;
  EXPECT_STATUS(apply(t, pos), ROPE_ERR_BAD_SHAPE);
  rope_exec bad_exec{-1, ROPE_BACKEND_AUTO, nullptr};
  t = qt();
  EXPECT_STATUS(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &bad_exec),
                ROPE_ERR_INVALID_ARGUMENT);
  bad_exec = {1, static_cast<rope_backend>(5), nullptr};
  EXPECT_STATUS(rope_apply(plan.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &pos, &t, nullptr, &bad_exec),
                ROPE_ERR_INVALID_ARGUMENT);
}

TEST_F(RopeApplyErrors, OutOfPlaceAndAliasing) {
  rope_tensor o = rope::bshd(out.data(), ROPE_DTYPE_F32, 1, 4, 3, kD);
  EXPECT_STATUS(apply(qt(), pos, &o), ROPE_OK);
  rope_tensor shifted = rope::bshd(q.data() + 8, ROPE_DTYPE_F32, 1, 3, 3, kD);
  rope_tensor src = rope::bshd(q.data(), ROPE_DTYPE_F32, 1, 3, 3, kD);
  EXPECT_STATUS(apply(src, pos, &shifted), ROPE_ERR_OVERLAP);
  rope_tensor wrong = o;
  wrong.dtype = ROPE_DTYPE_BF16;
  EXPECT_STATUS(apply(qt(), pos, &wrong), ROPE_ERR_BAD_SHAPE);
  wrong = o;
  wrong.n_heads = 2;
  EXPECT_STATUS(apply(qt(), pos, &wrong), ROPE_ERR_BAD_SHAPE);
  // q and k in one call must not share memory, and must agree on batch and tokens.
  rope_tensor qq = qt(), kk = qt();
  kk.n_heads = 2;
  EXPECT_STATUS(rope_apply_qk(plan.get(), ROPE_FORWARD, &pos, &qq, nullptr, &kk, nullptr, nullptr), ROPE_ERR_OVERLAP);
  kk = kt();
  kk.n_tokens = 3;
  EXPECT_STATUS(rope_apply_qk(plan.get(), ROPE_FORWARD, &pos, &qq, nullptr, &kk, nullptr, nullptr), ROPE_ERR_BAD_SHAPE);
  kk = kt();
  EXPECT_STATUS(rope_apply_qk(plan.get(), ROPE_FORWARD, &pos, &qq, nullptr, &kk, nullptr, nullptr), ROPE_OK);
  EXPECT_STATUS(rope_apply_qk(plan.get(), ROPE_FORWARD, &pos, &qq, nullptr, nullptr, nullptr, nullptr),
                ROPE_ERR_NULL_POINTER);
}

TEST_F(RopeApplyErrors, Positions) {
  rope_positions p = rope::offset_positions(-1);
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_POSITION);
  p = rope::offset_positions(ROPE_MAX_POSITION - 2);  // last token past the limit
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_POSITION);
  p = rope::offset_positions(INT64_MAX);
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_POSITION);
  const int64_t starts[1] = {-7};
  p = rope::offset_positions(0);
  p.starts = starts;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_POSITION);
  p = rope_positions{};
  p.kind = ROPE_POSITIONS_IDS;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_NULL_POINTER);
  const int64_t ids[4] = {0, 1, -2, 3};
  p.ids = ids;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_POSITION);
  p = rope_positions{};
  p.kind = ROPE_POSITIONS_VARLEN;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_NULL_POINTER);
  const int64_t cu_bad_end[3] = {0, 2, 3};
  p.cu_seqlens = cu_bad_end;
  p.n_seqs = 2;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_SHAPE);
  const int64_t cu_decreasing[3] = {0, 3, 2};
  p.cu_seqlens = cu_decreasing;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_SHAPE);
  const int64_t cu_ok[3] = {0, 1, 4};
  p.cu_seqlens = cu_ok;
  p.n_seqs = 0;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_SHAPE);
  p.n_seqs = 2;
  EXPECT_STATUS(apply(qt(), p), ROPE_OK);
  const int64_t seq_starts[2] = {5, -1};
  p.seq_starts = seq_starts;
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_BAD_POSITION);
  p.kind = static_cast<rope_position_kind>(11);
  EXPECT_STATUS(apply(qt(), p), ROPE_ERR_INVALID_ARGUMENT);
  // varlen needs packed tokens (n_batch 1)
  std::vector<float> two(2 * 4 * kD);
  rope_tensor batched{two.data(), ROPE_DTYPE_F32, 2, 4, 1, 4 * kD, kD, kD};
  p.kind = ROPE_POSITIONS_VARLEN;
  p.seq_starts = nullptr;
  EXPECT_STATUS(apply(batched, p), ROPE_ERR_BAD_SHAPE);
}

TEST_F(RopeApplyErrors, TableAndXposLimits) {
  rope_config cfg = rope::default_config(kD);
  cfg.mode = ROPE_MODE_TABLE;
  cfg.table_positions = 10;
  rope::Plan table(cfg);
  rope_tensor t = qt();
  rope_positions p = rope::offset_positions(7);  // tokens 7..10, table holds 0..9
  EXPECT_STATUS(rope_apply(table.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &p, &t, nullptr, nullptr), ROPE_ERR_BAD_POSITION);
  p.start = 6;
  EXPECT_STATUS(rope_apply(table.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &p, &t, nullptr, nullptr), ROPE_OK);
  cfg = rope::default_config(kD);
  cfg.xpos.enabled = 1;
  rope::Plan xpos(cfg);
  p.start = 1 << 20;  // ζ^(m/512) would overflow fp32
  EXPECT_STATUS(rope_apply(xpos.get(), ROPE_FORWARD, ROPE_ROLE_QUERY, &p, &t, nullptr, nullptr), ROPE_ERR_BAD_POSITION);
}

TEST(RopeErrors, PermuteAndHfTable) {
  std::vector<float> w(2 * 8 * 3), o(w.size());
  EXPECT_STATUS(rope_permute_rows(w.data(), o.data(), 12, 2, 8, 8, 0, ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF), ROPE_OK);
  EXPECT_STATUS(rope_permute_rows(nullptr, o.data(), 12, 2, 8, 8, 0, ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF),
                ROPE_ERR_NULL_POINTER);
  EXPECT_STATUS(rope_permute_rows(w.data(), o.data(), 12, 2, 8, 7, 0, ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF),
                ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(rope_permute_rows(w.data(), o.data(), 0, 2, 8, 8, 0, ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF),
                ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(rope_permute_rows(w.data(), o.data(), 12, 2, 8, 8, 0, static_cast<rope_layout>(3), ROPE_LAYOUT_HALF),
                ROPE_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(rope_permute_rows(w.data(), w.data() + 1, 12, 2, 8, 8, 0, ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF),
                ROPE_ERR_OVERLAP);
  std::vector<float> table(4 * 8);
  EXPECT_STATUS(rope_hf_roformer_table(4, 8, table.data()), ROPE_OK);
  EXPECT_STATUS(rope_hf_roformer_table(4, 7, table.data()), ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(rope_hf_roformer_table(0, 8, table.data()), ROPE_ERR_BAD_SHAPE);
  EXPECT_STATUS(rope_hf_roformer_table(4, 8, nullptr), ROPE_ERR_NULL_POINTER);
  for (int s = ROPE_OK; s <= ROPE_ERR_UNSUPPORTED; ++s) {
    EXPECT_STRNE(rope_status_string(static_cast<rope_status>(s)), "unknown status");
  }
  EXPECT_THROW(rope::Plan(rope::default_config(0)), rope::Error);
}

}  // namespace
