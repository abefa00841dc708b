// The encoder-decoder (src/model/seq2seq.h): whole-model gradients against central differences in
// float64 (shared and separate embeddings, every position encoding, dropout, source padding,
// rotated cross-attention), the HF EncoderDecoderModel tensor names, the decoder never looking ahead
// or at source padding, config.json round trip, and loading errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>

#include "grad_check.h"
#include "io/safetensors.h"
#include "model/seq2seq.h"
#include "ops/packed_linear.h"

namespace {

model::Seq2SeqConfig tiny_seq2seq(model::PositionEncoding pe, bool shared = true) {
  model::RoFormerConfig c;
  c.vocab_size = 13;
  c.embedding_size = 8;
  c.hidden_size = 8;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 12;
  c.max_position_embeddings = 16;
  c.hidden_dropout_prob = 0;
  c.attention_probs_dropout_prob = 0;
  c.position_encoding = pe;
  model::Seq2SeqConfig s = model::Seq2SeqConfig::symmetric(c);
  s.shared_embeddings = shared;
  if (!shared) s.decoder.vocab_size = 11;
  return s;
}

struct Pairs {
  std::vector<int64_t> src, src_mask, dec;
  int64_t B, S, T;
  model::Seq2SeqInputs inputs() const {
    return {.source = src.data(), .source_mask = src_mask.data(), .decoder_input = dec.data(), .B = B, .S = S, .T = T};
  }
};

Pairs random_pairs(const model::Seq2SeqConfig& c, int64_t B, int64_t S, int64_t T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Pairs p{{}, {}, {}, B, S, T};
  for (int64_t i = 0; i < B * S; ++i) p.src.push_back(1 + static_cast<int64_t>(rng() % (c.encoder.vocab_size - 1)));
  p.src_mask.assign(B * S, 1);
  p.src_mask[B * S - 1] = p.src_mask[B * S - 2] = 0;  // the last source is two tokens shorter
  p.src[B * S - 1] = p.src[B * S - 2] = c.encoder.pad_token_id;
  for (int64_t i = 0; i < B * T; ++i) p.dec.push_back(static_cast<int64_t>(rng() % c.decoder.vocab_size));
  return p;
}

template <typename T>
void randomise(model::Seq2Seq<T>& m, uint64_t seed) {
  m.init_weights(seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 0.4);
  for (auto& v : m.params) v += static_cast<T>(z(rng));
}

// A fixed random G (B, T, V) for loss = Σ logits · G: every path from every parameter reaches it.
template <typename T>
std::vector<T> random_logit_weights(const model::Seq2SeqConfig& cfg, const Pairs& batch) {
  std::mt19937_64 rng(8);
  std::normal_distribution<T> z;
  std::vector<T> G(batch.B * batch.T * cfg.decoder.vocab_size);
  for (T& x : G) x = z(rng);
  return G;
}

void expect_seq2seq_gradients(const model::Seq2SeqConfig& cfg, bool training) {
  model::Seq2Seq<double> m(cfg);
  randomise(m, 3);
  const Pairs batch = random_pairs(cfg, 2, 5, 4, 9);
  const std::vector<double> G = random_logit_weights<double>(cfg, batch);
  auto loss = [&] {
    m.forward(batch.inputs(), training, 41);
    double s = 0;
    for (size_t i = 0; i < G.size(); ++i) s += m.logits()[i] * G[i];
    return s;
  };
  loss();
  m.zero_grad();
  m.backward_from_logits(G.data());
  const std::vector<double> analytic = m.grads;
  std::vector<int64_t> at;
  for (const auto& info : m.layout()) {
    const bool word_table = info.name.find("word_embeddings") != std::string::npos;
    for (int64_t j : testing_util::picks(info.size, 3, info.offset)) {
      if (word_table && j / info.shape[1] == cfg.encoder.pad_token_id) continue;  // padding_idx: no gradient
      at.push_back(info.offset + j);
    }
  }
  EXPECT_GT(testing_util::expect_gradient("params", m.params, analytic, at, loss, testing_util::kModelCheck), 80);
}

TEST(Seq2Seq, GradientsRopeSharedEmbeddings) { expect_seq2seq_gradients(tiny_seq2seq(model::PositionEncoding::rope), false); }
TEST(Seq2Seq, GradientsSinusoidalSeparateEmbeddingsWithDropout) {
  model::Seq2SeqConfig c = tiny_seq2seq(model::PositionEncoding::sinusoidal, false);
  c.encoder.hidden_dropout_prob = c.decoder.hidden_dropout_prob = 0.2;
  c.encoder.attention_probs_dropout_prob = c.decoder.attention_probs_dropout_prob = 0.15;
  expect_seq2seq_gradients(c, true);
}
TEST(Seq2Seq, GradientsLearnedPositions) { expect_seq2seq_gradients(tiny_seq2seq(model::PositionEncoding::learned), false); }
TEST(Seq2Seq, GradientsNoPositionsRotatedCrossAttentionOff) {
  expect_seq2seq_gradients(tiny_seq2seq(model::PositionEncoding::none), false);
}
TEST(Seq2Seq, GradientsRotatedCrossAttention) {
  model::Seq2SeqConfig c = tiny_seq2seq(model::PositionEncoding::rope);
  c.decoder.rotate_cross_attention = true;
  expect_seq2seq_gradients(c, false);
}

// bf16 mixed-precision training reaches both stacks: the logits and every gradient (the encoder's
// through the cross-attention) stay close to fp32's without equalling them; evaluation is fp32's.
TEST(Seq2Seq, Bf16TrainingReachesEncoderAndDecoder) {
  if (!ops::bf16_is_native()) GTEST_SKIP() << "no native bf16 (" << ops::cpu_isa_name() << ")";
  const auto cfg = tiny_seq2seq(model::PositionEncoding::rope, false);
  model::Seq2Seq<float> bf(cfg), fp(cfg);
  randomise(bf, 3);
  fp.params = bf.params;
  bf.set_precision(ops::Precision::bf16);
  EXPECT_EQ(bf.encoder().precision(), ops::Precision::bf16);
  EXPECT_EQ(bf.decoder().precision(), ops::Precision::bf16);
  const Pairs batch = random_pairs(cfg, 2, 7, 6, 9);
  const int64_t n = batch.B * batch.T * cfg.decoder.vocab_size;
  const std::vector<float> G(n, 0.01f);
  auto train = [&](model::Seq2Seq<float>& m) {
    m.forward(batch.inputs(), true, 41);
    m.zero_grad();
    m.backward_from_logits(G.data());
    return std::vector<float>(m.logits(), m.logits() + n);
  };
  const auto lb = train(bf), lf = train(fp);
  auto nmse = [](const std::vector<float>& x, const std::vector<float>& ref, size_t begin, size_t end) {
    double err = 0, norm = 0;
    for (size_t i = begin; i < end; ++i) err += std::pow(double(x[i]) - ref[i], 2), norm += std::pow(double(ref[i]), 2);
    return err / norm;
  };
  EXPECT_GT(nmse(lb, lf, 0, lb.size()), 1e-12);
  EXPECT_LT(nmse(lb, lf, 0, lb.size()), 3e-3);
  // The encoder's and the decoder's parts of the gradient arena, each.
  const auto first_decoder = std::find_if(bf.layout().begin(), bf.layout().end(),
                                          [](const model::ParamInfo& i) { return i.name.rfind("decoder.", 0) == 0; });
  ASSERT_NE(first_decoder, bf.layout().end());
  const size_t split = static_cast<size_t>(first_decoder->offset);
  for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, split}, {split, bf.grads.size()}}) {
    EXPECT_GT(nmse(bf.grads, fp.grads, begin, end), 1e-12) << begin;
    EXPECT_LT(nmse(bf.grads, fp.grads, begin, end), 3e-3) << begin;
  }
  bf.forward(batch.inputs(), false), fp.forward(batch.inputs(), false);
  EXPECT_TRUE(std::equal(bf.logits(), bf.logits() + n, fp.logits()));
}

