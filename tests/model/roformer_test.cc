// The RoFormer training graph: whole-model gradients against central differences in float64 for
// every position encoding, masks, dropout, E ≠ H and rotary_value; fp32 against fp64; causality of
// the causal LM; initialisation; config.json round trip and errors; loading errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "grad_check.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/decoding.h"
#include "model/layer.h"
#include "model/roformer.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/packed_linear.h"
#include "serve_fixtures.h"

namespace {

model::RoFormerConfig tiny(model::PositionEncoding pe) {
  model::RoFormerConfig c;
  c.vocab_size = 11;
  c.embedding_size = 8;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 12;
  c.max_position_embeddings = 8;
  c.hidden_dropout_prob = 0;
  c.attention_probs_dropout_prob = 0;
  c.position_encoding = pe;
  return c;
}

struct Batch {
  std::vector<int64_t> ids, types, mask, targets;
  int64_t B, T;
  model::Inputs inputs() const {
    return {.ids = ids.data(), .token_types = types.data(), .attention_mask = mask.data(), .targets = targets.data(),
            .B = B, .T = T};
  }
};

Batch random_batch(const model::RoFormerConfig& c, int64_t B, int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b{{}, {}, {}, {}, B, T};
  for (int64_t i = 0; i < B * T; ++i) {
    b.ids.push_back(static_cast<int64_t>(rng() % c.vocab_size));
    b.types.push_back(static_cast<int64_t>(rng() % c.type_vocab_size));
    b.targets.push_back(rng() % 4 == 0 ? model::kIgnoreIndex : static_cast<int64_t>(rng() % c.vocab_size));
    b.mask.push_back(1);
  }
  b.mask[B * T - 1] = 0;  // the last sequence has a padding token
  b.mask[B * T - 2] = 0;
  b.ids[B * T - 1] = c.pad_token_id;
  return b;
}

// Parameters away from the tidy initialisation (LayerNorm weights ≠ 1, biases ≠ 0).
template <typename T>
void randomise(model::RoFormer<T>& m, uint64_t seed) {
  m.init_weights(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 0.4);
  for (auto& v : m.params) v += static_cast<T>(z(rng));
}

void expect_model_gradients(const model::RoFormerConfig& cfg, bool training) {
  model::RoFormer<double> m(cfg);
  randomise(m, 3);
  Batch batch = random_batch(cfg, 2, 5, 9);
  if (cfg.attention_type != model::AttentionType::softmax) batch.mask.assign(batch.mask.size(), 1);  // no padding in linear attention
  const uint64_t dropout_seed = 77;
  m.zero_grad();
  m.forward(batch.inputs(), training, dropout_seed);
  m.backward();
  const std::vector<double> analytic = m.grads;
  // Every tensor of the layout: its first, last and a few random elements.
  std::mt19937_64 rng(5);
  std::vector<int64_t> at;
  for (const auto& info : m.layout()) {
    std::vector<int64_t> picks = {0, info.size - 1};
    for (int i = 0; i < 3; ++i) picks.push_back(static_cast<int64_t>(rng() % info.size));
    for (int64_t j : picks) {
      // nn.Embedding(padding_idx) semantics: the lookup gives the padding row no gradient, so
      // that row differs from the true derivative on purpose.
      if (info.name == "roformer.embeddings.word_embeddings.weight" && j / cfg.embedding_size == cfg.pad_token_id) continue;
      at.push_back(info.offset + j);
    }
  }
  const int checked = testing_util::expect_gradient(
      "params", m.params, analytic, at, [&] { return m.forward(batch.inputs(), training, dropout_seed); },
      testing_util::kModelCheck);
  EXPECT_GT(checked, 50);
}

// RoFormerForSequenceClassification: the classifier.* head on [CLS] in place of the MLM head, with
// dropout on in the encoder and in the head; loss Σ head_logits · G for a fixed random G.
TEST(RoFormerModel, GradientsSequenceClassifierWithDropout) {
  model::RoFormerConfig cfg = tiny(model::PositionEncoding::rope);
  cfg.set_head("RoFormerForSequenceClassification");
  cfg.labels = {"neg", "neutral", "pos"};
  cfg.problem_type = model::ProblemType::single_label_classification;
  cfg.hidden_dropout_prob = 0.2;
  cfg.attention_probs_dropout_prob = 0.1;
  model::RoFormer<double> m(cfg);
  EXPECT_FALSE(m.has_mlm_head());
  for (const auto& info : m.layout()) EXPECT_NE(info.name.rfind("cls.", 0), 0u) << info.name;
  EXPECT_EQ(m.layout().back().name, "classifier.out_proj.bias");
  randomise(m, 4);
  const Batch batch = random_batch(cfg, 3, 5, 10);
  model::Inputs in = batch.inputs();
  in.targets = nullptr;
  std::mt19937_64 rng(8);
  std::normal_distribution<double> z;
  std::vector<double> G(3 * cfg.num_labels());
  for (double& x : G) x = z(rng);
  auto loss = [&] {
    m.forward(in, true, 91);
    double s = 0;
    for (size_t i = 0; i < G.size(); ++i) s += m.head_logits()[i] * G[i];
    return s;
  };
  loss();
  m.zero_grad();
  m.backward_from_head_logits(G.data());
  const std::vector<double> analytic = m.grads;
  std::vector<int64_t> at;
  for (const auto& info : m.layout()) {
    for (int64_t j : testing_util::picks(info.size, 3, info.offset)) {
      if (info.name == "roformer.embeddings.word_embeddings.weight" && j / cfg.embedding_size == cfg.pad_token_id) continue;
      at.push_back(info.offset + j);
    }
  }
  EXPECT_GT(testing_util::expect_gradient("params", m.params, analytic, at, loss, testing_util::kModelCheck), 50);
  // Inference: no dropout, and the head's logits are the classifier block's on the last [CLS] state.
  m.forward(in);
  EXPECT_EQ(m.logits(), nullptr);
  ASSERT_NE(m.head_logits(), nullptr);
  std::vector<double> direct(3 * cfg.num_labels());
  auto head = cfg.head->make_f64();
  head->bind(cfg, m.p.task, {});
  head->forward(direct.data(), {&cfg, m.hidden_state(cfg.num_hidden_layers), 3, 5, model::Dropout{}});
  for (size_t i = 0; i < direct.size(); ++i) EXPECT_EQ(m.head_logits()[i], direct[i]);
  // config.json round trip: id2label, label2id, problem_type, the architecture.
  const auto back = model::RoFormerConfig::from_json_text(cfg.to_json(), "config.json");
  EXPECT_EQ(back.labels, cfg.labels);
  EXPECT_EQ(back.problem_type, cfg.problem_type);
  EXPECT_NE(cfg.to_json().find("RoFormerForSequenceClassification"), std::string::npos);
  model::RoFormerConfig bad = cfg;
  bad.problem_type = model::ProblemType::regression;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

TEST(RoFormerModel, GradientsRope) { expect_model_gradients(tiny(model::PositionEncoding::rope), false); }

TEST(RoFormerModel, GradientsRopeHalfLayoutProjectionRotaryValueRelu) {
  auto c = tiny(model::PositionEncoding::rope);
  c.embedding_size = 6;
  c.rotary_value = true;
  c.rope_half_layout = true;
  c.hidden_act = model::Activation::relu;
  expect_model_gradients(c, false);
}

TEST(RoFormerModel, GradientsCausalSinusoidal) {
  auto c = tiny(model::PositionEncoding::sinusoidal);
  c.is_decoder = true;
  expect_model_gradients(c, false);
}

TEST(RoFormerModel, GradientsLearnedPositionsWithDropout) {
  auto c = tiny(model::PositionEncoding::learned);
  c.hidden_dropout_prob = 0.2;
  c.attention_probs_dropout_prob = 0.3;
  expect_model_gradients(c, true);
}

TEST(RoFormerModel, GradientsNoPositions) { expect_model_gradients(tiny(model::PositionEncoding::none), false); }

TEST(RoFormerModel, GradientsLinearAttentionWithRope) {
  for (bool causal : {false, true}) {
    auto c = tiny(model::PositionEncoding::rope);
    c.attention_type = model::AttentionType::linear;
    c.is_decoder = causal;
    expect_model_gradients(c, false);
  }
}

TEST(RoFormerModel, GradientsPerformerAttentionWithRope) {
  auto c = tiny(model::PositionEncoding::rope);
  c.attention_type = model::AttentionType::performer;
  c.performer_features = 6;
  c.is_decoder = true;
  c.rotary_value = true;
  expect_model_gradients(c, false);
}

TEST(RoFormerModel, GradientsRoFormerV2) {  // parameter-free RMS norms, no biases, relu, tied-only head
  auto c = tiny(model::PositionEncoding::rope);
  c.norm_type = model::NormType::rms_norm;
  c.use_bias = false;
  c.hidden_act = model::Activation::relu;
  expect_model_gradients(c, false);
  c.is_decoder = true;
  c.hidden_dropout_prob = 0.1;
  expect_model_gradients(c, true);
  const auto layout = model::param_layout(c);
  for (const auto& info : layout) {
    EXPECT_EQ(info.name.find("bias"), std::string::npos) << info.name;
    EXPECT_EQ(info.name.find("LayerNorm"), std::string::npos) << info.name;
  }
  auto projected = c;
  projected.embedding_size = 6;
  EXPECT_THROW(projected.validate(), std::invalid_argument);
}

TEST(RoFormerModel, Fp32AgreesWithFp64) {
  auto c = tiny(model::PositionEncoding::rope);
  c.is_decoder = true;
  model::RoFormer<double> m64(c);
  model::RoFormer<float> m32(c);
  randomise(m64, 4);
  for (size_t i = 0; i < m64.params.size(); ++i) m32.params[i] = static_cast<float>(m64.params[i]);
  const Batch batch = random_batch(c, 2, 7, 1);
  const double l64 = m64.forward(batch.inputs()), l32 = m32.forward(batch.inputs());
  EXPECT_NEAR(l32, l64, 1e-5 * std::fabs(l64));
  for (int64_t i = 0; i < 2 * 7 * c.vocab_size; ++i) EXPECT_NEAR(m32.logits()[i], m64.logits()[i], 2e-5);
  m32.zero_grad();
  m64.zero_grad();
  m32.backward();
  m64.backward();
  double num = 0, den = 0;
  for (size_t i = 0; i < m64.grads.size(); ++i) {
    num += std::pow(m32.grads[i] - m64.grads[i], 2);
    den += std::pow(m64.grads[i], 2);
  }
  EXPECT_LT(num / den, 1e-10);  // normalised MSE, as ggml's test-backend-ops
}

// Inference mode reuses one layer's buffers: the outputs must be bit-identical to a full forward, for
// odd and even depths (h ping-pong), every model variant, and shape changes between calls.
TEST(RoFormerModel, KeepOutputsMatchesTheFullForwardBitForBit) {
  auto rope = tiny(model::PositionEncoding::rope);
  auto three = rope;
  three.num_hidden_layers = 3;
  three.is_decoder = true;
  auto v2 = rope;
  v2.norm_type = model::NormType::rms_norm;
  v2.use_bias = false;
  v2.hidden_act = model::Activation::relu;
  auto linear = tiny(model::PositionEncoding::rope);
  linear.attention_type = model::AttentionType::linear;
  auto projected = tiny(model::PositionEncoding::learned);
  projected.hidden_size = 12;
  projected.num_attention_heads = 3;
  for (const auto& c : {rope, three, v2, linear, projected}) {
    SCOPED_TRACE(c.to_json());
    model::RoFormer<float> full(c), lean(c);
    randomise(full, 5);
    lean.params = full.params;
    lean.set_keep(model::Keep::outputs);
    for (const auto& [B, T] : {std::pair<int64_t, int64_t>{2, 7}, {1, 5}, {3, 8}}) {
      Batch batch = random_batch(c, B, T, 3);
      if (c.attention_type != model::AttentionType::softmax) batch.mask.assign(B * T, 1);
      const double l_full = full.forward(batch.inputs()), l_lean = lean.forward(batch.inputs());
      EXPECT_EQ(l_full, l_lean);
      const int64_t L = c.num_hidden_layers, N = B * T;
      for (int64_t i = 0; i < N * c.hidden_size; ++i) ASSERT_EQ(full.hidden_state(L)[i], lean.hidden_state(L)[i]) << i;
      for (int64_t i = 0; i < N * c.vocab_size; ++i) ASSERT_EQ(full.logits()[i], lean.logits()[i]) << i;
      for (int64_t i = 0; i < N * c.embedding_size; ++i) ASSERT_EQ(full.embedding_output()[i], lean.embedding_output()[i]);
    }
    EXPECT_THROW(lean.hidden_state(0), std::logic_error);
    EXPECT_THROW(lean.attention(0), std::logic_error);
    EXPECT_THROW(lean.hidden_state(c.num_hidden_layers + 1), std::out_of_range);
    EXPECT_THROW(lean.backward(), std::logic_error);
    lean.set_keep(model::Keep::backward);  // back to training: backward works again
    Batch batch = random_batch(c, 2, 7, 3);
    if (c.attention_type != model::AttentionType::softmax) batch.mask.assign(2 * 7, 1);  // linear attention takes no padding
    lean.forward(batch.inputs());
    lean.zero_grad();
    EXPECT_NO_THROW(lean.backward());
  }
}

// Long inputs: Keep::outputs runs the row-wise parts in passes of inference_rows() rows and writes
// attention's context over q. Any pass size gives one pass's results up to the products' rounding at
// another row count (and a pass may end inside a sequence, so the sinusoidal table is indexed by the
// whole row), for every block variant, packed (the q/k/v product in passes) or not, fp32 and bf16
// weights; embedding_output, which keeps only the last pass, refuses.
TEST(RoFormerModel, KeepOutputsInPassesOfRowsMatchesOnePass) {
  auto rope = tiny(model::PositionEncoding::rope);
  auto causal = rope;
  causal.is_decoder = true;
  auto v2 = rope;
  v2.norm_type = model::NormType::rms_norm, v2.use_bias = false, v2.hidden_act = model::Activation::relu;
  auto linear = rope;
  linear.attention_type = model::AttentionType::linear;
  auto sinusoidal = tiny(model::PositionEncoding::sinusoidal);
  auto projected = tiny(model::PositionEncoding::learned);
  projected.hidden_size = 12;
  projected.num_attention_heads = 3;
  std::vector<ops::Precision> precisions{ops::Precision::f32, ops::Precision::int8};
  if (ops::bf16_is_native()) precisions.push_back(ops::Precision::bf16);
  // Max |a − b| over the last hidden state and the logits.
  auto max_diff = [](const model::RoFormer<float>& a, const model::RoFormer<float>& b, int64_t N) {
    const auto& c = a.config();
    double err = 0;
    const float *ha = a.hidden_state(c.num_hidden_layers), *hb = b.hidden_state(c.num_hidden_layers);
    for (int64_t i = 0; i < N * c.hidden_size; ++i) err = std::max(err, std::abs(double(ha[i]) - hb[i]));
    for (int64_t i = 0; i < N * c.vocab_size; ++i) err = std::max(err, std::abs(double(a.logits()[i]) - b.logits()[i]));
    return err;
  };
  for (const auto& c : {rope, causal, v2, linear, sinusoidal, projected}) {
    const int64_t B = 3, T = 7, N = B * T;
    Batch batch = random_batch(c, B, T, 4);
    if (c.attention_type != model::AttentionType::softmax) batch.mask.assign(N, 1);
    model::RoFormer<float> fp32(c);  // unpacked, one pass: int8's reference
    randomise(fp32, 9);
    fp32.set_keep(model::Keep::outputs);
    fp32.set_inference_rows(0);
    fp32.forward(batch.inputs());
    EXPECT_NO_THROW(fp32.embedding_output());
    double scale = 1;
    for (int64_t i = 0; i < N * c.vocab_size; ++i) scale = std::max(scale, std::abs(double(fp32.logits()[i])));
    // Every packing for RoPE's encoder; unpacked and fp32 packed for the other variants.
    const int packings = c.to_json() == rope.to_json() ? static_cast<int>(precisions.size()) : 1;
    for (int packing = -1; packing < packings; ++packing) {  // -1: unpacked
      SCOPED_TRACE(c.to_json() + " packing " + std::to_string(packing));
      model::RoFormer<float> one(c), passes(c);
      one.params = passes.params = fp32.params;
      for (auto* m : {&one, &passes}) {
        m->set_keep(model::Keep::outputs);
        if (packing >= 0) m->pack(precisions[packing]);
      }
      one.set_inference_rows(0);
      one.forward(batch.inputs());
      const bool int8 = packing >= 0 && precisions[packing] == ops::Precision::int8;
      for (int64_t rows : {int64_t{1}, int64_t{4}, int64_t{5}, N - 1, N}) {
        passes.set_inference_rows(rows);
        passes.forward(batch.inputs());
        if (int8) {  // one activation scale per call: per pass, a finer one; no less accurate than one pass
          EXPECT_LE(max_diff(passes, fp32, N), 2 * max_diff(one, fp32, N) + 1e-3 * scale) << "rows " << rows;
        } else {
          EXPECT_LE(max_diff(passes, one, N), 1e-4 * scale) << "rows " << rows;
        }
        if (rows < N) {
          EXPECT_THROW(passes.embedding_output(), std::logic_error);
        }
      }
    }
  }
}

// Inputs::logit_rows: the MLM head on the chosen rows only, in their order (fill-mask's masks), each
// row's logits those of a forward over every row; rows outside the batch, none, or with targets are
// refused.
TEST(RoFormerModel, LogitRowsGiveThoseRowsLogits) {
  const auto c = tiny(model::PositionEncoding::rope);
  model::RoFormer<float> m(c);
  randomise(m, 3);
  m.set_keep(model::Keep::outputs);
  const int64_t B = 2, T = 6, V = c.vocab_size;
  Batch batch = random_batch(c, B, T, 5);
  m.forward(batch.inputs());
  const std::vector<float> all(m.logits(), m.logits() + B * T * V);
  const std::vector<int64_t> rows{7, 0, 11, 7};
  model::Inputs in = batch.inputs();
  in.targets = nullptr;
  in.logit_rows = rows.data(), in.logit_row_count = static_cast<int64_t>(rows.size());
  m.forward(in);
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t v = 0; v < V; ++v) EXPECT_NEAR(m.logits()[r * V + v], all[rows[r] * V + v], 1e-5) << r << " " << v;
  }
  const std::vector<int64_t> outside{12};
  in.logit_rows = outside.data(), in.logit_row_count = 1;
  EXPECT_THROW(m.forward(in), std::out_of_range);
  in.logit_row_count = 0;
  EXPECT_THROW(m.forward(in), std::invalid_argument);
  in.logit_rows = rows.data(), in.logit_row_count = 1;
  in.targets = batch.targets.data();
  EXPECT_THROW(m.forward(in), std::invalid_argument);
}

