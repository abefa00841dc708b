// The one loader (src/load/model_dir.h): what each Request field does to the model that comes back,
// and that a directory's files are checked against each other with errors naming the file and field.
#include "load/model_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/tiny_models.h"
#include "serve_fixtures.h"

namespace {

namespace fs = std::filesystem;
using serve_fixtures::classifier_dir;
using serve_fixtures::expect_error;
using serve_fixtures::model_dir;

// A copy of case1's directory whose config.json is changed by `edit`.
std::string edited_dir(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = serve_fixtures::temp_dir() + "/" + name;
  fs::remove_all(dir);
  fs::copy(model_dir("load_case1"), dir);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  edit(cfg);
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return dir;
}

std::vector<float> stored(const std::string& dir, const std::string& name, const std::vector<int64_t>& shape) {
  return io::SafeTensors(dir + "/model.safetensors").f32(name, shape);
}

TEST(LoadRoformer, ReadsConfigWeightsAndTokenizerOfADirectory) {
  const std::string dir = model_dir("load_case1");
  const load::Model m = load::roformer(dir);
  ASSERT_TRUE(m.model && m.tokenizer);
  EXPECT_EQ(m.dir, dir);
  EXPECT_EQ(m.config.vocab_size, 129);
  EXPECT_EQ(m.tokenizer->kind(), text::TokenizerKind::wordpiece);
  EXPECT_EQ(&m.wordpiece("test"), m.tokenizer.get());
  EXPECT_FALSE(m.int8_checkpoint);
  EXPECT_TRUE(m.model->has_mlm_head());
  EXPECT_FALSE(m.model->packed());
  EXPECT_EQ(m.model->keep(), model::Keep::backward);  // ready to train
  const std::vector<float> word = stored(dir, "roformer.embeddings.word_embeddings.weight", {129, 64});
  EXPECT_TRUE(std::equal(word.begin(), word.end(), m.model->p.emb.word));
}

TEST(LoadRoformer, WeightsAndTokenizerAreReadOnlyWhenAskedFor) {
  load::Request r;
  r.weights = false;
  const load::Model config_and_tokenizer = load::roformer(model_dir("load_case1"), r);
  EXPECT_FALSE(config_and_tokenizer.model);
  EXPECT_TRUE(config_and_tokenizer.tokenizer);
  r = {};
  r.tokenizer = false;
  const load::Model weights_only = load::roformer(model_dir("load_case1"), r);
  EXPECT_TRUE(weights_only.model);
  EXPECT_FALSE(weights_only.tokenizer);
  expect_error([&] { weights_only.wordpiece("the encoder commands"); }, {"a WordPiece tokenizer (vocab.txt) is what the encoder commands read"});
  r.mlm_head = false;
  EXPECT_FALSE(load::roformer(model_dir("load_case1"), r).model->has_mlm_head());
}

TEST(LoadRoformer, InferencePacksAndKeepsOutputsOnly) {
  load::Request r;
  r.inference = model::LinearOptions{.quantize = model::Quantize::int8, .gemm = model::Gemm::automatic};
  const load::Model m = load::roformer(model_dir("load_case1"), r);
  EXPECT_TRUE(m.model->packed());
  EXPECT_EQ(m.model->packed_precision(), ops::Precision::int8);
  EXPECT_EQ(m.model->keep(), model::Keep::outputs);
}

TEST(LoadRoformer, ASequenceClassifierRunsItsOwnHead) {
  const std::string dir = classifier_dir("load_cls3", 3, {{"id2label", {{"0", "a"}, {"1", "b"}, {"2", "c"}}}});
  const load::Model m = load::roformer(dir);
  EXPECT_EQ(m.config.labels, std::vector<std::string>({"a", "b", "c"}));
  EXPECT_FALSE(m.model->has_mlm_head());
  const std::vector<float> out = stored(dir, "classifier.out_proj.weight", {3, 64});
  EXPECT_TRUE(std::equal(out.begin(), out.end(), m.model->p.task[2]));
  const int64_t ids[] = {2, 65, 3};
  m.model->forward({.ids = ids, .B = 1, .T = 3});
  ASSERT_NE(m.model->head_logits(), nullptr);
  // classifier false: the head is neither built nor read.
  load::Request r;
  r.classifier = false;
  const load::Model encoder = load::roformer(dir, r);
  EXPECT_TRUE(encoder.config.labels.empty());
  encoder.model->forward({.ids = ids, .B = 1, .T = 3});
  EXPECT_EQ(encoder.model->head_logits(), nullptr);
}

TEST(LoadRoformer, StoredHeadGivesTheLabelsAConfigDoesNotDeclare) {
  // An MLM config (no labels) over weights that hold a two-label head: the head is adopted.
  const std::string dir = classifier_dir("load_undeclared", 2, {{"architectures", {"RoFormerModel"}}});
  const load::Model m = load::roformer(dir);
  EXPECT_EQ(m.config.labels, std::vector<std::string>({"LABEL_0", "LABEL_1"}));
  // A declared head must match the stored one (as transformers: num_labels defaults to 2).
  expect_error([&] { load::roformer(classifier_dir("load_cls3_two", 3, {{"num_labels", 2}})); },
               {"config.json: num_labels 2 does not match the checkpoint", "classifier.out_proj.weight"});
}

TEST(LoadRoformer, InitSeedOptionalAndConfigureMakeANewHead) {
  const std::string dir = model_dir("load_case1");
  load::Request r;
  r.configure = [](model::RoFormerConfig& c) {
    c.set_head("text-classification");
    c.labels = {"no", "yes"};
    c.problem_type = model::ProblemType::single_label_classification;
  };
  r.init_seed = 5;
  r.optional = {"classifier."};
  r.mlm_head = false;
  r.skip = {"cls."};
  const load::Model m = load::roformer(dir, r);
  model::RoFormerConfig c = m.config;
  model::RoFormer<float> fresh(c);
  fresh.init_weights(5);
  const size_t H = 64;
  EXPECT_TRUE(std::equal(fresh.p.task[0], fresh.p.task[0] + H * H, m.model->p.task[0]));
  const std::vector<float> word = stored(dir, "roformer.embeddings.word_embeddings.weight", {129, 64});
  EXPECT_TRUE(std::equal(word.begin(), word.end(), m.model->p.emb.word));
  // Without optional the head must be stored.
  r.optional.clear();
  expect_error([&] { load::roformer(dir, r); }, {"classifier."});
}

TEST(LoadRoformer, PositionsExtendRotaryModelsOnly) {
  load::Request r;
  r.tokenizer = false;
  r.positions = 200;
  EXPECT_EQ(load::roformer(model_dir("load_case1"), r).config.max_position_embeddings, 200);
  r.positions = 10;  // shorter than the config's: unchanged
  EXPECT_EQ(load::roformer(model_dir("load_case1"), r).config.max_position_embeddings, 64);
  r.positions = 200;
  r.configure = [](model::RoFormerConfig& c) { c.rope_scaling = "linear:4"; };  // the factor gives the length
  EXPECT_EQ(load::roformer(model_dir("load_case1"), r).config.max_position_embeddings, 64);
}

TEST(LoadRoformer, FilesAreCheckedAgainstEachOther) {
  const std::string missing = serve_fixtures::temp_dir() + "/load_no_such_dir";
  expect_error([&] { load::roformer(missing); }, {missing + ": no such model directory"});
  const std::string no_config = serve_fixtures::temp_dir() + "/load_no_config";
  fs::create_directories(no_config);
  expect_error([&] { load::roformer(no_config); }, {no_config + ": no config.json"});
  // vocab.txt has 129 lines: a vocabulary of 100 cannot hold its ids.
  const std::string small = edited_dir("load_small_vocab", [](nlohmann::json& c) { c["vocab_size"] = 100; });
  expect_error([&] { load::roformer(small); }, {small + ": the wordpiece tokenizer has 129 tokens", "vocab_size 100"});
  const std::string layers = edited_dir("load_layers", [](nlohmann::json& c) { c["num_hidden_layers"] = 3; });
  expect_error([&] { load::roformer(layers); }, {layers + "/config.json: num_hidden_layers 3 does not match"});
  const std::string bad = edited_dir("load_bad_config", [](nlohmann::json& c) { c["num_attention_heads"] = 5; });
  expect_error([&] { load::roformer(bad); }, {bad + "/config.json"});
}

// A copy of case1's directory with vocab.txt's lines changed by `edit` and tokenizer_config.json
// replaced by `tokenizer_config` (no special_tokens_map.json, so that only these files speak).
std::string vocab_dir(const std::string& name, const std::function<void(std::string&)>& edit,
                      const std::string& tokenizer_config) {
  const std::string dir = edited_dir(name, [](nlohmann::json&) {});
  std::ifstream in(dir + "/vocab.txt");
  std::string text, line;
  while (std::getline(in, line)) {
    edit(line);
    text += line + "\n";
  }
  std::ofstream(dir + "/vocab.txt") << text;
  std::ofstream(dir + "/tokenizer_config.json") << tokenizer_config;
  fs::remove(dir + "/special_tokens_map.json");
  return dir;
}

// A tokenizer that cannot serve its vocabulary answers [UNK] where it should not: refused at load,
// naming the files and what to change.
TEST(LoadRoformer, TheTokenizerMustServeItsVocabulary) {
  const std::string uncased = R"({"do_lower_case": true})", cased = R"({"do_lower_case": false})";
  // The special tokens every encoding uses are lines of vocab.txt (or declared added tokens).
  const std::string no_mask = vocab_dir("load_no_mask", [](std::string& l) { if (l == "[MASK]") l = "[MASK2]"; }, uncased);
  expect_error([&] { load::roformer(no_mask); },
               {no_mask + ": the tokenizer's mask_token '[MASK]' is not a line of vocab.txt", "another model"});
  // A cased vocabulary (capital letters in a fifth of its pieces) behind an uncased tokenizer: every
  // capitalised piece is unreachable.
  auto capitals = [](std::string& l) { if (l.size() == 1 && l[0] >= 'a' && l[0] <= 'z') l[0] = static_cast<char>(l[0] - 'a' + 'A'); };
  const std::string wrong_case = vocab_dir("load_wrong_case", capitals, uncased);
  expect_error([&] { load::roformer(wrong_case); },
               {wrong_case + ": 26 of vocab.txt's", "'A', 'B', 'C'", "do_lower_case true", "needs do_lower_case false in a tokenizer_config.json"});
  // The same vocabulary with a cased tokenizer loads, and so does the fixture with its own files.
  EXPECT_NO_THROW(load::roformer(vocab_dir("load_right_case", capitals, cased)));
  EXPECT_NO_THROW(load::roformer(model_dir("load_case1")));
}

// Reading stays bounded: a FIFO would block the reader, a device never end, a huge config.json fill
// memory; each is refused by name, at once.
TEST(LoadRoformer, NonRegularAndOversizedFilesAreRefused) {
  const std::string fifo = edited_dir("load_fifo", [](nlohmann::json&) {});
  fs::remove(fifo + "/config.json");
  ASSERT_EQ(::mkfifo((fifo + "/config.json").c_str(), 0600), 0);
  expect_error([&] { load::roformer(fifo); }, {fifo + "/config.json: not a regular file"});
  const std::string device = edited_dir("load_device", [](nlohmann::json&) {});
  fs::remove(device + "/vocab.txt");
  fs::create_symlink("/dev/zero", device + "/vocab.txt");
  expect_error([&] { load::roformer(device); }, {device + "/vocab.txt: not a regular file"});
  const std::string huge = edited_dir("load_huge_config", [](nlohmann::json&) {});
  fs::resize_file(huge + "/config.json", (size_t{64} << 20) + 1);  // sparse: no 64 MiB written
  expect_error([&] { load::roformer(huge); }, {huge + "/config.json: more than 67108864 bytes"});
}

TEST(LoadRoformer, AHuggingFaceTokenizerJsonBesideVocabTxtIsNotTakenForAByteTokenizer) {
  const std::string dir = edited_dir("load_fast_tokenizer", [](nlohmann::json&) {});
  std::ofstream(dir + "/tokenizer.json") << R"({"version": "1.0", "model": {"type": "WordPiece"}})";
  EXPECT_EQ(load::roformer(dir).tokenizer->kind(), text::TokenizerKind::wordpiece);
}

// Each stack's config is checked against its tensors before the arena is allocated, naming the
// stack and the field.
TEST(LoadSeq2Seq, ChecksEachStacksConfigAgainstTheWeights) {
  const model::Seq2SeqConfig cfg = model::Seq2SeqConfig::symmetric(model_testing::tiny_config(13));
  model::Seq2Seq<float> m(cfg);
  m.init_weights(3);
  const std::string dir = serve_fixtures::temp_dir() + "/load_seq2seq";
  fs::create_directories(dir);
  model::save_seq2seq(dir, m);
  load::Request r;
  r.tokenizer = false;
  EXPECT_EQ(load::seq2seq(dir, r).model->params, m.params);
  expect_error([&] { load::seq2seq(dir); }, {dir + ": no spm.model"});
  auto expect_named = [&](const std::function<void(model::Seq2SeqConfig&)>& change, const std::string& what) {
    model::Seq2SeqConfig bad = cfg;
    change(bad);
    std::ofstream(dir + "/config.json") << bad.to_json();
    expect_error([&] { load::seq2seq(dir, r); }, {dir + "/config.json: " + what});
  };
  expect_named([](model::Seq2SeqConfig& c) { c.decoder.num_hidden_layers = 3; }, "decoder: num_hidden_layers 3 does not match");
  expect_named([](model::Seq2SeqConfig& c) { c.encoder.num_hidden_layers = 1; }, "encoder: num_hidden_layers 1 does not match");
  expect_named([](model::Seq2SeqConfig& c) { c.encoder.intermediate_size = 40; }, "encoder: intermediate_size 40 does not match");
  expect_named([](model::Seq2SeqConfig& c) { c.decoder.max_position_embeddings = 4096; },
               "decoder: max_position_embeddings 4096 does not match");
}

}  // namespace
