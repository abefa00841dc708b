// The RoFormer encoder against Hugging Face transformers 4.40.2 (../shared/fixtures/roformer-hf),
// and RoFormer-V2 / RoFormer-Sim against reference cases (tests/testdata/roformer_{v2,sim}):
// embedding_output, every hidden state, every attention map and the MLM logits, within the fixtures'
// tolerance |ours − HF| <= 1e-5 + 1e-4·|HF|. A failure names the first tensor that drifts.
// The same comparison runs on a directory named by ROFORMER_ROUNDTRIP_DIR (skipped when unset): a
// checkpoint of ours plus the io.safetensors that tests/hf/hf_logits.py wrote after loading it with
// transformers' from_pretrained (tests/hf/roundtrip.sh drives it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "io/safetensors.h"
#include "model/roformer.h"

namespace {

// Index of the first element out of tolerance, or -1.
int64_t first_mismatch(const std::vector<float>& ours, const std::vector<float>& hf, size_t offset = 0) {
  for (size_t i = 0; i < ours.size(); ++i) {
    const double e = hf[offset + i];
    if (!(std::fabs(ours[i] - e) <= 1e-5 + 1e-4 * std::fabs(e))) return static_cast<int64_t>(i);
  }
  return -1;
}

// dir holds config.json, model.safetensors (HF names) and io.safetensors (inputs and HF's outputs).
void expect_matches_hf(const std::string& dir) {
  SCOPED_TRACE(dir);
  const auto cfg = model::RoFormerConfig::from_json_file(dir + "/config.json");
  const io::SafeTensors weights(dir + "/model.safetensors");
  const io::SafeTensors ref(dir + "/io.safetensors");
  const auto& ids_t = ref.at("input_ids");
  const int64_t B = ids_t.shape[0], T = ids_t.shape[1];
  const auto ids = ref.i64("input_ids"), types = ref.i64("token_type_ids"), mask = ref.i64("attention_mask");
  model::RoFormer<float> m(cfg);
  m.load(weights);
  m.set_keep(model::Keep::all);  // the attention maps too
  m.forward({.ids = ids.data(), .token_types = types.data(), .attention_mask = mask.data(), .B = B, .T = T});
  const int64_t N = B * T, L = cfg.num_hidden_layers;
  auto view = [](const float* p, int64_t n) { return std::vector<float>(p, p + n); };

  int64_t bad = first_mismatch(view(m.embedding_output(), N * cfg.embedding_size), ref.f32("embedding_output"));
  ASSERT_EQ(bad, -1) << "embedding_output drifts first, at element " << bad;
  const auto hidden = ref.f32("hidden_states");
  const auto attentions = ref.f32("attentions");
  const int64_t hidden_size = N * cfg.hidden_size, att_size = B * cfg.num_attention_heads * T * T;
  ASSERT_EQ(hidden.size(), static_cast<size_t>((L + 1) * hidden_size));
  for (int64_t l = 0; l <= L; ++l) {
    bad = first_mismatch(view(m.hidden_state(l), hidden_size), hidden, l * hidden_size);
    ASSERT_EQ(bad, -1) << "hidden_states[" << l << "] drifts first, at element " << bad;
    if (l < L) {
      bad = first_mismatch(view(m.attention(l), att_size), attentions, l * att_size);
      ASSERT_EQ(bad, -1) << "attentions[" << l << "] drifts first, at element " << bad;
    }
  }
  bad = first_mismatch(view(m.logits(), N * cfg.vocab_size), ref.f32("logits"));
  ASSERT_EQ(bad, -1) << "logits drift first, at element " << bad;
  const auto hf_logits = ref.f32("logits");
  double worst = 0, scale = 0;
  for (size_t i = 0; i < hf_logits.size(); ++i) {
    worst = std::max(worst, std::fabs(double(m.logits()[i]) - hf_logits[i]));
    scale = std::max(scale, std::fabs(double(hf_logits[i])));
  }
  std::printf("%s: logits max |ours - HF| = %.3g (max |HF| = %.3g)\n", dir.c_str(), worst, scale);
  if (ref.contains("pooler_output")) {  // RoFormer-Sim
    ASSERT_NE(m.pooler_output(), nullptr);
    bad = first_mismatch(view(m.pooler_output(), B * cfg.hidden_size), ref.f32("pooler_output"));
    ASSERT_EQ(bad, -1) << "pooler_output drifts, at element " << bad;
  }
}

class RoformerParity : public ::testing::TestWithParam<const char*> {};

TEST_P(RoformerParity, MatchesHuggingFaceLayerByLayer) {
  expect_matches_hf(std::string(ROFORMER_FIXTURES) + "/" + GetParam());
}

TEST(RoformerRoundTrip, CheckpointMatchesHuggingFace) {
  const char* dir = std::getenv("ROFORMER_ROUNDTRIP_DIR");
  if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "ROFORMER_ROUNDTRIP_DIR is not set (tests/hf/roundtrip.sh sets it)";
  for (const char* f : {"config.json", "model.safetensors", "io.safetensors"}) {
    ASSERT_TRUE(std::filesystem::exists(std::string(dir) + "/" + f)) << dir << " has no " << f;
  }
  expect_matches_hf(dir);
}

// RoFormer-V2 and RoFormer-Sim, which transformers does not implement: reference cases written by
// tools/gen_roformer_variants_ref.py from the published definitions (bert4keras, junnyu's roformer).
TEST(RoformerVariants, V2MatchesItsReference) { expect_matches_hf(std::string(ROFORMER_TEST_DATA) + "/roformer_v2"); }
TEST(RoformerVariants, SimMatchesItsReference) { expect_matches_hf(std::string(ROFORMER_TEST_DATA) + "/roformer_sim"); }

INSTANTIATE_TEST_SUITE_P(Fixtures, RoformerParity,
                         ::testing::Values("case1_mlm_basic", "case2_embproj_rotary_value",
                                           "case3_seq_eq_max_positions"));

}  // namespace