// Activation buffers only grow (model::grow_to): a model that has run a longer and a wider batch
// before gives, on a smaller one, the bits a fresh model gives: loss, hidden states, attention maps,
// logits and gradients, with dropout on, for the block variants (softmax and linear attention, a
// causal decoder, RoFormer-V2's norms, an embedding projection).
// The softmax block variants with dropout on: RoPE, a causal decoder, RoFormer-V2's norms, learned
// positions with an embedding projection; positions up to `positions`.
std::vector<model::RoFormerConfig> softmax_variants(int64_t positions) {
  auto rope = tiny(model::PositionEncoding::rope);
  rope.max_position_embeddings = positions;
  rope.hidden_dropout_prob = 0.2, rope.attention_probs_dropout_prob = 0.1;
  auto causal = rope;
  causal.is_decoder = true;
  auto v2 = rope;
  v2.norm_type = model::NormType::rms_norm, v2.use_bias = false, v2.hidden_act = model::Activation::relu;
  auto projected = rope;
  projected.position_encoding = model::PositionEncoding::learned;
  projected.hidden_size = 12, projected.num_attention_heads = 3;
  return {rope, causal, v2, projected};
}

TEST(RoFormerModel, ReusedBuffersGiveTheBitsOfFreshOnes) {
  auto variants = softmax_variants(8);
  auto linear = variants[0];
  linear.attention_type = model::AttentionType::linear;
  variants.push_back(linear);
  for (const auto& c : variants) {
    SCOPED_TRACE(c.to_json());
    model::RoFormer<float> used(c), fresh(c);
    randomise(used, 5);
    fresh.params = used.params;
    used.set_keep(model::Keep::all), fresh.set_keep(model::Keep::all);  // attention maps too
    Batch big = random_batch(c, 3, 8, 4), small = random_batch(c, 2, 5, 6);
    if (c.attention_type != model::AttentionType::softmax) big.mask.assign(3 * 8, 1), small.mask.assign(2 * 5, 1);
    used.forward(big.inputs(), true, 11);
    used.zero_grad();
    used.backward();
    const double l_used = used.forward(small.inputs(), true, 12), l_fresh = fresh.forward(small.inputs(), true, 12);
    EXPECT_EQ(l_used, l_fresh);
    const int64_t L = c.num_hidden_layers, N = 2 * 5;
    for (int64_t l = 0; l <= L; ++l) {
      for (int64_t i = 0; i < N * c.hidden_size; ++i) ASSERT_EQ(used.hidden_state(l)[i], fresh.hidden_state(l)[i]);
    }
    if (c.attention_type == model::AttentionType::softmax) {
      for (int64_t i = 0; i < 2 * c.num_attention_heads * 5 * 5; ++i) ASSERT_EQ(used.attention(0)[i], fresh.attention(0)[i]);
    }
    for (int64_t i = 0; i < N * c.vocab_size; ++i) ASSERT_EQ(used.logits()[i], fresh.logits()[i]);
    used.zero_grad(), fresh.zero_grad();
    used.backward(), fresh.backward();
    for (size_t i = 0; i < used.grads.size(); ++i) ASSERT_EQ(used.grads[i], fresh.grads[i]) << "gradient " << i;
  }
}

