// Pooling modes and sentence-transformers folders (src/infer/sentence.h): each mode against its
// definition on a small hidden-state matrix, a folder's modules applied by Pipeline::embed, and one
// error naming the file for each module it cannot run. tests/hf/sentence_transformers_vs_hf.py
// compares whole folders with sentence-transformers itself.
#include "infer/sentence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "infer/pipeline.h"
#include "io/safetensors.h"
#include "serve_fixtures.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using serve_fixtures::expect_error;
using serve_fixtures::model_dir;

// T = 4 tokens of H = 3, the last one padding (keep 0) and the second left out (a prompt's).
const std::vector<float> kH = {1, -2, 3, 4, 5, -6, -7, 8, 9, 100, 100, 100};
const std::vector<char> kKeep = {1, 0, 1, 0};

std::vector<double> pool(infer::Pooling mode) {
  std::vector<double> out;
  infer::pool_tokens(mode, kH.data(), 4, 3, kKeep, nullptr, out);
  return out;
}

TEST(SentencePooling, EachModeIsItsDefinitionOverTheKeptTokens) {
  // Kept: tokens 0 and 2 (positions 1 and 3 in weightedmean's 1-based weights).
  EXPECT_EQ(pool(infer::Pooling::cls), (std::vector<double>{1, -2, 3}));
  EXPECT_EQ(pool(infer::Pooling::mean), (std::vector<double>{(1 - 7) / 2.0, (-2 + 8) / 2.0, (3 + 9) / 2.0}));
  EXPECT_EQ(pool(infer::Pooling::max), (std::vector<double>{1, 8, 9}));
  const double r2 = std::sqrt(2.0);
  const std::vector<double> sqrt_len = pool(infer::Pooling::mean_sqrt_len);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(sqrt_len[i], (kH[i] + kH[6 + i]) / r2);
  const std::vector<double> weighted = pool(infer::Pooling::weightedmean);
  for (int i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(weighted[i], (1 * kH[i] + 3 * kH[6 + i]) / 4.0);
  EXPECT_EQ(pool(infer::Pooling::lasttoken), (std::vector<double>{-7, 8, 9}));
  // Nothing kept: sentence-transformers' values (zeros; max's -1e9; cls is the first token regardless).
  std::vector<double> none;
  infer::pool_tokens(infer::Pooling::mean, kH.data(), 4, 3, {0, 0, 0, 0}, nullptr, none);
  EXPECT_EQ(none, (std::vector<double>{0, 0, 0}));
  EXPECT_THROW(pool(infer::Pooling::automatic), std::logic_error);
  for (const std::string& name : infer::pooling_names()) EXPECT_EQ(infer::pooling_name(infer::parse_pooling(name)), name);
  EXPECT_THROW(infer::parse_pooling("splade"), std::invalid_argument);
}

// case1 (hidden 64) as a sentence-transformers folder: modules.json, 1_Pooling and what `edit` adds.
std::string folder(const std::string& name, const json& modules, const json& pooling) {
  const std::string dir = serve_fixtures::temp_dir() + "/" + name;
  fs::remove_all(dir);
  fs::copy(model_dir("st_base"), dir);
  std::ofstream(dir + "/modules.json") << modules.dump();
  fs::create_directories(dir + "/1_Pooling");
  std::ofstream(dir + "/1_Pooling/config.json") << pooling.dump();
  return dir;
}

const json kModules = json::array({{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                                   {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}}});

TEST(SentenceFolder, PoolingDenseAndNormalizeRunAfterTheEncoder) {
  const json pooling = {{"word_embedding_dimension", 64}, {"pooling_mode_mean_tokens", true}, {"pooling_mode_max_tokens", true}};
  json modules = kModules;
  modules.push_back({{"idx", 2}, {"name", "2"}, {"path", "2_Dense"}, {"type", "sentence_transformers.models.Dense"}});
  modules.push_back({{"idx", 3}, {"name", "3"}, {"path", "3_Normalize"}, {"type", "sentence_transformers.models.Normalize"}});
  const std::string dir = folder("st_dense", modules, pooling);
  fs::create_directories(dir + "/2_Dense");
  std::ofstream(dir + "/2_Dense/config.json")
      << json{{"in_features", 128}, {"out_features", 5}, {"bias", true},
              {"activation_function", "torch.nn.modules.activation.Tanh"}}.dump();
  std::vector<float> w(5 * 128), b(5);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37 * static_cast<double>(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * static_cast<float>(i);
  std::ofstream(dir + "/2_Dense/model.safetensors", std::ios::binary)
      << io::safetensors_bytes({{"linear.weight", io::DType::F32, {5, 128}, w.data()},
                                {"linear.bias", io::DType::F32, {5}, b.data()}});

  auto p = infer::Pipeline::load(dir);
  ASSERT_TRUE(p->sentence());
  EXPECT_EQ(p->pooling_name(infer::Pooling::automatic), "max+mean");
  EXPECT_EQ(p->embedding_size(infer::Pooling::automatic), 5);
  const std::vector<std::string> texts = {"hello world", "a b c"};
  const auto got = p->embed(texts, {});
  const auto mean = p->embed(texts, {.pooling = infer::Pooling::mean});  // an explicit mode: no Dense
  const auto max = p->embed(texts, {.pooling = infer::Pooling::max});
  ASSERT_EQ(mean[0].size(), 64u);
  for (size_t t = 0; t < texts.size(); ++t) {
    std::vector<double> y(5);
    double norm = 0;
    for (int o = 0; o < 5; ++o) {
      double s = b[o];
      for (int i = 0; i < 64; ++i) s += w[o * 128 + i] * max[t][i] + w[o * 128 + 64 + i] * mean[t][i];
      y[o] = std::tanh(s);
      norm += y[o] * y[o];
    }
    ASSERT_EQ(got[t].size(), 5u);
    for (int o = 0; o < 5; ++o) EXPECT_NEAR(got[t][o], y[o] / std::sqrt(norm), 1e-5);
  }
}

TEST(SentenceFolder, PromptsComeFromConfigSentenceTransformers) {
  const std::string dir = folder("st_prompts", kModules, {{"pooling_mode_cls_token", true}, {"include_prompt", false}});
  std::ofstream(dir + "/config_sentence_transformers.json")
      << json{{"prompts", {{"query", "query: "}}}, {"default_prompt_name", "query"}}.dump();
  auto p = infer::Pipeline::load(dir);
  EXPECT_EQ(p->prompt(""), "query: ");
  EXPECT_EQ(p->prompt("query"), "query: ");
  EXPECT_EQ(p->prompt_tokens("query: "), static_cast<int64_t>(p->tokenizer().encode("query: ").size()) - 1);
  expect_error([&] { p->prompt("doc"); }, {"prompt_name 'doc' is not a prompt of", "config_sentence_transformers.json", "(query)"});
}

TEST(SentenceFolder, WhatItCannotRunIsOneErrorNamingTheFile) {
  expect_error([] { infer::Pipeline::load(folder("st_nomode", kModules, json::object())); },
               {"1_Pooling/config.json: no pooling_mode_* is true"});
  expect_error([] { infer::Pipeline::load(folder("st_width", kModules, {{"word_embedding_dimension", 8}, {"pooling_mode_cls_token", true}})); },
               {"1_Pooling/config.json: word_embedding_dimension 8", "hidden_size is 64"});
  json odd = kModules;
  odd.push_back({{"path", "2_X"}, {"type", "sentence_transformers.models.LSTM"}});
  expect_error([&] { infer::Pipeline::load(folder("st_lstm", odd, {{"pooling_mode_cls_token", true}})); },
               {"modules.json: module 2: a LSTM module"});
  json dense = kModules;
  dense.push_back({{"path", "2_Dense"}, {"type", "sentence_transformers.models.Dense"}});
  const std::string dir = folder("st_act", dense, {{"pooling_mode_cls_token", true}});
  fs::create_directories(dir + "/2_Dense");
  std::ofstream(dir + "/2_Dense/config.json")
      << json{{"in_features", 64}, {"out_features", 2}, {"activation_function", "torch.nn.modules.activation.Softplus"}}.dump();
  expect_error([&] { infer::Pipeline::load(dir); }, {"2_Dense/config.json: activation_function", "Softplus"});
  std::ofstream(dir + "/2_Dense/config.json") << json{{"in_features", 64}, {"out_features", 2}}.dump();
  expect_error([&] { infer::Pipeline::load(dir); }, {"2_Dense"});  // no weights
  const json first_pooling = json::array({kModules[1], kModules[0]});
  expect_error([&] { infer::Pipeline::load(folder("st_order", first_pooling, {{"pooling_mode_cls_token", true}})); },
               {"module 0 must be the Transformer"});
}

}  // namespace
