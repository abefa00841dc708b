// src/infer against the roformer-hf fixtures and direct computations: `forward` reproduces every
// fixture tensor (names, shapes, dtypes, values within 1e-5 + 1e-4·|HF|); batched embed, fill-mask and
// classify (length-sorted, padded batches) equal an unpadded one-text forward followed by the pooling,
// softmax or classification head written out here; HF-style decoding; and every error: model
// directory files, inputs, too-long texts, missing heads, bad input lines.
// The model directories are the fixture cases plus the fixture's tokenizer files, copied to a temp dir.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "infer/fill_mask.h"
#include "infer/forward_io.h"
#include "infer/input.h"
#include "infer/pipeline.h"
#include "serve_fixtures.h"

namespace {

namespace fs = std::filesystem;
using namespace serve_fixtures;
const std::vector<std::string> kCases = {"case1_mlm_basic", "case2_embproj_rotary_value", "case3_seq_eq_max_positions"};

bool close(double ours, double ref) { return std::fabs(ours - ref) <= 1e-5 + 1e-4 * std::fabs(ref); }

// ---- forward: the fixture layout ----

class ForwardIo : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardIo, ReproducesTheFixtureTensors) {
  const std::string fixture = kFixtures + "/" + GetParam();
  const std::string out = temp_dir() + "/" + GetParam() + ".out.safetensors";
  infer::forward_file(fixture, fixture + "/io.safetensors", out);
  const io::SafeTensors ref(fixture + "/io.safetensors"), ours(out);
  EXPECT_EQ(ours.metadata().at("format"), "pt");
  std::vector<std::string> expected = ref.names();
  expected.erase(std::remove(expected.begin(), expected.end(), "sinusoidal_pos"), expected.end());
  ASSERT_EQ(ours.names(), expected);
  for (const std::string& name : expected) {
    SCOPED_TRACE(name);
    const io::Tensor &a = ours.at(name), &b = ref.at(name);
    ASSERT_EQ(a.dtype, b.dtype);
    ASSERT_EQ(a.shape, b.shape);
    if (a.dtype == io::DType::I64) {
      EXPECT_EQ(ours.i64(name), ref.i64(name));
      continue;
    }
    const auto x = ours.f32(name), y = ref.f32(name);
    size_t bad = 0;
    while (bad < x.size() && close(x[bad], y[bad])) ++bad;
    EXPECT_EQ(bad, x.size()) << "first mismatch at element " << bad << ": " << x[bad] << " vs " << y[bad];
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ForwardIo, ::testing::ValuesIn(kCases));

// Writes a safetensors file of the given tensors (I64 (B, T) each).
std::string inputs_file(const std::string& name, const std::map<std::string, std::vector<int64_t>>& tensors, int64_t B,
                        int64_t T, io::DType dtype = io::DType::I64) {
  std::vector<io::TensorView> views;
  for (const auto& [n, v] : tensors) views.push_back({n, dtype, {B, T}, v.data()});
  const std::string path = temp_dir() + "/" + name + ".safetensors";
  io::write_file_atomic(path, io::safetensors_bytes(views));
  return path;
}

TEST(ForwardIo, EncoderOnlyCheckpointHasNoLogitsAndDefaultsMaskAndTypes) {
  // A RoFormerModel checkpoint: the fixture's encoder tensors without "roformer." and no MLM head.
  const std::string dir = temp_dir() + "/encoder_only";
  fs::create_directories(dir);
  fs::copy_file(kFixtures + "/case1_mlm_basic/config.json", dir + "/config.json");
  const io::SafeTensors full(kFixtures + "/case1_mlm_basic/model.safetensors");
  std::vector<io::TensorView> views;
  for (const auto& [name, t] : full.tensors()) {
    if (name.rfind("roformer.", 0) == 0) views.push_back({name.substr(9), t.dtype, t.shape, t.data});
  }
  io::write_file_atomic(dir + "/model.safetensors", io::safetensors_bytes(views));
  const std::vector<int64_t> ids = {2, 65, 10, 66, 5, 3};
  const std::string in = inputs_file("ids_only", {{"input_ids", ids}}, 1, 6);
  infer::forward_file(dir, in, dir + "/out.safetensors");
  const io::SafeTensors out(dir + "/out.safetensors");
  EXPECT_FALSE(out.contains("logits"));
  EXPECT_EQ(out.i64("attention_mask"), std::vector<int64_t>(6, 1));
  EXPECT_EQ(out.i64("token_type_ids"), std::vector<int64_t>(6, 0));
  EXPECT_EQ(out.at("attentions").shape, (std::vector<int64_t>{2, 1, 4, 6, 6}));
  // The same ids through the full checkpoint give the same last hidden state.
  infer::forward_file(kFixtures + "/case1_mlm_basic", in, dir + "/full.safetensors");
  const io::SafeTensors ref(dir + "/full.safetensors");
  EXPECT_TRUE(ref.contains("logits"));
  EXPECT_EQ(out.f32("last_hidden_state"), ref.f32("last_hidden_state"));
}

TEST(ForwardIo, RejectsBadInputs) {
  const std::string m = kFixtures + "/case3_seq_eq_max_positions", out = temp_dir() + "/bad.safetensors";
  auto run = [&](const std::string& in) { return [=] { infer::forward_file(m, in, out); }; };
  expect_error(run(inputs_file("no_ids", {{"attention_mask", {1, 1}}}, 1, 2)), {"no_ids.safetensors", "input_ids"});
  expect_error(run(inputs_file("i32", {{"input_ids", {2, 3}}}, 1, 1, io::DType::I32)), {"dtype I32", "expected I64"});
  expect_error(run(inputs_file("long", {{"input_ids", std::vector<int64_t>(25, 5)}}, 1, 25)),
               {"25 tokens", "max_position_embeddings (24)"});
  expect_error(run(inputs_file("bad_id", {{"input_ids", {2, 129, 3}}}, 1, 3)), {"input_ids[0, 1] = 129", "[0, 128]"});
  expect_error(run(inputs_file("bad_type", {{"input_ids", {2, 5, 3}}, {"token_type_ids", {0, 3, 0}}}, 1, 3)),
               {"token_type_ids[0, 1] = 3"});
  expect_error(run(inputs_file("bad_mask", {{"input_ids", {2, 5, 3}}, {"attention_mask", {1, 2, 1}}}, 1, 3)),
               {"attention_mask[0, 1] = 2"});
  expect_error([&] { infer::forward_file(temp_dir() + "/nowhere", kFixtures + "/case1_mlm_basic/io.safetensors", out); },
               {"nowhere", "no such model directory"});
  EXPECT_FALSE(fs::exists(out));
}

// ---- model directories ----

TEST(Pipeline, ModelDirectoryErrorsNameTheMissingFile) {
  const std::string base = temp_dir() + "/broken";
  fs::create_directories(base + "/empty");
  expect_error([&] { infer::Pipeline::load(base + "/empty"); }, {"empty: no config.json", "vocab.txt"});
  const std::string no_vocab = base + "/no_vocab";
  fs::create_directories(no_vocab);
  fs::copy_file(kFixtures + "/case1_mlm_basic/config.json", no_vocab + "/config.json");
  expect_error([&] { infer::Pipeline::load(no_vocab); }, {"no_vocab: no tokenizer: neither vocab.txt"});
  fs::copy_file(kFixtures + "/tokenizer/vocab.txt", no_vocab + "/vocab.txt");
  expect_error([&] { infer::Pipeline::load(no_vocab); }, {"no_vocab", "model.safetensors", "pytorch_model.bin"});
  infer::LoadOptions tokenizer_only;
  tokenizer_only.weights = false;
  EXPECT_EQ(infer::Pipeline::load(no_vocab, tokenizer_only)->tokenizer().encode("hello").input_ids,
            (std::vector<int32_t>{2, 65, 3}));
  expect_error([&] { infer::Pipeline::load(base + "/missing"); }, {"missing: no such model directory"});
}

TEST(Pipeline, PlanBatchesSortsByLengthAndKeepsEveryIndexOnce) {
  const auto b = infer::plan_batches({5, 2, 9, 2, 7}, 2);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (std::vector<size_t>{1, 3}));
  EXPECT_EQ(b[1], (std::vector<size_t>{0, 4}));
  EXPECT_EQ(b[2], (std::vector<size_t>{2}));
  EXPECT_TRUE(infer::plan_batches({}, 4).empty());
  // max_padding closes a batch before a much longer sequence: 10, 10 | 30, 31 (30 → 31 pads 1 of 62).
  const auto p = infer::plan_batches({30, 10, 31, 10}, 8, 0.1);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], (std::vector<size_t>{1, 3}));
  EXPECT_EQ(p[1], (std::vector<size_t>{0, 2}));
  EXPECT_EQ(infer::plan_batches({30, 10, 31, 10}, 8, 1).size(), 1u);
  EXPECT_EQ(infer::plan_batches({5, 5, 5}, 8, 0).size(), 1u);  // equal lengths never pad
  EXPECT_THROW(infer::plan_batches({1}, 1, std::nan("")), std::invalid_argument);
  EXPECT_THROW(infer::plan_batches({1}, 0), std::invalid_argument);
}