// Σ(x − ref)² / Σ ref².
double nmse(const std::vector<float>& x, const std::vector<float>& ref) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) err += std::pow(double(x[i]) - ref[i], 2), norm += std::pow(double(ref[i]), 2);
  return err / norm;
}

// Training keeps two statistics per attention row (Keep::backward, the default, past max_kept_keys)
// and recomputes the probabilities in the backward. In fp64 (the per-block path) loss, hidden states
// and every gradient equal those of the forward that keeps the (T, T) probabilities (Keep::all), bit
// for bit; in fp32 the fused kernels (flash_attention.h) run both passes, with their own order of
// sums: the same within fp32 rounding (NMSE ≤ 1e-10). With padding and attention dropout, for each
// softmax block variant.
template <typename T>
void expect_row_statistics_train_like_kept_probabilities(const model::RoFormerConfig& c) {
  model::RoFormer<T> stats(c), kept(c);
  randomise(stats, 9);
  kept.params = stats.params;
  EXPECT_EQ(stats.keep(), model::Keep::backward);  // what training gets unless it asks
  EXPECT_EQ(stats.max_kept_keys(), (4 * c.hidden_size + 2 * c.intermediate_size) / c.num_attention_heads);
  stats.set_max_kept_keys(0);  // row statistics at any length
  kept.set_keep(model::Keep::all);
  const Batch batch = random_batch(c, 3, 70, 8);  // past one 64-row block, with padding
  const T loss = stats.forward(batch.inputs(), true, 5), kept_loss = kept.forward(batch.inputs(), true, 5);
  const int64_t L = c.num_hidden_layers, N = 3 * 70;
  EXPECT_THROW(stats.attention(0), std::logic_error);  // no maps without Keep::all
  stats.zero_grad(), kept.zero_grad();
  stats.backward(), kept.backward();
  if constexpr (std::is_same_v<T, double>) {
    EXPECT_EQ(loss, kept_loss);
    for (int64_t l = 0; l <= L; ++l) {
      for (int64_t i = 0; i < N * c.hidden_size; ++i) ASSERT_EQ(stats.hidden_state(l)[i], kept.hidden_state(l)[i]);
    }
    for (size_t i = 0; i < stats.grads.size(); ++i) ASSERT_EQ(stats.grads[i], kept.grads[i]) << "gradient " << i;
  } else {
    EXPECT_NEAR(loss, kept_loss, 1e-5 * std::abs(kept_loss));
    const std::vector<float> h(stats.hidden_state(L), stats.hidden_state(L) + N * c.hidden_size);
    const std::vector<float> hk(kept.hidden_state(L), kept.hidden_state(L) + N * c.hidden_size);
    EXPECT_LE(nmse(h, hk), 1e-10);
    EXPECT_NE(stats.grads, kept.grads);  // the fused kernels ran
    EXPECT_LE(nmse(stats.grads, kept.grads), 1e-10);
  }
}

TEST(RoFormerModel, RowStatisticsTrainLikeKeptProbabilities) {
  for (const auto& c : softmax_variants(80)) {
    SCOPED_TRACE(c.to_json());
    EXPECT_GT(c.attention_probs_dropout_prob, 0);
    expect_row_statistics_train_like_kept_probabilities<double>(c);
    expect_row_statistics_train_like_kept_probabilities<float>(c);
  }
}


// Gradient checkpointing (Keep::inputs): the forward keeps each layer's input, the backward runs each
// layer's forward again before its backward. Loss, every hidden state, the logits and every gradient
// equal those of Keep::backward bit for bit, with dropout (the masks are drawn again from the same
// counters), padding, at a length whose probabilities are kept and one past max_kept_keys (row
// statistics), in fp64 and fp32, and in bf16 mixed precision where the CPU has it; also on a second
// step, whose backward must not read the shared activations the first one left.
template <typename T>
void expect_checkpointing_gives_kept_gradients(const model::RoFormerConfig& c, int64_t seq, bool bf16) {
  model::RoFormer<T> checkpointed(c), kept(c);
  randomise(checkpointed, 6);
  kept.params = checkpointed.params;
  checkpointed.set_gradient_checkpointing(true);
  EXPECT_EQ(checkpointed.keep(), model::Keep::inputs);
  if (bf16) checkpointed.set_precision(ops::Precision::bf16), kept.set_precision(ops::Precision::bf16);
  const int64_t L = c.num_hidden_layers, N = 3 * seq;
  for (uint64_t step = 0; step < 2; ++step) {  // each step other tokens
    Batch batch = random_batch(c, 3, seq, 8 + step);
    if (c.attention_type != model::AttentionType::softmax) batch.mask.assign(batch.mask.size(), 1);
    const T loss = checkpointed.forward(batch.inputs(), true, 5 + step);
    const T kept_loss = kept.forward(batch.inputs(), true, 5 + step);
    EXPECT_EQ(loss, kept_loss);
    for (int64_t i = 0; i < N * c.vocab_size; ++i) ASSERT_EQ(checkpointed.logits()[i], kept.logits()[i]);
    checkpointed.zero_grad(), kept.zero_grad();
    checkpointed.backward(), kept.backward();
    for (size_t i = 0; i < kept.grads.size(); ++i) ASSERT_EQ(checkpointed.grads[i], kept.grads[i]) << "gradient " << i;
    // After the backward: every hidden state as the forward wrote it (the recomputation writes elsewhere).
    for (int64_t l = 0; l <= L; ++l) {
      for (int64_t i = 0; i < N * c.hidden_size; ++i) {
        ASSERT_EQ(checkpointed.hidden_state(l)[i], kept.hidden_state(l)[i]) << "layer " << l;
      }
    }
  }
}