// Gradient checkpointing in the encoder and the decoder (its cross-attention recomputed over the
// encoder's kept output): loss Σ logits · G and every gradient equal those of kept activations, bit
// for bit, with dropout.
TEST(Seq2Seq, GradientCheckpointingGivesTheGradientsOfKeptActivations) {
  model::Seq2SeqConfig cfg = tiny_seq2seq(model::PositionEncoding::rope);
  cfg.encoder.hidden_dropout_prob = cfg.decoder.hidden_dropout_prob = 0.2;
  cfg.encoder.attention_probs_dropout_prob = cfg.decoder.attention_probs_dropout_prob = 0.1;
  model::Seq2Seq<float> checkpointed(cfg), kept(cfg);
  randomise(checkpointed, 3);
  kept.params = checkpointed.params;
  checkpointed.set_gradient_checkpointing(true);
  EXPECT_EQ(checkpointed.encoder().keep(), model::Keep::inputs);
  const Pairs batch = random_pairs(cfg, 2, 7, 5, 9);
  const std::vector<float> G = random_logit_weights<float>(cfg, batch);
  checkpointed.forward(batch.inputs(), true, 41), kept.forward(batch.inputs(), true, 41);
  for (size_t i = 0; i < G.size(); ++i) ASSERT_EQ(checkpointed.logits()[i], kept.logits()[i]);
  checkpointed.zero_grad(), kept.zero_grad();
  checkpointed.backward_from_logits(G.data()), kept.backward_from_logits(G.data());
  for (size_t i = 0; i < kept.grads.size(); ++i) ASSERT_EQ(checkpointed.grads[i], kept.grads[i]) << "gradient " << i;
}