// ---- a one-text forward, for the direct computations ----

struct Single {
  text::Encoding enc;
  std::vector<float> hidden;  // (T, H) last hidden state
  std::vector<float> logits;  // (T, V)
};

Single single_forward(infer::Pipeline& p, const std::string& text) {
  Single s;
  s.enc = p.tokenizer().encode(text);
  const int64_t T = static_cast<int64_t>(s.enc.size()), H = p.config().hidden_size, V = p.config().vocab_size;
  std::vector<int64_t> ids(s.enc.input_ids.begin(), s.enc.input_ids.end());
  auto& m = p.model();
  m.forward({.ids = ids.data(), .B = 1, .T = T});
  const float* h = m.hidden_state(p.config().num_hidden_layers);
  s.hidden.assign(h, h + T * H);
  if (m.logits()) s.logits.assign(m.logits(), m.logits() + T * V);
  return s;
}

const std::vector<std::string> kTexts = {"hello, world!", "[MASK] is a token", "今天天气非常好。",
                                         "the quick brown [MASK] jumps over the lazy dog.", "ok", "我们是[MASK]国人，你好！"};

TEST(Pipeline, BatchedEmbeddingsEqualOneTextForwards) {
  auto p = infer::Pipeline::load(model_dir("case1"));
  const int64_t H = p->config().hidden_size;
  for (infer::Pooling pooling : {infer::Pooling::cls, infer::Pooling::mean}) {
    for (bool normalize : {false, true}) {
      SCOPED_TRACE(std::string(infer::pooling_name(pooling)) + (normalize ? " normalized" : ""));
      const auto e = p->embed(kTexts, {.pooling = pooling, .normalize = normalize, .batch_size = 4});
      ASSERT_EQ(e.size(), kTexts.size());
      for (size_t i = 0; i < kTexts.size(); ++i) {
        const Single s = single_forward(*p, kTexts[i]);
        const int64_t T = pooling == infer::Pooling::cls ? 1 : static_cast<int64_t>(s.enc.size());
        std::vector<double> ref(H, 0.0);
        double norm = 0;
        for (int64_t i2 = 0; i2 < H; ++i2) {
          for (int64_t t = 0; t < T; ++t) ref[i2] += s.hidden[t * H + i2] / double(T);
          norm += ref[i2] * ref[i2];
        }
        ASSERT_EQ(e[i].size(), static_cast<size_t>(H));
        for (int64_t k = 0; k < H; ++k) {
          const double r = normalize ? ref[k] / std::sqrt(norm) : ref[k];
          ASSERT_TRUE(close(e[i][k], r)) << "text " << i << " dim " << k << ": " << e[i][k] << " vs " << r;
        }
      }
    }
  }
  // Without the MLM head (as embed, similarity and classify load) the encoder gives the same values.
  infer::LoadOptions no_head;
  no_head.mlm_head = false;
  auto encoder = infer::Pipeline::load(model_dir("case1"), no_head);
  EXPECT_FALSE(encoder->has_mlm_head());
  EXPECT_TRUE(p->has_mlm_head());
  EXPECT_EQ(encoder->embed(kTexts, {.batch_size = 4}), p->embed(kTexts, {.batch_size = 4}));
  const auto sim = p->similarity({{kTexts[0], kTexts[2]}, {kTexts[1], kTexts[1]}}, {.pooling = infer::Pooling::mean});
  const auto e = p->embed({kTexts[0], kTexts[2]}, {.pooling = infer::Pooling::mean});
  EXPECT_NEAR(sim[0], infer::cosine(e[0], e[1]), 1e-6);
  EXPECT_NEAR(sim[1], 1.0, 1e-6);
  EXPECT_NEAR(infer::cosine({1, 0}, {0, 2}), 0.0, 1e-15);
}