TEST(RoFormerModel, GradientCheckpointingGivesTheGradientsOfKeptActivations) {
  auto variants = softmax_variants(80);
  auto linear = variants[0];
  linear.attention_type = model::AttentionType::linear;
  variants.push_back(linear);
  auto deep = variants[0];
  deep.num_hidden_layers = 4;
  variants.push_back(deep);
  for (const auto& c : variants) {
    for (const int64_t seq : {5, 70}) {  // probabilities kept; row statistics past max_kept_keys (32 here)
      SCOPED_TRACE(c.to_json() + " seq " + std::to_string(seq));
      expect_checkpointing_gives_kept_gradients<double>(c, seq, false);
      expect_checkpointing_gives_kept_gradients<float>(c, seq, false);
      if (ops::bf16_is_native()) expect_checkpointing_gives_kept_gradients<float>(c, seq, true);
    }
  }
}

// A task head's backward (backward_from_head_logits) through checkpointed layers, with the head's
// and the encoder's dropout: the gradients of Keep::backward, bit for bit.
TEST(RoFormerModel, GradientCheckpointingUnderATaskHead) {
  model::RoFormerConfig cfg = tiny(model::PositionEncoding::rope);
  cfg.set_head("RoFormerForSequenceClassification");
  cfg.labels = {"neg", "pos"};
  cfg.problem_type = model::ProblemType::single_label_classification;
  cfg.hidden_dropout_prob = 0.2, cfg.attention_probs_dropout_prob = 0.1;
  cfg.num_hidden_layers = 3;
  model::RoFormer<float> checkpointed(cfg), kept(cfg);
  randomise(checkpointed, 4);
  kept.params = checkpointed.params;
  checkpointed.set_gradient_checkpointing(true);
  const Batch batch = random_batch(cfg, 3, 6, 10);
  model::Inputs in = batch.inputs();
  in.targets = nullptr;
  const std::vector<float> G = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f};  // (3, 2) d(loss)/d(logits)
  checkpointed.forward(in, true, 91), kept.forward(in, true, 91);
  checkpointed.zero_grad(), kept.zero_grad();
  checkpointed.backward_from_head_logits(G.data()), kept.backward_from_head_logits(G.data());
  EXPECT_EQ(checkpointed.grads, kept.grads);
  checkpointed.set_gradient_checkpointing(false);
  EXPECT_EQ(checkpointed.keep(), model::Keep::backward);
}

// bf16 mixed-precision training: the training forward and its backward run every linear product in
// bf16 (losses and gradients close to fp32's, not equal to them), the same bits run after run, and the
// forwards without training evaluate the fp32 master weights exactly as an fp32 model does.
TEST(RoFormerModel, Bf16TrainingStaysCloseToFp32AndEvaluatesInFp32) {
  {
    model::RoFormer<double> d(tiny(model::PositionEncoding::rope));
    EXPECT_THROW(d.set_precision(ops::Precision::bf16), std::logic_error);
    model::RoFormer<float> f(tiny(model::PositionEncoding::rope));
    EXPECT_THROW(f.set_precision(ops::Precision::int8), std::invalid_argument);
    if (!ops::bf16_is_native()) {
      EXPECT_THROW(f.set_precision(ops::Precision::bf16), std::invalid_argument);
      return;
    }
  }
  auto classifier = tiny(model::PositionEncoding::rope);
  classifier.set_head("text-classification");
  classifier.labels = {"a", "b", "c"};
  classifier.problem_type = model::ProblemType::single_label_classification;
  classifier.hidden_dropout_prob = 0.1;
  auto configs = softmax_variants(80);
  configs.push_back(classifier);
  for (const auto& c : configs) {
    SCOPED_TRACE(c.to_json());
    model::RoFormer<float> bf(c), again(c), fp(c);
    randomise(bf, 9);
    again.params = fp.params = bf.params;
    bf.set_precision(ops::Precision::bf16), again.set_precision(ops::Precision::bf16);
    EXPECT_EQ(bf.precision(), ops::Precision::bf16);
    EXPECT_EQ(fp.precision(), ops::Precision::f32);
    const Batch batch = random_batch(c, 3, 40, 8);
    const bool classify = c.sequence_classifier();
    model::Inputs in = batch.inputs();
    if (classify) in.targets = nullptr;
    const std::vector<float> d_class(3 * 3, 0.25f);
    ops::set_bf16_gradient_census(true);
    const ops::GradientUnderflow before = ops::bf16_gradient_underflow();
    auto train = [&](model::RoFormer<float>& m) {
      const double loss = m.forward(in, true, 5);
      m.zero_grad();
      classify ? m.backward_from_head_logits(d_class.data()) : m.backward();
      return classify ? double(m.head_logits()[0]) : loss;
    };
    const double l_bf = train(bf), l_fp = train(fp);
    EXPECT_NE(l_bf, l_fp);  // it did run in bf16
    EXPECT_NEAR(l_bf, l_fp, 0.02 * std::abs(l_fp));
    const double e = nmse(bf.grads, fp.grads);
    EXPECT_GT(e, 1e-12);
    EXPECT_LT(e, 3e-3);  // 1e-4 to 7e-4 measured on these tiny, large-weighted models
    EXPECT_GT(ops::bf16_gradient_underflow().values, before.values);  // the backward rounded its gradients
    ops::set_bf16_gradient_census(false);
    EXPECT_EQ(train(again), l_bf);
    EXPECT_EQ(again.grads, bf.grads);
    // Evaluation: fp32 on the master weights, bit for bit an fp32 model's.
    EXPECT_EQ(bf.forward(in, false), fp.forward(in, false));
    const int64_t N = 3 * 40 * c.hidden_size;
    const int64_t L = c.num_hidden_layers;
    EXPECT_TRUE(std::equal(bf.hidden_state(L), bf.hidden_state(L) + N, fp.hidden_state(L)));
  }
}

