// The HF RoFormer sinusoidal table preset against the reference fixtures
// (../shared/fixtures/roformer-hf/*/io.safetensors: sinusoidal_pos, [seq, head_dim] = sin | cos),
// to within 1 fp32 ulp, both as rope_hf_roformer_table builds it and as the ROFORMER preset's
// exact cos/sin give it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rope/rope.hpp"

namespace {

// The tensor `name` of a safetensors file as fp32 plus its shape (test-only reader; F32 only).
std::vector<float> read_f32(const std::string& path, const std::string& name, std::vector<int64_t>* shape) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  f.read(header.data(), static_cast<std::streamsize>(header_len));
  const auto meta = nlohmann::json::parse(header).at(name);
  if (meta.at("dtype") != "F32") throw std::runtime_error(name + " is not F32");
  *shape = meta.at("shape").get<std::vector<int64_t>>();
  const auto offsets = meta.at("data_offsets").get<std::vector<uint64_t>>();
  std::vector<float> out((offsets[1] - offsets[0]) / 4);
  f.seekg(static_cast<std::streamoff>(8 + header_len + offsets[0]));
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * 4));
  if (!f) throw std::runtime_error("truncated " + path);
  return out;
}

int ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::abs(ia - ib);
}

class HfRoformerTable : public ::testing::TestWithParam<const char*> {};

TEST_P(HfRoformerTable, MatchesFixtureWithinOneUlp) {
  const std::string path = std::string(ROFORMER_FIXTURES) + "/" + GetParam() + "/io.safetensors";
  std::vector<int64_t> shape;
  const std::vector<float> expected = read_f32(path, "sinusoidal_pos", &shape);
  ASSERT_EQ(shape.size(), 2u);
  const int64_t rows = shape[0];
  const int dim = static_cast<int>(shape[1]), half = dim / 2;

  std::vector<float> table(rows * dim);
  ASSERT_EQ(rope_hf_roformer_table(rows, dim, table.data()), ROPE_OK);
  rope_config cfg;
  ASSERT_EQ(rope_config_preset(&cfg, ROPE_PRESET_ROFORMER, dim), ROPE_OK);
  rope::Plan plan(cfg);
  std::vector<float> c(half), s(half);
  for (int64_t p = 0; p < rows; ++p) {
    ASSERT_EQ(rope_plan_cos_sin(plan.get(), p, c.data(), s.data()), ROPE_OK);
    for (int j = 0; j < dim; ++j) {
      const float want = expected[p * dim + j];
      EXPECT_LE(ulp_distance(table[p * dim + j], want), 1) << "row " << p << " col " << j;
      const float exact = j < half ? s[j] : c[j - half];
      EXPECT_LE(ulp_distance(exact, want), 1) << "preset, row " << p << " col " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfRoformerTable,
                         ::testing::Values("case1_mlm_basic", "case2_embproj_rotary_value",
                                           "case3_seq_eq_max_positions"));

TEST(HfRoformerTable, MatchesTheStoredEmbedPositionsWeight) {
  // model.safetensors stores the full [max_position_embeddings, d] table.
  const std::string path = std::string(ROFORMER_FIXTURES) + "/case1_mlm_basic/model.safetensors";
  std::vector<int64_t> shape;
  const std::vector<float> expected = read_f32(path, "roformer.encoder.embed_positions.weight", &shape);
  std::vector<float> table(shape[0] * shape[1]);
  ASSERT_EQ(rope_hf_roformer_table(shape[0], static_cast<int32_t>(shape[1]), table.data()), ROPE_OK);
  for (size_t i = 0; i < table.size(); ++i) EXPECT_LE(ulp_distance(table[i], expected[i]), 1) << i;
}

}  // namespace