TEST(Seq2Seq, LayoutHasHuggingFaceEncoderDecoderNames) {
  model::Seq2Seq<float> shared(tiny_seq2seq(model::PositionEncoding::rope));
  std::vector<std::string> names;
  for (const auto& info : shared.layout()) names.push_back(info.name);
  auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  EXPECT_TRUE(has("encoder.embeddings.word_embeddings.weight"));
  EXPECT_TRUE(has("encoder.encoder.layer.1.output.LayerNorm.bias"));
  EXPECT_TRUE(has("decoder.roformer.encoder.layer.0.crossattention.self.query.weight"));
  EXPECT_TRUE(has("decoder.roformer.encoder.layer.1.crossattention.output.LayerNorm.weight"));
  EXPECT_TRUE(has("decoder.cls.predictions.transform.dense.weight"));
  EXPECT_FALSE(has("decoder.roformer.embeddings.word_embeddings.weight"));  // shared: the encoder's table
  EXPECT_FALSE(has("encoder.cls.predictions.bias"));
  model::Seq2Seq<float> separate(tiny_seq2seq(model::PositionEncoding::rope, false));
  EXPECT_EQ(separate.layout()[0].name, "encoder.embeddings.word_embeddings.weight");
  bool decoder_table = false;
  for (const auto& info : separate.layout()) decoder_table |= info.name == "decoder.roformer.embeddings.word_embeddings.weight";
  EXPECT_TRUE(decoder_table);
  // Layer offsets ascend through the encoder, then the decoder.
  EXPECT_EQ(shared.layer_offsets().size(), 4u);
  EXPECT_TRUE(std::is_sorted(shared.layer_offsets().begin(), shared.layer_offsets().end()));
}