// bf16 training hands each block's input over in bf16 from the block that wrote it (the embeddings and
// each sub-layer's norm write it in their own pass, blocks.h's Bf16Handoff): the bits of rounding it
// where it is read, which the blocks do when nothing is handed over (as before the hand-off). The
// reference is that step composed here from the blocks without hand-offs, on the model's bf16 weights:
// hidden states, logits, loss and every gradient equal, bit for bit. The same blocks with the hand-offs
// the model makes keep, for every block, its fp32 input rounded by round_to_bf16.
TEST(RoFormerModel, Bf16InputsWrittenByTheirProducersEqualRoundingWhereRead) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  for (const auto& c : softmax_variants(80)) {  // dropout on; RMS norms; E ≠ H (a projection)
    SCOPED_TRACE(c.to_json());
    model::RoFormer<float> m(c), ref(c);
    randomise(m, 9);
    ref.params = m.params;
    m.set_precision(ops::Precision::bf16);
    m.set_keep(model::Keep::all);  // the probabilities kept, as below
    const int64_t B = 3, S = 40, N = B * S, H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;
    const Batch batch = random_batch(c, B, S, 8);
    const uint64_t seed = 5;
    const double loss = m.forward(batch.inputs(), true, seed);  // binds m.p's bf16 weight copies (w16)
    m.zero_grad();
    m.backward();
    // The reference step: every bf16 input rounded by the block that reads it.
    const model::Dropout d = model::Dropout::training(c, seed, 0, S);
    model::AttentionCall call;
    call.key_mask = batch.mask.data(), call.dropout = d, call.bf16_products = true;
    const model::LayerStatics<float> statics(c);
    model::EmbeddingActs<float> emb;
    std::vector<model::LayerActs<float>> acts(L);
    std::vector<std::vector<float>> h(L + 1, std::vector<float>(N * H));
    model::embeddings_forward(c, h[0].data(), emb, m.p.emb, batch.ids.data(), batch.types.data(), B, S, 0, d);
    for (int64_t l = 0; l < L; ++l) {
      model::layer_forward(h[l + 1].data(), acts[l], m.p.layers[l], statics.self_context(l, call),
                           statics.cross_context(l, call), h[l].data(), B, S, 0);
    }
    for (int64_t l = 0; l <= L; ++l) {
      ASSERT_TRUE(std::equal(h[l].begin(), h[l].end(), m.hidden_state(l))) << "hidden state " << l;
    }
    model::MlmHeadActs<float> head;
    std::vector<float> logits(N * V), probs(N * V), d_logits(N * V, 0.0f);
    model::mlm_head_forward(c, logits.data(), head, m.p.head, h[L].data(), N);
    ASSERT_TRUE(std::equal(logits.begin(), logits.end(), m.logits()));
    int64_t counted = 0;
    EXPECT_EQ(ops::cross_entropy_forward(probs.data(), logits.data(), batch.targets.data(), N, V, model::kIgnoreIndex,
                                         &counted),
              loss);
    ops::cross_entropy_backward(d_logits.data(), probs.data(), batch.targets.data(), N, V, model::kIgnoreIndex, counted,
                                1.0);
    ref.zero_grad();
    model::Scratch<float> scratch;
    std::vector<float> d_out(N * H), d_in(N * H), d_mid(N * H);
    model::mlm_head_backward(c, d_out.data(), ref.g.head, d_logits.data(), head, m.p.head, h[L].data(), N, scratch);
    for (int64_t l = L - 1; l >= 0; --l) {
      model::layer_backward(d_in.data(), d_mid.data(), static_cast<float*>(nullptr), ref.g.layers[l], d_out.data(),
                            acts[l], m.p.layers[l], statics.self_context(l, call), statics.cross_context(l, call),
                            h[l].data(), model::CrossMemory<float>{}, B, S, scratch);
      std::swap(d_out, d_in);
    }
    model::embeddings_backward(c, ref.g.emb, d_out.data(), emb, m.p.emb, d, scratch);
    for (size_t i = 0; i < m.grads.size(); ++i) ASSERT_EQ(m.grads[i], ref.grads[i]) << "gradient " << i;
    // The hand-offs as the model makes them: each layer's x16 written by the block before it.
    auto rounded = [](const float* x, int64_t n) {
      std::vector<uint16_t> r(n);
      ops::round_to_bf16(r.data(), x, n);
      return r;
    };
    std::vector<model::LayerActs<float>> handed(L);
    auto input16 = [&](int64_t l) {
      return l < L ? model::bf16_input_buffer(handed[l].attn.x16, m.p.layers[l].attn.input_dense(), N * H) : nullptr;
    };
    std::vector<float> x(N * H), y(N * H);
    model::KVCache<float>* const no_cache = nullptr;
    model::embeddings_forward(c, x.data(), emb, m.p.emb, batch.ids.data(), batch.types.data(), B, S, 0, d, input16(0));
    for (int64_t l = 0; l < L; ++l) {
      ASSERT_NE(input16(l), nullptr);
      model::layer_forward(y.data(), handed[l], m.p.layers[l], statics.self_context(l, call),
                           statics.cross_context(l, call), x.data(), B, S, 0, no_cache, {},
                           model::Bf16Handoff{input16(l + 1), true});
      EXPECT_EQ(y, h[l + 1]) << "layer " << l;
      EXPECT_EQ(handed[l].attn.x16, rounded(x.data(), N * H)) << "layer " << l << "'s attention";
      EXPECT_EQ(handed[l].ffn.x16, rounded(handed[l].mid.data(), N * H)) << "layer " << l << "'s feed-forward";
      std::swap(x, y);
    }
  }
}

// A model packed in bf16 for inference hands each block's input on in bf16 as the block before it
// writes it (Bf16Handoff, and the feed-forward's activation leaves its input dense in bf16,
// PackedLinear's bf16 output): the hidden states and logits are the bits of the same blocks composed
// with nothing handed on between them, each layer's input then rounded where it is read.
TEST(RoFormerModel, PackedBf16InputsWrittenByTheirProducersEqualRoundingWhereRead) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  for (auto c : softmax_variants(40)) {  // RMS norms and ReLU; E ≠ H (a packed projection)
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
    SCOPED_TRACE(c.to_json());
    model::RoFormer<float> m(c);
    randomise(m, 9);
    m.set_keep(model::Keep::outputs);
    m.set_inference_rows(0);
    m.pack(ops::Precision::bf16);
    const int64_t B = 3, S = 40, N = B * S, H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;
    const Batch batch = random_batch(c, B, S, 8);
    m.forward(batch.inputs());
    model::AttentionCall call;
    call.key_mask = batch.mask.data(), call.saved = ops::AttentionSaved::none, call.bf16_products = true;
    const model::LayerStatics<float> statics(c);
    model::EmbeddingActs<float> emb;
    model::LayerActs<float> acts;
    std::vector<float> x(N * H), y(N * H);
    model::embeddings_forward(c, x.data(), emb, m.p.emb, batch.ids.data(), batch.types.data(), B, S, 0, {});
    for (int64_t l = 0; l < L; ++l) {
      model::layer_forward(y.data(), acts, m.p.layers[l], statics.self_context(l, call),
                           statics.cross_context(l, call), x.data(), B, S, 0);
      std::swap(x, y);
    }
    ASSERT_TRUE(std::equal(x.begin(), x.end(), m.hidden_state(L)));
    model::MlmHeadActs<float> head;
    std::vector<float> logits(N * V);
    model::mlm_head_forward(c, logits.data(), head, m.p.head, x.data(), N);
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(), m.logits()));
  }
}

TEST(RoFormerModel, CausalLmNeverLooksAhead) {
  for (auto pe : {model::PositionEncoding::rope, model::PositionEncoding::learned}) {
    auto c = tiny(pe);
    c.is_decoder = true;
    model::RoFormer<float> m(c);
    m.init_weights(1);
    Batch batch = random_batch(c, 1, 6, 2);
    batch.mask.assign(6, 1);
    m.forward(batch.inputs());
    const std::vector<float> before(m.logits(), m.logits() + 6 * c.vocab_size);
    batch.ids[4] = (batch.ids[4] + 1) % c.vocab_size;
    m.forward(batch.inputs());
    for (int64_t i = 0; i < 4 * c.vocab_size; ++i) ASSERT_EQ(m.logits()[i], before[i]) << "logit " << i;
    bool changed = false;
    for (int64_t i = 4 * c.vocab_size; i < 6 * c.vocab_size; ++i) changed |= m.logits()[i] != before[i];
    EXPECT_TRUE(changed);
  }
}

TEST(RoFormerModel, InitialisationIsSeededAndFollowsHuggingFace) {
  auto c = tiny(model::PositionEncoding::learned);
  c.vocab_size = 300;
  c.embedding_size = 32;
  model::RoFormer<float> a(c), b(c);
  a.init_weights(42);
  b.init_weights(42);
  EXPECT_EQ(a.params, b.params);
  b.init_weights(43);
  EXPECT_NE(a.params, b.params);
  for (int64_t j = 0; j < c.embedding_size; ++j) EXPECT_EQ(a.p.emb.word[j], 0.0f);  // padding row
  double sum = 0, sq = 0;
  const int64_t n = (c.vocab_size - 1) * c.embedding_size;
  for (int64_t i = 0; i < n; ++i) {
    sum += a.p.emb.word[c.embedding_size + i];
    sq += std::pow(a.p.emb.word[c.embedding_size + i], 2);
  }
  EXPECT_NEAR(sum / n, 0.0, 0.002);
  EXPECT_NEAR(std::sqrt(sq / n), c.initializer_range, 0.002);
  EXPECT_EQ(a.p.emb.norm.w[0], 1.0f);
  EXPECT_EQ(a.p.layers[0].attn.q.b[0], 0.0f);
}

TEST(RoFormerModel, ConfigJsonRoundTripsAndRejectsUnknownFields) {
  auto c = tiny(model::PositionEncoding::sinusoidal);
  c.is_decoder = true;
  c.rope_theta = 5000;
  c.embedding_size = 6;
  const auto r = model::RoFormerConfig::from_json_text(c.to_json(), "mem");
  EXPECT_EQ(r.to_json(), c.to_json());
  EXPECT_EQ(r.position_encoding, model::PositionEncoding::sinusoidal);
  EXPECT_TRUE(r.is_decoder);
  EXPECT_THROW(model::RoFormerConfig::from_json_text(R"({"hidden_sise": 8})", "mem"), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_text(R"({"position_encoding": "alibi"})", "mem"), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_text(R"({"model_type": "bert"})", "mem"), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_text(R"({"hidden_dropout_prob": 1.5})", "mem"), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_text(R"([1, 2])", "mem"), io::Error);
  // Sizes far beyond any model are refused by name, before anything is allocated.
  EXPECT_THROW(model::RoFormerConfig::from_json_text(R"({"vocab_size": 4000000000})", "mem"), io::Error);
  EXPECT_THROW(model::RoFormerConfig::from_json_text(R"({"num_hidden_layers": 100000})", "mem"), io::Error);
  auto many = c;
  many.hidden_size = 32768;
  many.intermediate_size = 131072;
  many.num_hidden_layers = 1000;  // each within its bound, 8e12 parameters together
  EXPECT_THROW(many.validate(), std::invalid_argument);
  try {
    model::RoFormerConfig::from_json_text(R"({"frobnicate": 1})", "cfg.json");
    FAIL();
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown config field 'frobnicate'"), std::string::npos) << e.what();
  }
}