// RoFormer-Sim (tests/testdata/roformer_sim, checked against its reference in tests/model/roformer_parity_test.cc):
// --pooling pooler gives the pooler output of a one-text forward, in any batch order; a checkpoint
// without a pooler refuses it.
TEST(Pipeline, SimPoolerEmbeddingsEqualOneTextForwards) {
  const std::string dir = temp_dir() + "/sim";
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(std::string(ROFORMER_TEST_DATA) + "/roformer_sim/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  }
  {  // the fixture vocabulary cut to the model's 97 ids
    std::ifstream in(kFixtures + "/tokenizer/vocab.txt");
    std::ofstream out(dir + "/vocab.txt");
    std::string line;
    for (int i = 0; i < 97 && std::getline(in, line); ++i) out << line << "\n";
  }
  auto p = infer::Pipeline::load(dir);
  const int64_t H = p->config().hidden_size;
  model::RoFormer<float> full(p->config());  // Keep::all, as a plain forward
  full.params = p->model().params;
  for (bool normalize : {false, true}) {
    const auto e = p->embed(kTexts, {.pooling = infer::Pooling::pooler, .normalize = normalize, .batch_size = 4});
    for (size_t i = 0; i < kTexts.size(); ++i) {
      const text::Encoding enc = p->tokenizer().encode(kTexts[i]);
      const std::vector<int64_t> ids(enc.input_ids.begin(), enc.input_ids.end());
      full.forward({.ids = ids.data(), .B = 1, .T = static_cast<int64_t>(ids.size())});
      ASSERT_NE(full.pooler_output(), nullptr);
      double norm = 0;
      for (int64_t k = 0; k < H; ++k) norm += double(full.pooler_output()[k]) * full.pooler_output()[k];
      for (int64_t k = 0; k < H; ++k) {
        const double r = full.pooler_output()[k] / (normalize ? std::sqrt(norm) : 1.0);
        ASSERT_TRUE(close(e[i][k], r)) << "text " << i << " dim " << k << ": " << e[i][k] << " vs " << r;
      }
    }
  }
  EXPECT_EQ(infer::parse_pooling("pooler"), infer::Pooling::pooler);
  auto plain = infer::Pipeline::load(model_dir("case1"));
  expect_error([&] { plain->embed({"hi"}, {.pooling = infer::Pooling::pooler}); }, {"config.json", "pooler"});
}

// --rope-scaling: inputs up to factor × max_position_embeddings (case1: 64) run, with the scaled
// rotation (a short text's embedding changes); without it they are errors that name the option.
TEST(Pipeline, RopeScalingExtendsTheInputLimit) {
  std::string long_text;
  for (int i = 0; i < 90; ++i) long_text += "a ";  // 90 tokens + [CLS] + [SEP]
  auto plain = infer::Pipeline::load(model_dir("case1"));
  EXPECT_EQ(plain->max_length(), 64);
  expect_error([&] { plain->embed({long_text}, {}); }, {"92 tokens", "max_position_embeddings (64)", "--rope-scaling"});
  for (const char* spec : {"linear:2", "ntk:2", "yarn:2:64", "dynamic-ntk:2:64", "llama3:2:64"}) {
    SCOPED_TRACE(spec);
    infer::LoadOptions lo;
    lo.rope_scaling = spec;
    auto scaled = infer::Pipeline::load(model_dir("case1"), lo);
    EXPECT_EQ(scaled->max_length(), 128);
    const auto e = scaled->embed({long_text, "hello"}, {.pooling = infer::Pooling::mean});
    for (float x : e[0]) ASSERT_TRUE(std::isfinite(x));
    if (std::string(spec) != "dynamic-ntk:2:64") {  // dynamic NTK leaves lengths within the original context alone
      EXPECT_NE(e[1], plain->embed({"hello"}, {.pooling = infer::Pooling::mean})[0]);
    }
    std::string too_long = long_text;
    for (int i = 0; i < 40; ++i) too_long += "b ";
    expect_error([&] { scaled->embed({too_long}, {}); }, {"132 tokens", "more than 128", spec});
  }
  infer::LoadOptions bad;
  bad.rope_scaling = "stretch:2";
  expect_error([&] { infer::Pipeline::load(model_dir("case1"), bad); }, {"--rope-scaling stretch:2", "unknown RoPE scaling"});
}

// Truncate: cut to the model's length (or a shorter --max-length) keeping [CLS] and [SEP], from the
// right or the left; a pair loses tokens from its longer text first; the embedding of a cut text is
// the embedding of the text it was cut to.
TEST(Pipeline, TruncateCutsToTheModelLengthKeepingSpecialTokens) {
  auto p = infer::Pipeline::load(model_dir("case3", "case3_seq_eq_max_positions"));  // 24 positions
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += std::string(1, static_cast<char>('a' + i % 26)) + " ";
  const infer::Truncate right{true, 0, text::Side::Right}, left{true, 0, text::Side::Left}, eight{true, 8};
  const text::Encoding r = p->encode({long_text}, right)[0], l = p->encode({long_text}, left)[0];
  ASSERT_EQ(r.size(), 24u);
  ASSERT_EQ(l.size(), 24u);
  EXPECT_EQ(r.tokens.front(), "[CLS]");
  EXPECT_EQ(r.tokens.back(), "[SEP]");
  EXPECT_EQ(r.tokens[1], "a");   // the start kept
  EXPECT_EQ(l.tokens[22], "n");  // the end kept: the 40th letter is 'n'
  EXPECT_EQ(p->encode({long_text}, eight)[0].size(), 8u);
  EXPECT_EQ(p->encode({"a b"}, eight)[0].size(), 4u);  // short texts are untouched
  const text::Encoding pair = p->encode_pairs({{long_text, "x y"}}, right)[0];
  EXPECT_EQ(pair.size(), 24u);
  EXPECT_EQ(pair.tokens[pair.size() - 3], "x");  // the short second text whole
  std::string kept;
  for (size_t t = 1; t + 1 < r.size(); ++t) kept += r.tokens[t] + " ";
  EXPECT_EQ(p->embed({long_text}, {}, right)[0], p->embed({kept}, {})[0]);
  EXPECT_THROW(p->embed({long_text}, {}), infer::InputError);  // the default stays an error
}

TEST(Pipeline, TooLongTextsAndUnknownIdsAreInputErrors) {
  auto p = infer::Pipeline::load(model_dir("case3", "case3_seq_eq_max_positions"));
  const std::string fits(22, 'a'), too_long(23, 'a');  // spaced out: one token per letter, plus [CLS] and [SEP]
  std::string spaced_fits, spaced_long;
  for (char c : fits) spaced_fits += std::string(1, c) + " ";
  for (char c : too_long) spaced_long += std::string(1, c) + " ";
  EXPECT_EQ(p->embed({spaced_fits}, {}).size(), 1u);
  try {
    p->embed({"ok", spaced_long}, {});
    ADD_FAILURE() << "no InputError";
  } catch (const infer::InputError& e) {
    EXPECT_EQ(e.index, 1u);
    EXPECT_NE(std::string(e.what()).find("25 tokens, more than the model's max_position_embeddings (24)"), std::string::npos)
        << e.what();
  }
  try {
    p->similarity({{"ok", "ok"}, {"ok", spaced_long}}, {});
    ADD_FAILURE() << "no InputError";
  } catch (const infer::InputError& e) {
    EXPECT_EQ(e.index, 1u);
    EXPECT_EQ(std::string(e.what()).rfind("text b: ", 0), 0u) << e.what();
  }
  // A special token the tokenizer adds after vocab.txt gets id 129, outside case1's vocabulary: the
  // directory is refused when it loads, not on the first text that holds the token.
  const std::string extra = model_dir("extra_token");
  auto tc = nlohmann::json::parse(std::ifstream(extra + "/tokenizer_config.json"));
  tc["additional_special_tokens"] = {"[NEW]"};
  std::ofstream(extra + "/tokenizer_config.json") << tc.dump();
  expect_error([&] { infer::Pipeline::load(extra); },
               {"extra_token: the wordpiece tokenizer has 130 tokens, which do not fit the model's vocab_size 129"});
}

// ---- fill-mask ----

TEST(FillMask, BatchedPredictionsEqualOneTextSoftmax) {
  auto p = infer::Pipeline::load(model_dir("case1"));
  std::vector<std::string> texts;
  for (const auto& t : kTexts) {
    if (t.find("[MASK]") != std::string::npos) texts.push_back(t);
  }
  texts.push_back("[MASK] [MASK] hello");
  const int64_t V = p->config().vocab_size, k = 4;
  const auto out = infer::fill_mask(*p, texts, k, 2);
  ASSERT_EQ(out.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    const Single s = single_forward(*p, texts[i]);
    size_t mask = 0;
    for (size_t t = 0; t < s.enc.size(); ++t) {
      if (s.enc.input_ids[t] != p->tokenizer().mask_id()) continue;
      ASSERT_LT(mask, out[i].size());
      const float* z = s.logits.data() + t * V;
      double mx = -1e300, sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, double(z[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(z[v] - mx);
      const auto& preds = out[i][mask++];
      ASSERT_EQ(preds.size(), static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) {
        const double ref = std::exp(z[preds[j].token] - mx) / sum;
        EXPECT_NEAR(preds[j].score, ref, 1e-6);
        if (j > 0) {
          EXPECT_GE(preds[j - 1].score, preds[j].score);
        }
      }
      int64_t better = 0;  // no token outside the top k scores higher than the k-th
      for (int64_t v = 0; v < V; ++v) better += std::exp(z[v] - mx) / sum > preds.back().score + 1e-6;
      EXPECT_LE(better, k - 1);
    }
    EXPECT_EQ(mask, out[i].size());
  }
  // HF's shapes: one mask → a list of predictions; several → a list per mask, with special tokens kept.
  const auto one = nlohmann::ordered_json::parse(infer::fill_mask_json(out[0]));
  ASSERT_TRUE(one.is_array() && one[0].is_object());
  EXPECT_EQ(one[0]["sequence"], out[0][0][0].token_str + " is a token");
  const auto two = nlohmann::json::parse(infer::fill_mask_json(out.back()));
  ASSERT_TRUE(two.is_array() && two.size() == 2 && two[0].is_array());
  EXPECT_EQ(two[1][0]["sequence"], "[CLS] [MASK] " + out.back()[1][0].token_str + " hello [SEP]");
  std::vector<std::string> keys;
  for (const auto& [key, v] : one[0].items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"score", "token", "token_str", "sequence"}));
}

TEST(FillMask, ErrorsNameTheTextAndTheHead) {
  auto p = infer::Pipeline::load(model_dir("case1"));
  try {
    infer::fill_mask(*p, {"[MASK] ok", "no mask here"});
    ADD_FAILURE() << "no InputError";
  } catch (const infer::InputError& e) {
    EXPECT_EQ(e.index, 1u);
    EXPECT_NE(std::string(e.what()).find("no [MASK] token"), std::string::npos) << e.what();
  }
  expect_error([&] { infer::fill_mask(*p, {"[MASK]"}, 0); }, {"top-k"});
}

TEST(Decode, FollowsHuggingFaceSlowTokenizer) {
  infer::LoadOptions lo;
  lo.weights = false;
  auto p = infer::Pipeline::load(model_dir("case1"), lo);
  const auto& tok = p->tokenizer();
  // [CLS] hello , world ! [SEP]
  EXPECT_EQ(infer::decode(tok, {2, 65, 10, 66, 5, 3}, false, true), "[CLS] hello, world! [SEP]");
  EXPECT_EQ(infer::decode(tok, {2, 65, 10, 66, 5, 3}, true, true), "hello, world!");
  EXPECT_EQ(infer::decode(tok, {2, 65, 10, 66, 5, 3}, true, false), "hello , world !");
  // run ##ing un ' s: "##" pieces join, " ' " closes up
  EXPECT_EQ(infer::decode(tok, {69, 83, 67, 7, 39}, true, true), "runing un's");
  EXPECT_EQ(infer::decode(tok, {83}, false, true), "##ing");
  EXPECT_EQ(infer::decode(tok, {98, 99, 16}, false, true), "今 天 。");
}

// ---- classify ----

TEST(Classify, BatchedLabelsEqualTheHeadOnOneTextForwards) {
  const nlohmann::json labels = {{"id2label", {{"0", "neg"}, {"1", "neutral"}, {"2", "pos"}}},
                                 {"label2id", {{"neg", 0}, {"neutral", 1}, {"pos", 2}}}};
  const std::string dir = classifier_dir("cls3", 3, labels);
  auto p = infer::Pipeline::load(dir);
  ASSERT_NE(p->classifier(), nullptr);
  EXPECT_FALSE(p->has_mlm_head());
  EXPECT_EQ(p->classifier()->function, "softmax");
  const auto out = p->classify(kTexts, 4);
  ASSERT_EQ(out.size(), kTexts.size());
  const int64_t H = 64;
  const io::SafeTensors head(dir + "/model.safetensors");
  struct {
    std::vector<float> dense_w, dense_b, out_w, out_b;
  } c{head.f32("classifier.dense.weight", {H, H}), head.f32("classifier.dense.bias", {H}),
      head.f32("classifier.out_proj.weight", {3, H}), head.f32("classifier.out_proj.bias", {3})};
  std::set<std::string> seen;
  for (size_t i = 0; i < kTexts.size(); ++i) {
    const Single s = single_forward(*p, kTexts[i]);
    std::vector<double> x(H), z(3);
    for (int64_t o = 0; o < H; ++o) {
      double v = c.dense_b[o];
      for (int64_t k = 0; k < H; ++k) v += double(c.dense_w[o * H + k]) * s.hidden[k];
      x[o] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    }
    double sum = 0;
    for (int64_t o = 0; o < 3; ++o) {
      double v = c.out_b[o];
      for (int64_t k = 0; k < H; ++k) v += double(c.out_w[o * H + k]) * x[k];
      sum += z[o] = std::exp(v);
    }
    const size_t best = std::max_element(z.begin(), z.end()) - z.begin();
    ASSERT_EQ(out[i].scores.size(), 3u);
    for (size_t o = 0; o < 3; ++o) EXPECT_NEAR(out[i].scores[o], z[o] / sum, 1e-5) << "text " << i;
    EXPECT_EQ(out[i].label_id, static_cast<int64_t>(best));
    EXPECT_EQ(out[i].label, std::vector<std::string>({"neg", "neutral", "pos"})[best]);
    EXPECT_DOUBLE_EQ(out[i].score, out[i].scores[best]);
    seen.insert(out[i].label);
  }
  // The encoder of this checkpoint is case1's: its embeddings equal those of the MLM checkpoint.
  auto mlm = infer::Pipeline::load(model_dir("case1"));
  EXPECT_EQ(p->embed({kTexts[2]}, {})[0], mlm->embed({kTexts[2]}, {})[0]);
  expect_error([&] { infer::fill_mask(*p, {"[MASK]"}); }, {"no masked-LM head"});
}

// head_logits_encoded gives a per-sequence head's logits too (fine-tuning's predictions read every
// head through it), in length-sorted batches or, set_input_order, in input order: the same logits.
TEST(Classify, HeadLogitsPerSequenceEqualClassifyInEitherBatchOrder) {
  auto p = infer::Pipeline::load(classifier_dir("cls3", 3, nlohmann::json::object()));
  const auto encodings = p->encode(kTexts);
  const auto classes = p->classify_encoded(encodings, 3);
  const auto sorted = p->head_logits_encoded(encodings, 3);
  p->set_input_order(true);
  const auto ordered = p->head_logits_encoded(encodings, 3);
  ASSERT_EQ(sorted.size(), kTexts.size());
  for (size_t i = 0; i < kTexts.size(); ++i) {
    ASSERT_EQ(sorted[i].size(), 3u);
    for (size_t o = 0; o < 3; ++o) {
      EXPECT_NEAR(sorted[i][o], classes[i].logits[o], 1e-5) << "text " << i;
      EXPECT_NEAR(ordered[i][o], classes[i].logits[o], 1e-5) << "text " << i;
    }
  }
  auto mlm = infer::Pipeline::load(model_dir("case1"));
  expect_error([&] { mlm->head_logits_encoded(encodings, 3); }, {"config.json", "no task head"});
}

TEST(Classify, OneLabelIsSigmoidAndDefaultLabelsAreNumbered) {
  auto p = infer::Pipeline::load(classifier_dir("cls1", 1, nlohmann::json::object()));
  const auto out = p->classify({"hello"});
  ASSERT_EQ(out[0].scores.size(), 1u);
  EXPECT_EQ(out[0].label, "LABEL_0");
  EXPECT_GT(out[0].score, 0.0);
  EXPECT_LT(out[0].score, 1.0);
  auto multi = infer::Pipeline::load(classifier_dir("multi", 2, {{"problem_type", "multi_label_classification"}}));
  EXPECT_EQ(multi->classifier()->function, "sigmoid");
}

TEST(Classify, RegressionScoresAreRawAndTheFunctionCanBeChosen) {
  // One label: sigmoid by default (transformers' pipeline); a regression head gives its raw score.
  const auto squashed = infer::Pipeline::load(classifier_dir("one", 1, nlohmann::json::object()))->classify(kTexts);
  auto reg = infer::Pipeline::load(
      classifier_dir("reg", 1, {{"problem_type", "regression"}, {"id2label", {{"0", "LABEL_0"}}}}));
  EXPECT_EQ(reg->classifier()->function, "none");
  const auto raw = reg->classify(kTexts);
  for (size_t i = 0; i < kTexts.size(); ++i) {
    EXPECT_NEAR(1 / (1 + std::exp(-raw[i].score)), squashed[i].score, 1e-12) << "text " << i;
  }
  // --function none on a three-label head: the logits, whose softmax is the default's scores.
  const auto soft = infer::Pipeline::load(classifier_dir("cls3", 3, nlohmann::json::object()))->classify(kTexts);
  infer::LoadOptions lo;
  lo.classify_function = "none";
  const auto logits = infer::Pipeline::load(classifier_dir("cls3", 3, nlohmann::json::object()), lo)->classify(kTexts);
  for (size_t i = 0; i < kTexts.size(); ++i) {
    double sum = 0;
    for (double z : logits[i].scores) sum += std::exp(z);
    for (size_t o = 0; o < 3; ++o) EXPECT_NEAR(std::exp(logits[i].scores[o]) / sum, soft[i].scores[o], 1e-9);
    EXPECT_EQ(logits[i].label_id, soft[i].label_id);
  }
  lo.classify_function = "tanh";
  expect_error([&] { infer::Pipeline::load(classifier_dir("cls3", 3, nlohmann::json::object()), lo); },
               {"--function tanh", "auto, softmax, sigmoid or none"});
}

TEST(Classify, PairsAreEncodedWithTokenTypesAndBatchedLikeOneByOne) {
  auto p = infer::Pipeline::load(classifier_dir("cls3", 3, nlohmann::json::object()));
  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"hello, world!", "ok"}, {"今天天气非常好。", "the quick brown fox"}, {"ok", "ok"}, {"a b c d e f g", "我们"}};
  const auto encodings = p->encode_pairs(pairs);
  const auto batched = p->classify_pairs(pairs, 3);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const text::Encoding want = p->tokenizer().encode_pair(pairs[i].first, pairs[i].second);
    EXPECT_EQ(encodings[i].input_ids, want.input_ids);
    EXPECT_EQ(encodings[i].token_type_ids, want.token_type_ids);
    EXPECT_EQ(encodings[i].token_type_ids.back(), 1) << "the second text has token type 1";
    const auto alone = p->classify_pairs({pairs[i]}, 1)[0];
    for (size_t o = 0; o < 3; ++o) EXPECT_NEAR(batched[i].scores[o], alone.scores[o], 1e-5) << "pair " << i;
  }
  // The second text matters: (a, b) is not classified as a alone.
  const auto first_only = p->classify(std::vector<std::string>{pairs[1].first})[0];
  EXPECT_GT(std::abs(first_only.scores[0] - batched[1].scores[0]), 1e-6);
}