TEST(Seq2Seq, DecoderSeesNeitherTheFutureNorSourcePadding) {
  const model::Seq2SeqConfig cfg = tiny_seq2seq(model::PositionEncoding::rope);
  model::Seq2Seq<double> m(cfg);
  randomise(m, 5);
  Pairs a = random_pairs(cfg, 2, 5, 4, 1);
  m.forward(a.inputs());
  const int64_t V = cfg.decoder.vocab_size;
  const std::vector<double> before(m.logits(), m.logits() + 2 * 4 * V);
  Pairs b = a;
  b.dec[3] = (b.dec[3] + 1) % V;        // row 0's last target token: earlier positions must not change
  b.src[2 * 5 - 1] = 7;                 // row 1's padding source token: nothing may change
  m.forward(b.inputs());
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(m.logits()[t * V + v], before[t * V + v]) << t;
  }
  for (int64_t i = 4 * V; i < 8 * V; ++i) EXPECT_EQ(m.logits()[i], before[i]) << i;
  b.src[0] = (b.src[0] % 11) + 1;  // a real source token changes row 0 everywhere
  m.forward(b.inputs());
  EXPECT_NE(m.logits()[0], before[0]);
}

TEST(Seq2Seq, ConfigJsonRoundTripsAndRejectsBadConfigs) {
  model::Seq2SeqConfig c = tiny_seq2seq(model::PositionEncoding::sinusoidal, false);
  c.decoder_start_token_id = 5;
  const auto back = model::Seq2SeqConfig::from_json_text(c.to_json(), "config.json");
  EXPECT_EQ(back.to_json(), c.to_json());
  EXPECT_NE(c.to_json().find("\"EncoderDecoderModel\""), std::string::npos);
  EXPECT_NE(c.to_json().find("\"add_cross_attention\": true"), std::string::npos);
  EXPECT_THROW(model::Seq2SeqConfig::from_json_text("{\"model_type\": \"roformer\"}", "x.json"), io::Error);
  EXPECT_THROW(model::Seq2SeqConfig::from_json_text("{", "x.json"), io::Error);
  model::Seq2SeqConfig bad = c;
  bad.decoder.add_cross_attention = false;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = c;
  bad.shared_embeddings = true;  // the vocabularies differ
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  bad = c;
  bad.eos_token_id = 99;
  EXPECT_THROW(bad.validate(), std::invalid_argument);
}

TEST(Seq2Seq, LoadRoundTripsAndRejectsMissingUnexpectedAndUntiedTensors) {
  const model::Seq2SeqConfig cfg = tiny_seq2seq(model::PositionEncoding::rope);
  model::Seq2Seq<float> m(cfg);
  m.init_weights(7);
  std::vector<io::TensorView> tensors;
  for (const auto& info : m.layout()) tensors.push_back({info.name, io::DType::F32, info.shape, m.params.data() + info.offset});
  const std::string path = ::testing::TempDir() + "/seq2seq.safetensors";
  auto write = [&](const std::vector<io::TensorView>& t) {
    const auto bytes = io::safetensors_bytes(t, {});
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  write(tensors);
  model::Seq2Seq<float> loaded(cfg);
  loaded.load(io::SafeTensors(path));
  EXPECT_EQ(loaded.params, m.params);
  // HF stores the decoder's copy of a shared table: accepted when equal, an error otherwise.
  std::vector<float> copy(m.encoder().p.emb.word, m.encoder().p.emb.word + 13 * 8);
  auto with_copy = tensors;
  with_copy.push_back({"decoder.roformer.embeddings.word_embeddings.weight", io::DType::F32, {13, 8}, copy.data()});
  write(with_copy);
  EXPECT_NO_THROW(loaded.load(io::SafeTensors(path)));
  copy[3] += 1;
  write(with_copy);
  EXPECT_THROW(loaded.load(io::SafeTensors(path)), io::Error);
  auto missing = tensors;
  missing.pop_back();
  write(missing);
  EXPECT_THROW(loaded.load(io::SafeTensors(path)), io::Error);
  auto extra = tensors;
  extra.push_back({"decoder.unknown.weight", io::DType::F32, {13, 8}, copy.data()});
  write(extra);
  EXPECT_THROW(loaded.load(io::SafeTensors(path)), io::Error);
}

}  // namespace