TEST(RoFormerModel, BadInputsAreErrors) {
  auto c = tiny(model::PositionEncoding::rope);
  model::RoFormer<float> m(c);
  m.init_weights(1);
  Batch batch = random_batch(c, 1, 4, 3);
  batch.ids[2] = c.vocab_size;  // out of range
  EXPECT_THROW(m.forward(batch.inputs()), std::out_of_range);
  batch = random_batch(c, 1, 9, 3);  // longer than max_position_embeddings: fine for RoPE
  EXPECT_NO_THROW(m.forward(batch.inputs()));
  model::RoFormer<float> learned(tiny(model::PositionEncoding::learned));
  EXPECT_THROW(learned.forward(batch.inputs()), std::invalid_argument);  // no learned position 8
  auto odd = c;
  odd.hidden_size = 6;  // heads of 3: odd
  EXPECT_THROW(model::RoFormer<float>{odd}, std::invalid_argument);
}

TEST(RoFormerModel, LoadRejectsMissingAndUnexpectedTensors) {
  const std::string dir = std::string(ROFORMER_FIXTURES) + "/case1_mlm_basic";
  const io::SafeTensors weights(dir + "/model.safetensors");
  auto cfg = model::RoFormerConfig::from_json_file(dir + "/config.json");
  model::RoFormer<float> ok(cfg);
  ok.load(weights);
  auto learned = cfg;
  learned.position_encoding = model::PositionEncoding::learned;  // needs position_embeddings
  model::RoFormer<float> missing(learned);
  EXPECT_THROW(missing.load(weights), io::Error);
  auto fewer = cfg;
  fewer.num_hidden_layers = 1;  // layer 1's tensors are unexpected
  model::RoFormer<float> extra(fewer);
  EXPECT_THROW(extra.load(weights), io::Error);
}

// check_config_against_weights, before anything is allocated, names the field behind every
// mismatch: the layer count, a size a tensor's shape records (the rotary table's for
// max_position_embeddings and num_attention_heads, the classifier's for num_labels), and a tensor the
// config implies that the checkpoint lacks.
TEST(RoFormerModel, ConfigIsCheckedAgainstTheCheckpointByField) {
  const std::string dir = std::string(ROFORMER_FIXTURES) + "/case1_mlm_basic";
  const io::SafeTensors weights(dir + "/model.safetensors");
  const auto cfg = model::RoFormerConfig::from_json_file(dir + "/config.json");
  EXPECT_NO_THROW(model::check_config_against_weights(cfg, weights, "cfg.json"));
  auto expect_named = [&](model::RoFormerConfig c, const std::string& what) {
    try {
      model::check_config_against_weights(c, weights, "cfg.json");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const io::Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("cfg.json: ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  auto c = cfg;
  c.num_hidden_layers = 3;  // layer 2 is not stored: refused before a 3-layer arena exists
  expect_named(c, "num_hidden_layers 3 does not match the checkpoint");
  c.num_hidden_layers = 1;
  expect_named(c, "num_hidden_layers 1 does not match the checkpoint");
  c = cfg;
  c.max_position_embeddings = 1 << 24;
  expect_named(c, "max_position_embeddings 16777216 does not match the checkpoint");
  c = cfg;
  c.num_attention_heads = 8;
  expect_named(c, "num_attention_heads 8 does not match the checkpoint");
  c = cfg;
  c.hidden_size = 128;  // not embeddings_project, which hidden_size != embedding_size would imply
  expect_named(c, "hidden_size 128 does not match the checkpoint");
  c = cfg;
  c.position_encoding = model::PositionEncoding::learned;
  expect_named(c, "has no roformer.embeddings.position_embeddings.weight, which the config implies (check position_encoding)");
  c = cfg;
  c.set_head("text-classification");
  c.labels = {"a", "b", "c"};
  c.problem_type = model::ProblemType::single_label_classification;
  const std::string head = serve_fixtures::classifier_dir("head2", 2, nlohmann::json::object());
  try {
    model::check_config_against_weights(c, io::SafeTensors(head + "/model.safetensors"), "cfg.json");
    ADD_FAILURE() << "three labels accepted against two classifier rows";
  } catch (const io::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: num_labels 3 does not match the checkpoint"), std::string::npos)
        << e.what();
  }
}

}  // namespace

namespace {

// The KV-cache decoder gives the full forward's logits, fed all at once or one token at a time.
TEST(RoFormerGenerate, CachedDecodingMatchesTheFullForward) {
  for (auto pe : {model::PositionEncoding::rope, model::PositionEncoding::sinusoidal, model::PositionEncoding::learned,
                  model::PositionEncoding::none}) {
    auto c = tiny(pe);
    c.is_decoder = true;
    c.rotary_value = pe == model::PositionEncoding::rope;
    c.embedding_size = 6;
    if (pe == model::PositionEncoding::none) {  // RoFormer-V2 layout
      c.embedding_size = 8;
      c.norm_type = model::NormType::rms_norm;
      c.use_bias = false;
    }
    model::RoFormer<float> m(c);
    randomise(m, 8);
    const Batch batch = random_batch(c, 1, 7, 4);
    m.forward({.ids = batch.ids.data(), .B = 1, .T = 7});
    model::Generator all(m), one(m);
    const auto last = all.feed(batch.ids);
    for (int64_t v = 0; v < c.vocab_size; ++v) EXPECT_NEAR(last[v], m.logits()[6 * c.vocab_size + v], 2e-5);
    for (int64_t t = 0; t < 7; ++t) {
      const auto& logits = one.feed({batch.ids[t]});
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        ASSERT_NEAR(logits[v], m.logits()[t * c.vocab_size + v], 2e-5) << model::position_encoding_name(pe) << " t=" << t;
      }
    }
    one.feed({1});  // position 7: the last of max_position_embeddings = 8
    EXPECT_THROW(one.feed({1}), std::length_error);
  }
}

TEST(RoFormerGenerate, LinearAttentionRecurrentDecodingMatchesTheFullForward) {
  for (const auto type : {model::AttentionType::linear, model::AttentionType::performer}) {
    auto c = tiny(model::PositionEncoding::rope);
    c.is_decoder = true;
    c.attention_type = type;
    c.performer_features = 8;
    model::RoFormer<float> m(c);
    randomise(m, 10);
    m.set_keep(model::Keep::all);
    const Batch batch = random_batch(c, 1, 8, 5);
    m.forward({.ids = batch.ids.data(), .B = 1, .T = 8});
    EXPECT_EQ(m.attention(0), nullptr);  // no (T, T) probabilities in linear attention
    model::Generator one(m), all(m);
    const auto last = all.feed(std::vector<int64_t>(batch.ids.begin(), batch.ids.end()));
    for (int64_t v = 0; v < c.vocab_size; ++v) EXPECT_NEAR(last[v], m.logits()[7 * c.vocab_size + v], 3e-5) << model::attention_type_name(type);
    for (int64_t t = 0; t < 8; ++t) {
      const auto& logits = one.feed({batch.ids[t]});
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        ASSERT_NEAR(logits[v], m.logits()[t * c.vocab_size + v], 3e-5) << model::attention_type_name(type) << " t=" << t;
      }
    }
    Batch padded = random_batch(c, 1, 4, 1);  // the last token is padding
    EXPECT_THROW(m.forward(padded.inputs()), std::invalid_argument);
  }
  EXPECT_THROW(model::parse_attention_type("cosformer"), std::invalid_argument);
}

TEST(RoFormerGenerate, SamplingHonoursTemperatureTopKAndBans) {
  const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 2.5f};
  model::DecodeOptions greedy;
  greedy.temperature = 0;
  EXPECT_EQ(model::sample_token(logits, greedy, 0.9), 1);
  model::DecodeOptions top2;
  top2.top_k = 2;
  for (double u = 0; u < 1; u += 0.01) {
    const int64_t t = model::sample_token(logits, top2, u);
    EXPECT_TRUE(t == 1 || t == 3);
  }
  model::DecodeOptions banned = greedy;
  banned.banned = {1};
  EXPECT_EQ(model::sample_token(logits, banned, 0.5), 3);
  model::DecodeOptions bad;
  bad.temperature = -1;
  EXPECT_THROW(model::sample_token(logits, bad, 0.5), std::invalid_argument);
  auto c = tiny(model::PositionEncoding::rope);
  model::RoFormer<float> mlm(c);
  EXPECT_THROW(model::Generator{mlm}, std::invalid_argument);
  c.is_decoder = true;
  model::RoFormer<float> clm(c);
  clm.init_weights(1);
  model::DecodeOptions opt;
  opt.beam_size = 1, opt.sample = true;
  opt.seed = 3;
  opt.max_len_b = 20;
  const auto a = model::generate(clm, {5, 6}, opt)[0].tokens, b = model::generate(clm, {5, 6}, opt)[0].tokens;
  EXPECT_EQ(a, b);                // seeded
  EXPECT_EQ(a.size(), 6u);        // stops when the 8-position context is full
}

}  // namespace

