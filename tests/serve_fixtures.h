// Model directories for the serve tests (tests/infer/pipeline_test.cc, tests/cli/serve_test.cc): the roformer-hf fixture cases
// with the fixture's tokenizer files, and RoFormerForSequenceClassification checkpoints built from
// case1's encoder plus a seeded random head, all under a per-process temp directory.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "temp_files.h"

namespace serve_fixtures {

namespace fs = std::filesystem;
inline const std::string kFixtures = ROFORMER_FIXTURES;

// test_files::temp_dir() without its trailing '/' (call sites here append "/name").
inline std::string temp_dir() {
  const std::string d = test_files::temp_dir();
  return d.substr(0, d.size() - 1);
}

// A model directory: a fixture case's config.json and model.safetensors with the tokenizer files.
inline std::string model_dir(const std::string& name, const std::string& fixture_case = "case1_mlm_basic") {
  const std::string dir = temp_dir() + "/" + name;
  if (fs::exists(dir)) return dir;
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(kFixtures + "/" + fixture_case + "/" + f, dir + "/" + f);
  }
  for (const char* f : {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}) {
    fs::copy_file(kFixtures + "/tokenizer/" + f, dir + "/" + f);
  }
  return dir;
}

template <class F>
void expect_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning " << fragments.front();
  } catch (const std::exception& e) {
    for (const auto& s : fragments) {
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nlacks: " << s;
    }
  }
}

// A RoFormerForSequenceClassification checkpoint: case1's encoder plus a random head of `labels`
// rows; config.json says num_labels = labels unless config_extra gives num_labels or id2label.
inline std::string classifier_dir(const std::string& name, int64_t labels, const nlohmann::json& config_extra,
                                  bool extra_tensor = false) {
  const std::string dir = temp_dir() + "/" + name;
  fs::create_directories(dir);
  for (const char* f : {"vocab.txt", "tokenizer_config.json", "special_tokens_map.json"}) {
    fs::copy_file(kFixtures + "/tokenizer/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  }
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(kFixtures + "/case1_mlm_basic/config.json"));
  cfg["architectures"] = {"RoFormerForSequenceClassification"};
  cfg["num_labels"] = labels;  // as transformers' save_pretrained writes it (its default is 2)
  cfg.update(config_extra);
  if (config_extra.contains("id2label") && !config_extra.contains("num_labels")) cfg.erase("num_labels");
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  const io::SafeTensors full(kFixtures + "/case1_mlm_basic/model.safetensors");
  std::vector<io::TensorView> views;
  for (const auto& [n, t] : full.tensors()) {
    if (n.rfind("roformer.", 0) == 0) views.push_back({n, t.dtype, t.shape, t.data});
  }
  std::vector<std::vector<float>> keep;
  keep.reserve(5);
  std::mt19937 rng(static_cast<uint32_t>(labels * 7 + 1));
  std::normal_distribution<float> normal(0.0f, 0.3f);
  const int64_t H = 64;
  auto add = [&](const std::string& n, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    keep.emplace_back(count);
    for (float& v : keep.back()) v = normal(rng);
    views.push_back({n, io::DType::F32, shape, keep.back().data()});
  };
  add("classifier.dense.weight", {H, H});
  add("classifier.dense.bias", {H});
  add("classifier.out_proj.weight", {labels, H});
  add("classifier.out_proj.bias", {labels});
  if (extra_tensor) add("classifier.extra", {2});
  io::write_file_atomic(dir + "/model.safetensors", io::safetensors_bytes(views));
  return dir;
}

}  // namespace serve_fixtures
