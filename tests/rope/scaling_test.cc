// Frequency scaling against independent values: Hugging Face transformers' ROPE_INIT_FUNCTIONS
// (tests/testdata/hf_rope_scaling.json, made by tools/gen_rope_scaling_ref.py with transformers 4.57.6),
// plus relations HF has no function for: static NTK, AXIAL ladders, raw freq_factors, and the
// dynamic/LongRoPE switch through rope_plan_set_seq_len.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rope/freqs.h"
#include "rope/rope.hpp"

namespace {

using nlohmann::json;

rope_scaling_type scaling_type(const std::string& name) {
  if (name == "none") return ROPE_SCALING_NONE;
  if (name == "linear") return ROPE_SCALING_LINEAR;
  if (name == "dynamic_ntk") return ROPE_SCALING_DYNAMIC_NTK;
  if (name == "yarn") return ROPE_SCALING_YARN;
  if (name == "llama3") return ROPE_SCALING_LLAMA3;
  if (name == "longrope") return ROPE_SCALING_LONGROPE;
  throw std::runtime_error("unknown scaling type " + name);
}

TEST(RopeScaling, MatchesHuggingFaceRopeInitFunctions) {
  std::ifstream file(ROFORMER_TEST_DATA "/hf_rope_scaling.json");
  ASSERT_TRUE(file) << "missing tests/testdata/hf_rope_scaling.json";
  const json data = json::parse(file);
  ASSERT_GE(data["cases"].size(), 40u);
  for (const json& c : data["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const int rot_dim = c["rot_dim"];
    rope_config cfg = rope::default_config(rot_dim);
    cfg.base = c["base"];
    rope_scaling& sc = cfg.scaling;
    sc.type = scaling_type(c["type"]);
    sc.factor = c["factor"];
    sc.original_max_positions = c["original_max_positions"];
    sc.beta_fast = c.value("beta_fast", 32.0);
    sc.beta_slow = c.value("beta_slow", 1.0);
    sc.mscale = c.value("mscale", 0.0);
    sc.mscale_all_dim = c.value("mscale_all_dim", 0.0);
    sc.attention_factor = c.value("attention_factor", 0.0);
    sc.truncate = c.value("truncate", 1);
    sc.low_freq_factor = c.value("low_freq_factor", 1.0);
    sc.high_freq_factor = c.value("high_freq_factor", 4.0);
    std::vector<double> short_f, long_f;
    if (sc.type == ROPE_SCALING_LONGROPE) {
      short_f = c["short_factor"].get<std::vector<double>>();
      long_f = c["long_factor"].get<std::vector<double>>();
      sc.short_factor = short_f.data();
      sc.long_factor = long_f.data();
    }
    rope::Plan plan(cfg);
    if (c["seq_len"].get<int64_t>() > 0) plan.set_seq_len(c["seq_len"]);
    const std::vector<double> ours = plan.inv_freq();
    const std::vector<double> hf = c["expected"]["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(ours.size(), hf.size());
    for (size_t i = 0; i < hf.size(); ++i) {
      // HF computes in float32 (up to 7.9e-7 from exact); ours is float64.
      EXPECT_NEAR(ours[i] / hf[i], 1.0, 2e-6) << "pair " << i;
    }
    double attention = 0;
    rope::check(rope_plan_attention_factor(plan.get(), &attention));
    EXPECT_NEAR(attention, c["expected"]["attention_factor"].get<double>(), 1e-12);
  }
}

TEST(RopeScaling, StaticNtkEqualsDynamicAtTheMatchingLength) {
  // Dynamic NTK with factor f at length L uses α = f·L/L0 − (f − 1); static NTK with s = α agrees.
  rope_config dyn = rope::default_config(128);
  dyn.scaling.type = ROPE_SCALING_DYNAMIC_NTK;
  dyn.scaling.factor = 2;
  dyn.scaling.original_max_positions = 4096;
  rope::Plan dynamic(dyn);
  const std::vector<double> before = dynamic.inv_freq();
  EXPECT_EQ(before, rope::base_ladder(10000.0, 128)) << "no change up to the original length";
  dynamic.set_seq_len(4096 * 3);
  rope_config stat = rope::default_config(128);
  stat.scaling.type = ROPE_SCALING_NTK;
  stat.scaling.factor = 2.0 * 3 - 1.0;
  const std::vector<double> a = dynamic.inv_freq(), b = rope::Plan(stat).inv_freq();
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(a[i] / b[i], 1.0, 1e-14);
  EXPECT_LT(a[63], before[63]);
}

TEST(RopeScaling, AxialSectionsHaveTheirOwnLadders) {
  rope_config cfg = rope::default_config(64);
  cfg.n_axes = 2;
  cfg.axes_mode = ROPE_AXES_AXIAL;
  cfg.sections[0] = 16;
  cfg.sections[1] = 16;
  const std::vector<double> theta = rope::Plan(cfg).inv_freq();
  const std::vector<double> ladder = rope::base_ladder(10000.0, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(theta[j], ladder[j]);
    EXPECT_EQ(theta[16 + j], ladder[j]);
  }
}

TEST(RopeScaling, FreqFactorsDivideTheta) {
  std::vector<double> ff(32);
  for (int i = 0; i < 32; ++i) ff[i] = 1.0 + i;
  rope_config cfg = rope::default_config(64);
  cfg.freq_factors = ff.data();
  rope::Plan plan(cfg);
  ff.assign(32, 1e9);  // the plan keeps its own copy
  const std::vector<double> theta = plan.inv_freq(), ladder = rope::base_ladder(10000.0, 64);
  for (int i = 0; i < 32; ++i) EXPECT_DOUBLE_EQ(theta[i], ladder[i] / (1.0 + i));
}

TEST(RopeScaling, PresetsAreValid) {
  for (int p = ROPE_PRESET_ROFORMER; p <= ROPE_PRESET_QWEN2_VL; ++p) {
    rope_config cfg;
    ASSERT_EQ(rope_config_preset(&cfg, static_cast<rope_preset>(p), 128), ROPE_OK) << rope_last_error();
    EXPECT_NO_THROW(rope::Plan plan(cfg));
  }
  rope_config cfg;
  ASSERT_EQ(rope_config_preset(&cfg, ROPE_PRESET_QWEN2_VL, 128), ROPE_OK);
  EXPECT_EQ(cfg.sections[0], 16);
  EXPECT_EQ(cfg.sections[1], 24);
  EXPECT_EQ(cfg.sections[2], 24);
}

}  // namespace