namespace {

// Beyond the trained length: every RoPE scaling method, incremental decoding with position offsets
// past max_position_embeddings equals recomputing the whole sequence.
TEST(RoFormerGenerate, CachedDecodingBeyondTheTrainedLengthUnderEveryScaling) {
  for (const char* spec : {"none", "linear:2.5", "ntk:2.5", "dynamic-ntk:2.5:8", "yarn:2.5:8", "llama3:2.5:8"}) {
    auto c = tiny(model::PositionEncoding::rope);
    c.is_decoder = true;
    c.rope_scaling = spec;
    model::RoFormer<float> m(c);
    randomise(m, 9);
    const int64_t S = 20;  // max_position_embeddings is 8
    const Batch batch = random_batch(c, 1, S, 6);
    m.forward({.ids = batch.ids.data(), .B = 1, .T = S});
    model::Generator g(m, S);
    for (int64_t t = 0; t < S; ++t) {
      const auto& logits = g.feed({batch.ids[t]});
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        ASSERT_NEAR(logits[v], m.logits()[t * c.vocab_size + v], 3e-5) << spec << " position " << t;
      }
    }
  }
  auto c = tiny(model::PositionEncoding::rope);
  c.rope_scaling = "yarn:4";  // needs the original length
  EXPECT_THROW(model::RoFormer<float>{c}, std::invalid_argument);
  // The scaled length is a token count: factor x max_position_embeddings, and the original context,
  // stay within 2^24 positions (linear:1e300 read as a length of -2^63).
  for (const char* spec : {"linear:1e300", "linear:3000000", "yarn:4:99999999999999"}) {
    c.rope_scaling = spec;
    EXPECT_THROW(c.validate(), std::invalid_argument) << spec;
  }
  c.rope_scaling = "linear:2097152";  // 8 x 2^21 = 2^24: the largest
  EXPECT_NO_THROW(c.validate());
}

}  // namespace

namespace {

// A RoFormerModel checkpoint (no "roformer." prefix, no MLM head, plus a classifier the caller
// loads itself) gives the same hidden states as the masked LM it came from.
TEST(RoFormerModel, LoadsEncoderOnlyCheckpoints) {
  const std::string dir = std::string(ROFORMER_FIXTURES) + "/case2_embproj_rotary_value";
  const auto cfg = model::RoFormerConfig::from_json_file(dir + "/config.json");
  const io::SafeTensors full(dir + "/model.safetensors");
  std::vector<io::TensorView> views;
  std::vector<std::vector<float>> keep;
  for (const auto& [name, t] : full.tensors()) {
    if (name.rfind("cls.", 0) == 0) continue;
    keep.push_back(full.f32(name));
    views.push_back({name.rfind("roformer.", 0) == 0 ? name.substr(9) : name, io::DType::F32, t.shape, keep.back().data()});
  }
  const std::vector<float> classifier(4 * cfg.hidden_size, 0.5f);
  views.push_back({"classifier.dense.weight", io::DType::F32, {4, cfg.hidden_size}, classifier.data()});
  const std::string path = ::testing::TempDir() + "encoder_only.safetensors";
  io::write_file_atomic(path, io::safetensors_bytes(views));
  const io::SafeTensors encoder(path);
  model::RoFormer<float> mlm(cfg), bare(cfg);
  mlm.load(full);
  EXPECT_THROW(bare.load(encoder), io::Error);  // classifier.dense.weight is unexpected
  bare.load(encoder, {"classifier."});
  EXPECT_TRUE(mlm.has_mlm_head());
  EXPECT_FALSE(bare.has_mlm_head());
  const std::vector<int64_t> ids = {5, 9, 2, 7, 1, 0};
  mlm.forward({.ids = ids.data(), .B = 1, .T = 6});
  bare.forward({.ids = ids.data(), .B = 1, .T = 6});
  EXPECT_EQ(bare.logits(), nullptr);
  const int64_t n = 6 * cfg.hidden_size, L = cfg.num_hidden_layers;
  EXPECT_TRUE(std::equal(mlm.hidden_state(L), mlm.hidden_state(L) + n, bare.hidden_state(L)));
  const std::vector<int64_t> targets(6, 1);
  EXPECT_THROW(bare.forward({.ids = ids.data(), .targets = targets.data(), .B = 1, .T = 6}), std::invalid_argument);
  // Loading the same model again with its MLM head resizes the buffers for the logits.
  bare.load(full);
  EXPECT_TRUE(bare.has_mlm_head());
  bare.forward({.ids = ids.data(), .B = 1, .T = 6});
  EXPECT_TRUE(std::equal(mlm.logits(), mlm.logits() + 6 * cfg.vocab_size, bare.logits()));
}

// load(..., mlm_head = false) leaves the head out for every variant, RoFormer-V2's tied-only head too:
// no logits, the same last hidden state.
TEST(RoFormerModel, LoadWithoutTheMlmHead) {
  for (const std::string& dir : {std::string(ROFORMER_FIXTURES) + "/case1_mlm_basic", std::string(ROFORMER_TEST_DATA) + "/roformer_v2"}) {
    SCOPED_TRACE(dir);
    const auto cfg = model::RoFormerConfig::from_json_file(dir + "/config.json");
    const io::SafeTensors weights(dir + "/model.safetensors");
    model::RoFormer<float> with(cfg), without(cfg);
    with.load(weights);
    without.load(weights, {}, /*mlm_head=*/false);
    EXPECT_TRUE(with.has_mlm_head());
    EXPECT_FALSE(without.has_mlm_head());
    const std::vector<int64_t> ids = {5, 9, 2, 7, 1, 0};
    with.forward({.ids = ids.data(), .B = 1, .T = 6});
    without.forward({.ids = ids.data(), .B = 1, .T = 6});
    EXPECT_EQ(without.logits(), nullptr);
    const int64_t L = cfg.num_hidden_layers;
    EXPECT_TRUE(std::equal(with.hidden_state(L), with.hidden_state(L) + 6 * cfg.hidden_size, without.hidden_state(L)));
  }
}

}  // namespace

// ---- inference packing (RoFormer::pack, ops/packed_linear.h) ----