TEST(Classify, Errors) {
  auto mlm = infer::Pipeline::load(model_dir("case1"));
  expect_error([&] { mlm->classify({"hello"}); }, {"no sequence-classification head", "classifier.out_proj"});
  expect_error([&] { infer::Pipeline::load(classifier_dir("mismatch", 3, {{"id2label", {{"0", "a"}, {"1", "b"}}}})); },
               {"config.json: num_labels 2 does not match the checkpoint", "classifier.out_proj.weight is [3, 64]"});
  expect_error([&] { infer::Pipeline::load(classifier_dir("extra", 2, nlohmann::json::object(), true)); },
               {"unexpected tensor classifier.extra"});
}

// ---- input lines ----

TEST(LineReader, TextJsonlPairsAndErrorsWithLineNumbers) {
  std::istringstream in("plain text\r\n{\"text\": \"from json\"}\n\n  {\"text\": 3}\n");
  infer::LineReader r(in, "in.txt");
  std::string s;
  ASSERT_TRUE(r.next_text(&s));
  EXPECT_EQ(s, "plain text");
  ASSERT_TRUE(r.next_text(&s));
  EXPECT_EQ(s, "from json");
  ASSERT_TRUE(r.next_text(&s));
  EXPECT_EQ(s, "");
  expect_error([&] { r.next_text(&s); }, {"in.txt:4: no \"text\" string"});

  std::istringstream bad("ok\n{\"text\": \"x\"\n");
  infer::LineReader rb(bad, "<stdin>");
  ASSERT_TRUE(rb.next_text(&s));
  expect_error([&] { rb.next_text(&s); }, {"<stdin>:2: not valid JSON"});

  std::istringstream plain("{not json}\n");
  infer::LineReader rp(plain, "x", infer::InputFormat::text);
  ASSERT_TRUE(rp.next_text(&s));
  EXPECT_EQ(s, "{not json}");

  std::istringstream pairs("a\tb\r\n{\"a\": \"x\", \"b\": \"y\"}\n\nno tab\n");
  infer::LineReader rq(pairs, "pairs", infer::InputFormat::jsonl);
  std::pair<std::string, std::string> pr;
  expect_error([&] { rq.next_pair(&pr); }, {"pairs:1: not valid JSON"});
  ASSERT_TRUE(rq.next_pair(&pr));
  EXPECT_EQ(pr, (std::pair<std::string, std::string>{"x", "y"}));
  expect_error([&] { rq.next_pair(&pr); }, {"pairs:4: not valid JSON"});  // the blank line 3 is skipped

  std::istringstream tabs("a\tb\r\na\tb\tc\n");
  infer::LineReader rt(tabs, "t");
  ASSERT_TRUE(rt.next_pair(&pr));
  EXPECT_EQ(pr, (std::pair<std::string, std::string>{"a", "b"}));
  expect_error([&] { rt.next_pair(&pr); }, {"t:2: more than one tab"});
  EXPECT_FALSE(rt.next_pair(&pr));
}

TEST(Output, EmbeddingJsonIsShortestFloats) {
  EXPECT_EQ(infer::embedding_json({0.1f, -2.0f, 1e-8f}), "{\"embedding\": [0.1, -2, 1e-08]}");
  EXPECT_EQ(infer::json_number(NAN), "null");
  EXPECT_EQ(nlohmann::json::parse(infer::embedding_json({0.3f}))["embedding"][0].get<float>(), 0.3f);
}

}  // namespace