// The largest |a − b| relative to the largest |b|.
double relative_error(const float* a, const float* b, int64_t n) {
  double err = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(double(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return err / scale;
}

// cos(a, b) of two n-vectors.
double cosine(const float* a, const float* b, int64_t n) {
  double dot = 0, a2 = 0, b2 = 0;
  for (int64_t i = 0; i < n; ++i) dot += double(a[i]) * b[i], a2 += double(a[i]) * a[i], b2 += double(b[i]) * b[i];
  return dot / std::sqrt(a2 * b2);
}

// The reduced-precision tests' model: wide enough for 8-bit steps to average out.
model::RoFormerConfig wide_config(bool is_decoder) {
  auto c = tiny(model::PositionEncoding::rope);
  c.is_decoder = is_decoder;
  c.hidden_size = c.embedding_size = 64;
  c.num_attention_heads = 4;
  c.intermediate_size = 128;
  c.vocab_size = 50;
  c.max_position_embeddings = 32;
  return c;
}

// The precisions below fp32 this CPU runs: int8, and bf16 where it multiplies bf16 natively.
std::vector<ops::Precision> reduced_precisions() {
  std::vector<ops::Precision> precisions = {ops::Precision::int8};
  if (ops::bf16_is_native()) precisions.push_back(ops::Precision::bf16);
  return precisions;
}

std::vector<model::RoFormerConfig> packing_configs() {
  auto projected = tiny(model::PositionEncoding::rope);  // E ≠ H, GELU fused into the feed-forward
  projected.embedding_size = 6;
  projected.rotary_value = true;
  auto v2 = tiny(model::PositionEncoding::none);  // RoFormer-V2: RMS norms, no biases, ReLU, tied-only head
  v2.norm_type = model::NormType::rms_norm;
  v2.use_bias = false;
  v2.hidden_act = model::Activation::relu;
  auto causal = tiny(model::PositionEncoding::sinusoidal);
  causal.is_decoder = true;
  return {projected, v2, causal};
}

TEST(RoFormerModel, PackedF32ForwardMatchesTheArenaForward) {
  for (const auto& c : packing_configs()) {
    model::RoFormer<float> m(c);
    randomise(m, 21);
    const Batch batch = random_batch(c, 3, 6, 2);
    m.forward(batch.inputs());
    const std::vector<float> logits(m.logits(), m.logits() + 3 * 6 * c.vocab_size);
    const std::vector<float> hidden(m.hidden_state(2), m.hidden_state(2) + 3 * 6 * c.hidden_size);
    m.pack(ops::Precision::f32);
    ASSERT_TRUE(m.packed());
    EXPECT_GT(m.packed_bytes(), 0u);
    m.forward(batch.inputs());
    EXPECT_LE(relative_error(m.hidden_state(2), hidden.data(), hidden.size()), 1e-5) << model::norm_type_name(c.norm_type);
    EXPECT_LE(relative_error(m.logits(), logits.data(), logits.size()), 1e-5) << model::norm_type_name(c.norm_type);
  }
}

TEST(RoFormerGenerate, PackedCachedDecodingMatchesTheArenaForward) {
  auto c = tiny(model::PositionEncoding::rope);
  c.is_decoder = true;
  model::RoFormer<float> m(c);
  randomise(m, 8);
  const Batch batch = random_batch(c, 1, 7, 4);
  m.forward({.ids = batch.ids.data(), .B = 1, .T = 7});
  const std::vector<float> expected(m.logits(), m.logits() + 7 * c.vocab_size);
  m.pack(ops::Precision::f32);
  model::Generator one(m);
  for (int64_t t = 0; t < 7; ++t) {
    const auto& logits = one.feed({batch.ids[t]});
    EXPECT_LE(relative_error(logits.data(), expected.data() + t * c.vocab_size, c.vocab_size), 1e-5) << "t=" << t;
  }
}

// int8 and, where the CPU multiplies bf16 natively, bf16 linear layers: every token's last hidden state
// keeps cosine ≥ 0.99 to fp32 (the bound the inference docs promise), and it did run reduced.
TEST(RoFormerModel, ReducedPrecisionForwardStaysCloseToFp32) {
  const auto c = wide_config(false);
  model::RoFormer<float> m(c);
  m.init_weights(5);
  const Batch batch = random_batch(c, 2, 32, 3);
  m.forward(batch.inputs());
  const int64_t N = 2 * 32, H = c.hidden_size;
  const std::vector<float> fp32(m.hidden_state(2), m.hidden_state(2) + N * H);
  for (ops::Precision precision : reduced_precisions()) {
    m.pack(precision);
    EXPECT_EQ(m.packed_precision(), precision);
    m.forward(batch.inputs());
    const float* reduced = m.hidden_state(2);
    double worst = 1;
    for (int64_t n = 0; n < N; ++n) worst = std::min(worst, cosine(reduced + n * H, fp32.data() + n * H, H));  // each token
    EXPECT_GE(worst, 0.99) << ops::precision_name(precision);
    EXPECT_LT(worst, 1.0 - 1e-9) << ops::precision_name(precision);  // it did run reduced
  }
}

TEST(RoFormerModel, PackedModelHasNoBackwardAndReloadingUnpacks) {
  const auto c = tiny(model::PositionEncoding::rope);
  model::RoFormer<float> m(c);
  randomise(m, 4);
  const Batch batch = random_batch(c, 2, 5, 6);
  m.pack(ops::Precision::f32);
  m.forward(batch.inputs());
  EXPECT_THROW(m.backward(), std::logic_error);
  m.init_weights(4);
  EXPECT_FALSE(m.packed());
  m.forward(batch.inputs());
  EXPECT_NO_THROW(m.backward());
  model::RoFormer<double> d(c);
  EXPECT_THROW(d.pack(ops::Precision::f32), std::logic_error);
}

TEST(RoFormerModel, ReleasingTheArenaKeepsThePackedForwardAndForbidsRepacking) {
  auto c = tiny(model::PositionEncoding::rope);
  c.hidden_size = c.embedding_size = 128;  // weights of whole pages, so that some are released
  c.num_attention_heads = 4;
  c.intermediate_size = 256;
  model::RoFormer<float> m(c);
  randomise(m, 9);
  const Batch batch = random_batch(c, 2, 5, 1);
  m.pack(ops::Precision::f32);
  m.forward(batch.inputs());
  const std::vector<float> kept(m.logits(), m.logits() + 2 * 5 * c.vocab_size);
  m.pack(ops::Precision::f32, true);
  m.forward(batch.inputs());
  EXPECT_EQ(std::vector<float>(m.logits(), m.logits() + kept.size()), kept);
  EXPECT_EQ(m.p.layers[0].ffn.in.w[c.hidden_size * 64], 0.0f);  // the arena's copy is gone
  EXPECT_THROW(m.pack(ops::Precision::int8), std::logic_error);
  m.init_weights(9);
  EXPECT_NO_THROW(m.pack(ops::Precision::int8));
}

// int8 and, where the CPU multiplies bf16 natively, bf16 cached decoding (Generator over a packed
// model, one token at a time, as generate and translate run): at every step the next-token logits
// keep cosine ≥ 0.999 to fp32's and the largest difference stays within 5% of the largest logit (int8
// measured 0.9999 and 1.7% on AVX-512 VNNI), and the greedy choices agree with fp32's at 30 of the
// 32 steps or more (measured: all).
TEST(RoFormerGenerate, Int8AndBf16CachedDecodingStayCloseToFp32) {
  const auto c = wide_config(true);
  model::RoFormer<float> m(c);
  m.init_weights(5);
  const Batch batch = random_batch(c, 1, 32, 7);
  auto decode = [&] {  // the logits after each of the 32 tokens, fed one at a time
    model::Generator g(m);
    std::vector<std::vector<float>> steps;
    for (int64_t t = 0; t < 32; ++t) steps.push_back(g.feed({batch.ids[t]}));
    return steps;
  };
  const auto fp32 = decode();
  for (ops::Precision precision : reduced_precisions()) {
    m.pack(precision);
    const auto reduced = decode();
    int agree = 0;
    bool differs = false;
    for (size_t t = 0; t < fp32.size(); ++t) {
      const std::vector<float>&a = reduced[t], &b = fp32[t];
      EXPECT_GE(cosine(a.data(), b.data(), c.vocab_size), 0.999) << ops::precision_name(precision) << " t=" << t;
      EXPECT_LE(relative_error(a.data(), b.data(), c.vocab_size), 0.05) << ops::precision_name(precision) << " t=" << t;
      agree += std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin();
      differs |= a != b;
    }
    EXPECT_GE(agree, 30) << ops::precision_name(precision);
    EXPECT_TRUE(differs) << ops::precision_name(precision);  // it did run reduced
  }
}

// A Generator over a model packed in bf16 hands each layer its input in bf16 (as the forward does):
// a prompt's feed and a decoding step give the bits of the same blocks composed over the same caches
// with nothing handed on between layers.
TEST(RoFormerGenerate, PackedBf16DecodingEqualsRoundingWhereRead) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  auto c = wide_config(true);
  c.num_hidden_layers = 3;
  model::RoFormer<float> m(c);
  m.init_weights(6);
  m.pack(ops::Precision::bf16);
  const int64_t B = 2, capacity = 16, H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;
  model::Generator g(m, capacity, B);
  const model::LayerStatics<float> statics(c);
  std::vector<model::KVCache<float>> caches(L);
  for (auto& kv : caches) {
    kv.B = B, kv.capacity = capacity;
    kv.k.assign(B * capacity * H, 0.0f), kv.v.assign(B * capacity * H, 0.0f);
  }
  model::EmbeddingActs<float> emb;
  model::LayerActs<float> acts;
  model::MlmHeadActs<float> head;
  model::AttentionCall call;
  call.saved = ops::AttentionSaved::none;
  int64_t pos = 0;
  for (const std::vector<int64_t>& ids : {std::vector<int64_t>{3, 9, 14, 2, 7, 1, 40, 22, 5, 11}, {8, 30}}) {
    const int64_t n = static_cast<int64_t>(ids.size()) / B, N = B * n;
    std::vector<float> x(N * H), last(B * H), logits(B * V);
    model::embeddings_forward(c, x.data(), emb, m.p.emb, ids.data(), nullptr, B, n, pos, model::Dropout{});
    for (int64_t l = 0; l < L; ++l) {
      model::layer_forward(x.data(), acts, m.p.layers[l], statics.self_context(l, call), statics.cross_context(l, call),
                           x.data(), B, n, pos, &caches[l], model::CrossMemory<float>{});
    }
    for (int64_t b = 0; b < B; ++b) std::copy_n(x.data() + ((b + 1) * n - 1) * H, H, last.data() + b * H);
    model::mlm_head_forward(c, logits.data(), head, m.p.head, last.data(), B);
    EXPECT_EQ(g.feed(ids), logits) << "at position " << pos;
    pos += n;
  }
}

// generate() sizes the key/value cache by the request (prompt + max_new_tokens), not by
// max_position_embeddings, which RoPE models may set as high as 2^24; a Generator asked for a
// context that cannot fit in memory is refused with std::length_error, not std::bad_alloc.
TEST(RoFormerGenerate, TheCacheIsSizedByTheRequest) {
  auto c = tiny(model::PositionEncoding::rope);
  c.is_decoder = true;
  c.hidden_size = c.embedding_size = 256;
  c.num_attention_heads = 4;
  c.num_hidden_layers = 8;
  c.max_position_embeddings = 1 << 24;  // a cache that long: 8 layers × 2 × 2^24 × 256 floats = 256 GiB
  model::RoFormer<float> m(c);
  m.init_weights(2);
  model::DecodeOptions opt;
  opt.beam_size = 1;
  opt.max_len_b = 5;
  EXPECT_EQ(model::generate(m, {1, 2, 3}, opt)[0].tokens.size(), 5u);
  EXPECT_THROW(model::Generator{m}, std::length_error);
}
