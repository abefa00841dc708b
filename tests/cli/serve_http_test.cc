// `roformer serve` as a client sees it (the binary is ROFORMER_CLI): the server is started on a free
// loopback port with the case1 fixture directory (and a classifier directory), and its answers are
// held to the command line's: /embed, /v1/embeddings (float and base64) and POST / equal `roformer
// embed`, /predict equals `roformer classify` (raw_scores: the logits under its softmax), /similarity
// equals `roformer similarity` (1e-5); TEI's error statuses and bodies (422, 413, 424, 401, 404, 429);
// /info, /v1/models, /tokenize, /metrics; /translate on an encoder-decoder equals `roformer translate`;
// several models in one server (--model NAME=DIR), each picked by the /models/NAME/ prefix or the
// body's "model" and answering as a server of it alone; and SIGTERM / SIGINT end the server with status 0.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <utility>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "serve_fixtures.h"

namespace {

using namespace serve_fixtures;
using nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// `roformer ARGS < input` → stdout lines as JSON.
std::vector<json> cli(const std::string& args, const std::string& input) {
  static int n = 0;
  const std::string base = temp_dir() + "/http_cli" + std::to_string(n++);
  std::ofstream(base + ".in", std::ios::binary) << input;
  const std::string cmd = std::string(ROFORMER_CLI) + " " + args + " < " + base + ".in > " + base + ".out";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<json> v;
  std::istringstream in(slurp(base + ".out"));
  for (std::string line; std::getline(in, line);) v.push_back(json::parse(line));
  return v;
}

// A running `roformer serve --port 0 ARGS`; the port is read from its "listening on" line.
struct Server {
  pid_t pid = -1;
  int port = 0;
  std::string log;

  explicit Server(const std::string& args) {
    static int n = 0;
    log = temp_dir() + "/server" + std::to_string(n++) + ".log";
    const std::string cmd = std::string("exec ") + ROFORMER_CLI + " serve --port 0 " + args + " 2> " + log;
    pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 600 && port == 0; ++i) {  // up to 60 s on a loaded machine
      std::smatch m;
      const std::string text = slurp(log);
      if (std::regex_search(text, m, listening)) port = std::stoi(m[1]);
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_NE(port, 0) << slurp(log);
  }
  ~Server() {
    if (pid > 0) stop(SIGKILL);
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(60, 0);
    return c;
  }
  // Sends the signal and returns the exit status (-1: killed by a signal).
  int stop(int sig) {
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

struct Reply {
  int status = 0;
  json body;
};

Reply post(const Server& s, const std::string& path, const std::string& body, const httplib::Headers& headers = {}) {
  auto res = s.client().Post(path.c_str(), headers, body, "application/json");
  if (!res) return {0, nullptr};
  return {res->status, json::parse(res->body, nullptr, false)};
}
Reply post(const Server& s, const std::string& path, const json& body) { return post(s, path, body.dump()); }

void expect_close(const json& got, const json& want, double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i].get<double>(), want[i].get<double>(), tol) << i;
}

void expect_error(const Reply& r, int status, const std::string& type, const std::string& fragment) {
  EXPECT_EQ(r.status, status) << r.body;
  ASSERT_TRUE(r.body.is_object()) << r.body;
  EXPECT_EQ(r.body.value("error_type", ""), type) << r.body;
  EXPECT_NE(r.body.value("error", "").find(fragment), std::string::npos) << r.body << " lacks " << fragment;
}

const std::vector<std::string> kTexts = {"hello world", "今天天气非常好。", "a b c d e f", "x"};

std::string lines(const std::vector<std::string>& texts) {
  std::string s;
  for (const auto& t : texts) s += t + "\n";
  return s;
}

std::vector<float> from_base64(const std::string& s) {
  std::string bytes;
  int bits = 0;
  uint32_t acc = 0;
  for (char c : s) {
    const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* p = std::strchr(a, c);
    if (c == '=' || p == nullptr) break;
    acc = (acc << 6) | static_cast<uint32_t>(p - a);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

TEST(ServeHttp, EmbeddingRoutesEqualTheCommandLine) {
  const std::string m = model_dir("http_mlm");
  Server s("--model " + m + " --max-batch-tokens 64");
  const auto want = cli("embed --normalize --model " + m, lines(kTexts));
  const auto raw = cli("embed --model " + m, lines(kTexts));
  ASSERT_EQ(want.size(), kTexts.size());

  Reply r = post(s, "/embed", json{{"inputs", kTexts}});
  ASSERT_EQ(r.status, 200) << r.body;
  for (size_t i = 0; i < kTexts.size(); ++i) expect_close(r.body[i], want[i]["embedding"]);
  r = post(s, "/embed", json{{"inputs", kTexts}, {"normalize", false}});
  for (size_t i = 0; i < kTexts.size(); ++i) expect_close(r.body[i], raw[i]["embedding"]);
  r = post(s, "/embed", json{{"inputs", kTexts[1]}});  // one string
  ASSERT_EQ(r.body.size(), 1u);
  expect_close(r.body[0], want[1]["embedding"]);
  r = post(s, "/", json{{"inputs", kTexts}});  // an MLM model is an embedding model
  for (size_t i = 0; i < kTexts.size(); ++i) expect_close(r.body[i], want[i]["embedding"]);

  r = post(s, "/v1/embeddings", json{{"input", kTexts}, {"model", "m"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["object"], "list");
  EXPECT_EQ(r.body["model"], "m");
  EXPECT_GT(r.body["usage"]["prompt_tokens"].get<int>(), 8);
  EXPECT_EQ(r.body["usage"]["total_tokens"], r.body["usage"]["prompt_tokens"]);
  for (size_t i = 0; i < kTexts.size(); ++i) {
    EXPECT_EQ(r.body["data"][i]["object"], "embedding");
    EXPECT_EQ(r.body["data"][i]["index"], i);
    expect_close(r.body["data"][i]["embedding"], want[i]["embedding"]);
  }
  r = post(s, "/v1/embeddings", json{{"input", kTexts[0]}, {"encoding_format", "base64"}});
  expect_close(json(from_base64(r.body["data"][0]["embedding"].get<std::string>())), want[0]["embedding"]);
  EXPECT_EQ(r.body["model"], "http_mlm");
}

TEST(ServeHttp, PredictAndSimilarityEqualTheCommandLine) {
  const std::string c = classifier_dir("http_cls", 3, json{{"id2label", {{"0", "neg"}, {"1", "neu"}, {"2", "pos"}}}});
  Server s("--model " + c);
  const auto want = cli("classify --model " + c, lines(kTexts));
  auto check = [&](const json& got, const json& w) {  // TEI's [{score, label}] sorted, vs {label, score, probabilities}
    ASSERT_EQ(got.size(), 3u) << got;
    EXPECT_EQ(got[0]["label"], w["label"]);
    EXPECT_GE(got[0]["score"].get<double>(), got[1]["score"].get<double>());
    EXPECT_GE(got[1]["score"].get<double>(), got[2]["score"].get<double>());
    const std::vector<std::string> names = {"neg", "neu", "pos"};
    for (const auto& e : got) {
      const size_t id = std::find(names.begin(), names.end(), e["label"].get<std::string>()) - names.begin();
      ASSERT_LT(id, 3u);
      EXPECT_NEAR(e["score"].get<double>(), w["probabilities"][id].get<double>(), 1e-5);
    }
  };
  Reply r = post(s, "/predict", json{{"inputs", kTexts[0]}});
  ASSERT_EQ(r.status, 200) << r.body;
  check(r.body, want[0]);
  json batch = json::array();
  for (const auto& t : kTexts) batch.push_back(json::array({t}));
  r = post(s, "/predict", json{{"inputs", batch}});
  ASSERT_EQ(r.body.size(), kTexts.size());
  for (size_t i = 0; i < kTexts.size(); ++i) check(r.body[i], want[i]);
  r = post(s, "/predict", json{{"inputs", kTexts[0]}, {"raw_scores", true}});  // logits: their softmax is the score
  ASSERT_EQ(r.body.size(), 3u) << r.body;
  double total = 0;
  for (const auto& e : r.body) total += std::exp(e["score"].get<double>());
  json softmax = r.body;
  for (auto& e : softmax) e["score"] = std::exp(e["score"].get<double>()) / total;
  check(softmax, want[0]);
  r = post(s, "/", json{{"inputs", kTexts[2]}});  // a classifier answers POST / as /predict
  check(r.body, want[2]);
  const auto pair = cli("classify --pairs --model " + c, kTexts[0] + "\t" + kTexts[1] + "\n");
  r = post(s, "/predict", json{{"inputs", {kTexts[0], kTexts[1]}}});
  check(r.body, pair[0]);

  std::string pairs;
  for (size_t i = 1; i < kTexts.size(); ++i) pairs += kTexts[0] + "\t" + kTexts[i] + "\n";
  const auto sims = cli("similarity --model " + c, pairs);
  r = post(s, "/similarity", json{{"inputs", {{"source_sentence", kTexts[0]},
                                              {"sentences", std::vector<std::string>(kTexts.begin() + 1, kTexts.end())}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.body.size(), sims.size());
  for (size_t i = 0; i < sims.size(); ++i) EXPECT_NEAR(r.body[i].get<double>(), sims[i]["similarity"].get<double>(), 1e-5);

  expect_error(post(s, "/info", json::object()), 405, "MethodNotAllowed", "allowed: GET");  // /info is GET
  auto put = s.client().Put("/embed", "{}", "application/json");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 405);
  EXPECT_EQ(put->get_header_value("Allow"), "POST");
  auto info = s.client().Get("/info");
  ASSERT_TRUE(info);
  const json i = json::parse(info->body);
  EXPECT_EQ(i["model_type"]["classifier"]["id2label"]["2"], "pos");
  EXPECT_EQ(i["max_input_length"], 64);
  EXPECT_EQ(s.stop(SIGINT), 0);
}

TEST(ServeHttp, ErrorsAreTeiStatusesAndBodies) {
  const std::string m = model_dir("http_mlm");
  Server s("--model " + m + " --max-client-batch-size 4");
  expect_error(post(s, "/embed", std::string("{\"inputs\": [")), 422, "Validation", "malformed JSON");
  // A number beyond double is malformed JSON too (nlohmann reports it as out_of_range: it was a 500).
  expect_error(post(s, "/embed", std::string("{\"inputs\": \"a\", \"normalize\": 1e999}")), 422, "Validation",
               "malformed JSON");
  expect_error(post(s, "/embed", json{{"inputs", 5}}), 422, "Validation", "`inputs` must be");
  expect_error(post(s, "/embed", json{{"inputs", json::array()}}), 422, "Validation", "`inputs` cannot be empty");
  expect_error(post(s, "/embed", json{{"inputs", {"a", 3}}}), 422, "Validation", "`inputs`[1] must be a string");
  expect_error(post(s, "/embed", json{{"inputs", "a"}, {"normalize", "yes"}}), 422, "Validation", "`normalize`");
  expect_error(post(s, "/v1/embeddings", json{{"inputs", "a"}}), 422, "Validation", "`input` is required");
  expect_error(post(s, "/v1/embeddings", json{{"input", "a"}, {"encoding_format", "hex"}}), 422, "Validation",
               "`encoding_format`");
  expect_error(post(s, "/similarity", json{{"inputs", "a"}}), 422, "Validation", "source_sentence");
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "hello ";
  expect_error(post(s, "/embed", json{{"inputs", long_text}}), 413, "Validation", "must have at most 64 tokens. Given: ");
  // The limit is inclusive: 64 ids on a 64-position model are answered, 65 are refused naming both.
  EXPECT_EQ(post(s, "/embed", json{{"inputs", std::vector<int>(64, 5)}}).status, 200);
  expect_error(post(s, "/embed", json{{"inputs", std::vector<int>(65, 5)}}), 413, "Validation",
               "input 0 must have at most 64 tokens. Given: 65");
  Reply r = post(s, "/embed", json{{"inputs", long_text}, {"truncate", true}});
  EXPECT_EQ(r.status, 200) << r.body;
  expect_error(post(s, "/embed", json{{"inputs", {"a", "b", "c", "d", "e"}}}), 413, "Validation", "batch size 5");
  expect_error(post(s, "/predict", json{{"inputs", "a"}}), 424, "Backend", "not a classifier");
  expect_error(post(s, "/nowhere", json::object()), 404, "NotFound", "/nowhere");

  auto models = s.client().Get("/v1/models");
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "http_mlm");
  r = post(s, "/tokenize", json{{"inputs", "hello"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body[0][0]["text"], "[CLS]");
  EXPECT_EQ(r.body[0][0]["special"], true);
  auto metrics = s.client().Get("/metrics");
  EXPECT_NE(metrics->body.find("roformer_requests_total{model=\"http_mlm\",route=\"/embed\",status=\"422\"} 6"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("roformer_batch_size_count"), std::string::npos);
  // Tokenization times are of requests that passed it: the 64 ids and the one truncated /embed.
  EXPECT_NE(metrics->body.find("roformer_tokenize_seconds_count{model=\"http_mlm\"} 2\n"), std::string::npos) << metrics->body;
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// A run's best/ (or step-NNNNNN/) is served under the run's name, a Hugging Face cache snapshot under
// its repository's id: not "best" or a commit hash.
TEST(ServeHttp, ModelIdsNameTheRunOrTheRepository) {
  const std::string root = serve_fixtures::temp_dir() + "/ids";
  for (const std::string sub : {"sst/best", "hub/models--org--tiny-roformer/snapshots/0123abcd"}) {
    std::filesystem::create_directories(root + "/" + sub);
    for (const auto& f : std::filesystem::directory_iterator(model_dir("http_mlm"))) {
      std::filesystem::copy(f.path(), root + "/" + sub + "/" + f.path().filename().string(),
                            std::filesystem::copy_options::overwrite_existing);
    }
  }
  for (const auto& [sub, id] : {std::pair<std::string, std::string>{"sst/best/", "sst"},
                                {"hub/models--org--tiny-roformer/snapshots/0123abcd", "org/tiny-roformer"}}) {
    Server s("--model " + root + "/" + sub);
    auto models = s.client().Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], id) << sub;
    EXPECT_EQ(json::parse(s.client().Get("/info")->body)["model_id"], id) << sub;
    EXPECT_EQ(s.stop(SIGTERM), 0);
  }
}

// A tiny causal LM (`roformer train`, 3 steps: its text is poor, but it is what a one-model server says).
std::string causal_lm_dir() {
  const std::string dir = temp_dir() + "/http_lm";
  const std::string model = dir + "/run/step-000003";
  if (fs::exists(model + "/model.safetensors")) return model;
  fs::create_directories(dir);
  {
    std::ofstream out(dir + "/text.txt");
    for (int i = 0; i < 100; ++i) out << "In the beginning God created the heaven and the earth, said verse " << i % 17 << ".\n";
  }
  const std::string cmd = std::string(ROFORMER_CLI) + " train --data " + dir + "/text.txt --out " + dir +
                          "/run --layers 1 --hidden 32 --heads 2 --ff 64 --seq 32 --batch 4 --steps 3 --max-positions 64"
                          " --eval-every 0 --sample-tokens 0 --threads 1 > " + dir + "/train.log 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir + "/train.log");
  return model;
}

// Several models in one server (--model repeated): the /models/NAME/ prefix or the body's "model"
// picks one, a request with neither goes to the first, and each answers as a server of it alone
// would; an unknown name is a 404 naming the served ones; /v1/models lists them, /info and /metrics
// are per model (a model label on every series).
TEST(ServeHttp, SeveralModelsInOneServer) {
  const std::string m = model_dir("http_mlm");
  const std::string c = classifier_dir("http_cls", 3, json{{"id2label", {{"0", "neg"}, {"1", "neu"}, {"2", "pos"}}}});
  const std::string lm = causal_lm_dir();
  Server all("--model " + m + " --model cls=" + c + " --model gen=" + lm + " --threads 2");
  Server one_m("--model " + m + " --no-access-log"), one_c("--model " + c + " --no-access-log");
  Server one_lm("--model " + lm + " --no-access-log");
  EXPECT_NE(slurp(all.log).find("http_mlm, cls, gen listening on"), std::string::npos) << slurp(all.log);

  const json texts = kTexts;
  auto same_rows = [](const Reply& got, const Reply& want) {
    ASSERT_EQ(got.status, 200) << got.body;
    ASSERT_EQ(want.status, 200) << want.body;
    ASSERT_EQ(got.body.size(), want.body.size());
    for (size_t i = 0; i < got.body.size(); ++i) expect_close(got.body[i], want.body[i]);
  };
  // TEI's routes: the prefix picks; no prefix and no "model": the first --model.
  const Reply mlm_embed = post(one_m, "/embed", json{{"inputs", texts}});
  same_rows(post(all, "/embed", json{{"inputs", texts}}), mlm_embed);
  same_rows(post(all, "/models/http_mlm/embed", json{{"inputs", texts}}), mlm_embed);
  const Reply cls_embed = post(one_c, "/embed", json{{"inputs", texts}});
  same_rows(post(all, "/models/cls/embed", json{{"inputs", texts}}), cls_embed);
  same_rows(post(all, "/embed", json{{"inputs", texts}, {"model", "cls"}}), cls_embed);  // the body's model
  // The prefix wins over the body's model.
  same_rows(post(all, "/models/http_mlm/embed", json{{"inputs", texts}, {"model", "cls"}}), mlm_embed);
  auto scores = [](const Reply& r) {  // /predict's [{score, label}] → label → score
    std::map<std::string, double> out;
    for (const auto& e : r.body) out[e["label"].get<std::string>()] = e["score"].get<double>();
    return out;
  };
  const Reply cls_predict = post(one_c, "/predict", json{{"inputs", kTexts[0]}});
  ASSERT_EQ(cls_predict.status, 200) << cls_predict.body;
  for (const Reply& r : {post(all, "/models/cls/predict", json{{"inputs", kTexts[0]}}),
                         post(all, "/models/cls/", json{{"inputs", kTexts[0]}}),  // POST / is /predict for a classifier
                         post(all, "/models/cls", json{{"inputs", kTexts[0]}}),   // huggingface_hub's model URL
                         post(all, "/", json{{"inputs", kTexts[0]}, {"model", "cls"}})}) {
    ASSERT_EQ(r.status, 200) << r.body;
    for (const auto& [label, score] : scores(cls_predict)) EXPECT_NEAR(scores(r)[label], score, 1e-5) << label;
  }
  expect_error(post(all, "/predict", json{{"inputs", kTexts[0]}}), 424, "Backend", "http_mlm");  // the first: no head

  // OpenAI's routes: "model" picks, and is echoed.
  Reply r = post(all, "/v1/embeddings", json{{"input", texts}, {"model", "cls"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["model"], "cls");
  for (size_t i = 0; i < kTexts.size(); ++i) expect_close(r.body["data"][i]["embedding"], cls_embed.body[i]);
  r = post(all, "/v1/embeddings", json{{"input", texts}, {"model", "http_mlm"}});
  for (size_t i = 0; i < kTexts.size(); ++i) expect_close(r.body["data"][i]["embedding"], mlm_embed.body[i]);
  // One model served: a "model" that names another is still answered by it (and echoed).
  r = post(one_c, "/v1/embeddings", json{{"input", texts}, {"model", "something-else"}});
  EXPECT_EQ(r.body["model"], "something-else");
  expect_close(r.body["data"][0]["embedding"], cls_embed.body[0]);

  // The causal LM, by the prefix and by OpenAI's "model": the single server's greedy text.
  const json gen = {{"inputs", "In the beginning"}, {"parameters", {{"max_new_tokens", 6}}}};
  const Reply want_gen = post(one_lm, "/generate", gen);
  ASSERT_EQ(want_gen.status, 200) << want_gen.body;
  EXPECT_EQ(post(all, "/models/gen/generate", gen).body, want_gen.body);
  const json completion = {{"prompt", "In the beginning"}, {"max_tokens", 6}, {"temperature", 0}, {"model", "gen"}};
  r = post(all, "/v1/completions", completion);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["model"], "gen");
  EXPECT_EQ(r.body["choices"][0]["text"], want_gen.body["generated_text"]);
  expect_error(post(all, "/generate", gen), 424, "Backend", "not a causal LM");  // the first model's answer

  // Unknown names: 404 in TEI's shape, naming the served models.
  expect_error(post(all, "/v1/embeddings", json{{"input", "x"}, {"model", "nope"}}), 404, "NotFound",
               "\"nope\" is not served here (served: http_mlm, cls, gen)");
  expect_error(post(all, "/models/nope/embed", json{{"inputs", "x"}}), 404, "NotFound", "(served: http_mlm, cls, gen)");
  expect_error(post(one_m, "/models/nope/embed", json{{"inputs", "x"}}), 404, "NotFound", "(served: http_mlm)");
  expect_error(post(all, "/models/cls/nowhere", json::object()), 404, "NotFound", "/models/cls/nowhere");
  auto get = all.client().Get("/models/cls/embed");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");

  // /v1/models lists every model in --model order; /info and /metrics per model.
  json ids = json::array();
  const json listed = json::parse(all.client().Get("/v1/models")->body);
  for (const auto& d : listed["data"]) ids.push_back(d["id"]);
  EXPECT_EQ(ids, json::array({"http_mlm", "cls", "gen"}));
  EXPECT_EQ(json::parse(all.client().Get("/models/gen/v1/models")->body)["data"].size(), 1u);
  EXPECT_EQ(json::parse(all.client().Get("/info")->body)["model_id"], "http_mlm");
  const json cls_info = json::parse(all.client().Get("/models/cls/info")->body);
  EXPECT_EQ(cls_info["model_id"], "cls");
  EXPECT_EQ(cls_info["model_type"]["classifier"]["id2label"]["2"], "pos");
  EXPECT_TRUE(json::parse(all.client().Get("/models/gen/info")->body)["model_type"].contains("generation"));
  EXPECT_EQ(all.client().Get("/models/gen/health")->status, 200);
  const std::string metrics = all.client().Get("/metrics")->body;
  for (const char* series : {"roformer_requests_total{model=\"cls\",route=\"/predict\",status=\"200\"} 1\n",
                             "roformer_requests_total{model=\"cls\",route=\"/\",status=\"200\"} 3\n",
                             "roformer_requests_total{model=\"gen\",route=\"/generate\",status=\"200\"} 1\n",
                             "roformer_requests_total{model=\"http_mlm\",route=\"/generate\",status=\"424\"} 1\n",
                             "roformer_queue_depth{model=\"http_mlm\"} 0\n", "roformer_queue_depth{model=\"gen\"} 0\n",
                             "roformer_sequences_total{model=\"cls\"} "}) {
    EXPECT_NE(metrics.find(series), std::string::npos) << series << " not in\n" << metrics;
  }
  EXPECT_EQ(metrics.find("# TYPE roformer_queue_depth gauge"), metrics.rfind("# TYPE roformer_queue_depth gauge"));
  const std::string cls_metrics = all.client().Get("/models/cls/metrics")->body;
  EXPECT_NE(cls_metrics.find("model=\"cls\""), std::string::npos);
  EXPECT_EQ(cls_metrics.find("model=\"http_mlm\""), std::string::npos);
  EXPECT_EQ(all.stop(SIGTERM), 0);
  EXPECT_NE(slurp(all.log).find("\"method\":\"POST\",\"model\":\"gen\""), std::string::npos)
      << slurp(all.log);  // the access log names the model

  // A name with '/' (a Hugging Face id's shape), in the path as it is or as %2F.
  Server slash("--model org/x=" + m + " --model org=" + c + " --no-access-log");
  for (const char* path : {"/models/org/x/info", "/models/org%2Fx/info"}) {
    auto info = slash.client().Get(path);
    ASSERT_TRUE(info);
    EXPECT_EQ(json::parse(info->body)["model_id"], "org/x") << path;
  }
  EXPECT_EQ(json::parse(slash.client().Get("/models/org/info")->body)["model_id"], "org");
  EXPECT_EQ(slash.stop(SIGTERM), 0);

  // --model-id names one model only; names are unique.
  const std::string base = std::string(ROFORMER_CLI) + " serve --port 0 --model " + m;
  EXPECT_NE(std::system((base + " --model cls=" + c + " --model-id x 2> /dev/null").c_str()), 0);
  EXPECT_NE(std::system((base + " --model " + m + " 2> /dev/null").c_str()), 0);
  EXPECT_NE(std::system((base + " --model '/x=" + c + "' 2> /dev/null").c_str()), 0);
}

TEST(ServeHttp, ApiKeyGuardsEveryRouteButHealthAndMetrics) {
  Server s("--model " + model_dir("http_mlm") + " --api-key s3cret");
  expect_error(post(s, "/embed", json{{"inputs", "a"}}), 401, "Unauthorized", "API key");
  expect_error(post(s, "/embed", json{{"inputs", "a"}}.dump(), {{"Authorization", "Bearer wrong"}}), 401,
               "Unauthorized", "API key");
  EXPECT_EQ(post(s, "/embed", json{{"inputs", "a"}}.dump(), {{"Authorization", "Bearer s3cret"}}).status, 200);
  EXPECT_EQ(s.client().Get("/health")->status, 200);
  EXPECT_EQ(s.client().Get("/metrics")->status, 200);
  // Under /models/NAME/ too.
  expect_error(post(s, "/models/http_mlm/embed", json{{"inputs", "a"}}), 401, "Unauthorized", "API key");
  expect_error(post(s, "/models/nope/embed", json{{"inputs", "a"}}), 401, "Unauthorized", "API key");
  EXPECT_EQ(s.client().Get("/models/http_mlm/metrics")->status, 200);
  EXPECT_EQ(s.client().Get("/models/http_mlm/health")->status, 200);
  // On one keep-alive connection, a refused request's body is read with it: the next request on the
  // connection is answered as itself (not its predecessor's body parsed as a request line, a 400).
  httplib::Client keep = s.client();
  keep.set_keep_alive(true);
  const std::string body = json{{"inputs", "a"}}.dump();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(keep.Post("/embed", body, "application/json")->status, 401) << i;
    EXPECT_EQ(keep.Post("/embed", {{"Authorization", "Bearer s3cret"}}, body, "application/json")->status, 200) << i;
  }
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// With one request allowed in flight, concurrent requests are refused at once with 429, and every
// accepted one is answered.
TEST(ServeHttp, AFullQueueAnswers429) {
  Server s("--model " + model_dir("http_mlm") + " --max-concurrent-requests 1 --http-threads 16");
  std::string text;
  for (int i = 0; i < 25; ++i) text += "hello world ";
  const std::string body = json{{"inputs", std::vector<std::string>(32, text)}, {"truncate", true}}.dump();
  int refused = 0, ok = 0, other = 0;
  for (int round = 0; round < 10 && refused == 0; ++round) {
    std::vector<Reply> replies(16);
    std::vector<std::thread> threads;
    for (auto& r : replies) threads.emplace_back([&] { r = post(s, "/embed", body); });
    for (auto& t : threads) t.join();
    for (const auto& r : replies) {
      if (r.status == 429) {
        ++refused;
        EXPECT_EQ(r.body["error_type"], "Overloaded");
      } else if (r.status == 200) {
        ++ok;
      } else {
        ++other;
        ADD_FAILURE() << "status " << r.status << ": " << r.body;
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(other, 0);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// /rerank, /decode, token-id inputs and truncation_direction on an MLM model directory, held to the
// command line and to the other routes.
TEST(ServeHttp, RerankDecodeAndTokenIds) {
  const std::string m = model_dir("http_mlm");
  Server s("--model " + m);
  const std::vector<std::string> others(kTexts.begin() + 1, kTexts.end());
  // An embedding model reranks by cosine: /similarity's scores, best first, with their indices.
  const Reply sim = post(s, "/similarity", json{{"inputs", {{"source_sentence", kTexts[0]}, {"sentences", others}}}});
  Reply r = post(s, "/rerank", json{{"query", kTexts[0]}, {"texts", others}, {"return_text", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.body.size(), others.size());
  for (size_t i = 0; i < r.body.size(); ++i) {
    const size_t index = r.body[i]["index"].get<size_t>();
    EXPECT_NEAR(r.body[i]["score"].get<double>(), sim.body[index].get<double>(), 1e-6);
    EXPECT_EQ(r.body[i]["text"], others[index]);
    if (i) {
      EXPECT_GE(r.body[i - 1]["score"].get<double>(), r.body[i]["score"].get<double>());
    }
  }
  EXPECT_FALSE(post(s, "/rerank", json{{"query", "a"}, {"texts", {"b"}}}).body[0].contains("text"));
  expect_error(post(s, "/rerank", json{{"query", "a"}, {"texts", "b"}}), 422, "Validation", "`texts`");
  expect_error(post(s, "/rerank", json{{"texts", {"b"}}}), 422, "Validation", "`query`");

  // Token ids go to the model as given: the ids of a tokenized text embed as the text does.
  const Reply tok = post(s, "/tokenize", json{{"inputs", kTexts[0]}});
  std::vector<int> ids;
  for (const auto& t : tok.body[0]) ids.push_back(t["id"].get<int>());
  const Reply text_vec = post(s, "/embed", json{{"inputs", kTexts[0]}});
  r = post(s, "/embed", json{{"inputs", ids}});
  ASSERT_EQ(r.status, 200) << r.body;
  expect_close(r.body[0], text_vec.body[0], 1e-6);
  r = post(s, "/v1/embeddings", json{{"input", {ids, ids}}});
  ASSERT_EQ(r.status, 200) << r.body;
  expect_close(r.body["data"][1]["embedding"], text_vec.body[0], 1e-6);
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], 2 * ids.size());
  expect_error(post(s, "/embed", json{{"inputs", {1, 100000}}}), 422, "Validation", "token id 100000 at position 1 is outside the model's vocabulary");
  expect_error(post(s, "/embed", json{{"inputs", {{1, 2}, json::array()}}}), 422, "Validation", "`inputs`[1]");
  expect_error(post(s, "/embed", json{{"inputs", {1, 5000000000LL}}}), 422, "Validation", "`inputs`[1]");
  const size_t H = text_vec.body[0].size();
  EXPECT_EQ(post(s, "/v1/embeddings", json{{"input", "a"}, {"dimensions", H}}).status, 200);  // the model's own
  expect_error(post(s, "/v1/embeddings", json{{"input", "a"}, {"dimensions", 8}}), 422, "Validation", "`dimensions`");

  // /decode: the tokenizer's decode, special tokens skipped unless asked.
  r = post(s, "/decode", json{{"ids", ids}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, json::array({kTexts[0]}));
  r = post(s, "/decode", json{{"ids", {ids, ids}}, {"skip_special_tokens", false}});
  EXPECT_EQ(r.body[1], "[CLS] " + kTexts[0] + " [SEP]");
  expect_error(post(s, "/decode", json{{"ids", {-1}}}), 422, "Validation", "outside the tokenizer's vocabulary");
  expect_error(post(s, "/decode", json{{"ids", "x"}}), 422, "Validation", "`ids`");

  // truncation_direction: the kept end of a long input, as `roformer embed --truncate --truncation-side`.
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += (i < 20 ? "hello " : "world ");
  for (const char* side : {"left", "right"}) {
    const auto want = cli(std::string("embed --normalize --truncate --truncation-side ") + side + " --model " + m,
                          long_text + "\n");
    r = post(s, "/embed", json{{"inputs", long_text}, {"truncate", true},
                               {"truncation_direction", side == std::string("left") ? "Left" : "right"}});
    ASSERT_EQ(r.status, 200) << r.body;
    expect_close(r.body[0], want[0]["embedding"]);
  }
  expect_error(post(s, "/embed", json{{"inputs", "a"}, {"truncation_direction", "up"}}), 422, "Validation",
               "`truncation_direction`");
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// /fill-mask on an MLM model directory: `roformer fill-mask`'s predictions (one mask: a list; several
// texts: a list each).
TEST(ServeHttp, FillMaskEqualsTheCommandLine) {
  const std::string m = model_dir("http_mlm");
  Server s("--model " + m);
  const std::vector<std::string> masked = {"hello [MASK] world", "[MASK] b [MASK]"};
  const auto want = cli("fill-mask --top-k 3 --model " + m, lines(masked));
  Reply r = post(s, "/fill-mask", json{{"inputs", masked[0]}, {"parameters", {{"top_k", 3}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto same_predictions = [](const json& got, const json& w) {
    ASSERT_EQ(got.size(), w.size()) << got;
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k]["token"], w[k]["token"]);
      EXPECT_EQ(got[k]["token_str"], w[k]["token_str"]);
      EXPECT_EQ(got[k]["sequence"], w[k]["sequence"]);
      EXPECT_NEAR(got[k]["score"].get<double>(), w[k]["score"].get<double>(), 1e-6);
    }
  };
  same_predictions(r.body, want[0]);
  r = post(s, "/fill-mask", json{{"inputs", masked}, {"top_k", 3}});
  ASSERT_EQ(r.body.size(), 2u) << r.body;
  same_predictions(r.body[0], want[0]);
  ASSERT_EQ(r.body[1].size(), 2u);  // two masks: one list each
  for (size_t k = 0; k < 2; ++k) same_predictions(r.body[1][k], want[1][k]);
  expect_error(post(s, "/fill-mask", json{{"inputs", "no mask here"}}), 422, "Validation", "no [MASK] token");
  expect_error(post(s, "/fill-mask", json{{"inputs", "[MASK]"}, {"parameters", {{"top_k", 0}}}}), 422, "Validation",
               "`top_k`");
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

TEST(ServeHttp, RerankWithAOneLabelClassifierIsTeis) {
  const std::string one = classifier_dir("http_reranker", 1, json::object());
  Server s("--model " + one);
  const std::vector<std::string> texts(kTexts.begin() + 1, kTexts.end());
  Reply raw = post(s, "/rerank", json{{"query", kTexts[0]}, {"texts", texts}, {"raw_scores", true}});
  Reply r = post(s, "/rerank", json{{"query", kTexts[0]}, {"texts", texts}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(raw.body.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {  // the logit of the pair (query, text); the score its sigmoid
    const size_t index = raw.body[i]["index"].get<size_t>();
    const Reply p = post(s, "/predict", json{{"inputs", {kTexts[0], texts[index]}}, {"raw_scores", true}});
    EXPECT_NEAR(raw.body[i]["score"].get<double>(), p.body[0]["score"].get<double>(), 1e-5);  // other padding
    EXPECT_EQ(r.body[i]["index"], index);  // the sigmoid keeps the order
    EXPECT_NEAR(r.body[i]["score"].get<double>(), 1 / (1 + std::exp(-raw.body[i]["score"].get<double>())), 1e-9);
  }
  EXPECT_TRUE(json::parse(s.client().Get("/info")->body)["model_type"].contains("reranker"));
  expect_error(post(s, "/fill-mask", json{{"inputs", "[MASK]"}}), 424, "Backend", "cannot fill masks");
  EXPECT_EQ(s.stop(SIGTERM), 0);
  const std::string three = classifier_dir("http_cls3", 3, json::object());
  Server c("--model " + three);
  expect_error(post(c, "/rerank", json{{"query", "a"}, {"texts", {"b"}}}), 424, "Backend", "not a re-ranker");
  EXPECT_EQ(c.stop(SIGTERM), 0);
}

// /v1/rerank (Cohere's and Jina's shape) scores as /rerank; /embed_all gives every token's hidden state
// (its first token is `embed --pooling cls`, its mean `--pooling mean`); /embed_sparse gives the non-zero
// SPLADE entries of an MLM and 424 without its head (tests/hf/serve_clients.py checks their values
// against transformers).
TEST(ServeHttp, V1RerankEmbedAllAndEmbedSparse) {
  const std::string m = model_dir("http_mlm");
  Server s("--model " + m);
  const std::vector<std::string> others(kTexts.begin() + 1, kTexts.end());
  const Reply tei = post(s, "/rerank", json{{"query", kTexts[0]}, {"texts", others}});
  const json docs = {others[0], {{"text", others[1]}}, others[2]};
  Reply r = post(s, "/v1/rerank", json{{"query", kTexts[0]}, {"documents", docs}, {"model", "m"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body["model"], "m");
  ASSERT_EQ(r.body["results"].size(), others.size());
  EXPECT_GT(r.body["usage"]["total_tokens"].get<int>(), 0);
  for (size_t i = 0; i < others.size(); ++i) {
    const json& x = r.body["results"][i];
    EXPECT_EQ(x["index"], tei.body[i]["index"]);
    EXPECT_NEAR(x["relevance_score"].get<double>(), tei.body[i]["score"].get<double>(), 1e-9);
    EXPECT_EQ(x["document"]["text"], others[x["index"].get<size_t>()]);
  }
  r = post(s, "/v1/rerank", json{{"query", kTexts[0]}, {"documents", docs}, {"top_n", 2}, {"return_documents", false}});
  ASSERT_EQ(r.body["results"].size(), 2u) << r.body;
  EXPECT_EQ(r.body["results"][0]["index"], tei.body[0]["index"]);
  EXPECT_FALSE(r.body["results"][0].contains("document"));
  expect_error(post(s, "/v1/rerank", json{{"query", "a"}}), 422, "Validation", "`documents`");
  expect_error(post(s, "/v1/rerank", json{{"query", "a"}, {"documents", json::array()}}), 422, "Validation", "cannot be empty");
  expect_error(post(s, "/v1/rerank", json{{"query", "a"}, {"documents", {1}}}), 422, "Validation", "`documents[0]`");
  expect_error(post(s, "/v1/rerank", json{{"query", "a"}, {"documents", {"b"}}, {"top_n", 0}}), 422, "Validation", "`top_n`");
  expect_error(post(s, "/v1/rerank", json{{"documents", {"b"}}}), 422, "Validation", "`query`");

  const auto cls = cli("embed --pooling cls --model " + m, lines(kTexts));
  const auto mean = cli("embed --pooling mean --model " + m, lines(kTexts));
  r = post(s, "/embed_all", json{{"inputs", kTexts}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.body.size(), kTexts.size());
  for (size_t i = 0; i < kTexts.size(); ++i) {
    const Reply tok = post(s, "/tokenize", json{{"inputs", kTexts[i]}});
    const json& tokens = r.body[i];
    ASSERT_EQ(tokens.size(), tok.body[0].size());
    expect_close(tokens[0], cls[i]["embedding"]);
    json avg = json::array();
    for (size_t h = 0; h < tokens[0].size(); ++h) {
      double sum = 0;
      for (const json& t : tokens) sum += t[h].get<double>();
      avg.push_back(sum / static_cast<double>(tokens.size()));
    }
    expect_close(avg, mean[i]["embedding"]);
  }
  expect_error(post(s, "/embed_all", json{{"inputs", json::array()}}), 422, "Validation", "`inputs`");

  r = post(s, "/embed_sparse", json{{"inputs", kTexts}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.body.size(), kTexts.size());
  const int vocab = json::parse(slurp(m + "/config.json"))["vocab_size"].get<int>();
  for (const json& entries : r.body) {
    ASSERT_FALSE(entries.empty());
    for (size_t k = 0; k < entries.size(); ++k) {
      EXPECT_GT(entries[k]["value"].get<double>(), 0);
      EXPECT_LT(entries[k]["index"].get<int>(), vocab);
      if (k) {
        EXPECT_LT(entries[k - 1]["index"].get<int>(), entries[k]["index"].get<int>());
      }
    }
  }
  EXPECT_NE(r.body[0], r.body[1]);
  expect_error(post(s, "/embed_sparse", json{{"inputs", "a"}, {"truncate", 3}}), 422, "Validation", "`truncate`");
  expect_error(post(s, "/embed", json{{"inputs", "a"}, {"prompt_name", "query"}}), 422, "Validation",
               "prompt_name 'query' is not a prompt of");
  expect_error(post(s, "/embed", json{{"inputs", "a"}, {"prompt_name", 3}}), 422, "Validation", "`prompt_name`");
  EXPECT_EQ(s.stop(SIGTERM), 0);

  const std::string one = classifier_dir("http_sparse_reranker", 1, json::object());
  Server c("--model " + one);
  expect_error(post(c, "/embed_sparse", json{{"inputs", "a"}}), 424, "Backend", "no masked-LM head");
  r = post(c, "/v1/rerank", json{{"query", kTexts[0]}, {"documents", others}});
  const Reply pair = post(c, "/rerank", json{{"query", kTexts[0]}, {"texts", others}});
  ASSERT_EQ(r.status, 200) << r.body;
  for (size_t i = 0; i < others.size(); ++i) {
    EXPECT_NEAR(r.body["results"][i]["relevance_score"].get<double>(), pair.body[i]["score"].get<double>(), 1e-9);
  }
  EXPECT_EQ(c.stop(SIGTERM), 0);
}

// /openapi.json lists every route; each GET answers 200, and each POST's example body is answered as
// its responses say (200, or 424 where the model lacks the head). The access log has a line per request.
TEST(ServeHttp, OpenApiDocumentsEveryRouteAndItsExamplesWork) {
  const std::string m = model_dir("http_mlm");
  Server s("--model " + m);
  auto doc_res = s.client().Get("/openapi.json");
  ASSERT_TRUE(doc_res);
  ASSERT_EQ(doc_res->status, 200);
  const json doc = json::parse(doc_res->body);
  EXPECT_EQ(doc["openapi"], "3.0.3");
  for (const char* path : {"/embed", "/v1/embeddings", "/predict", "/rerank", "/v1/rerank", "/embed_all", "/embed_sparse",
                           "/similarity", "/fill-mask", "/translate", "/token-classification", "/question-answering",
                           "/generate", "/generate_stream", "/v1/completions", "/tokenize", "/decode", "/", "/info",
                           "/v1/models", "/health", "/metrics", "/openapi.json"}) {
    EXPECT_TRUE(doc["paths"].contains(path)) << path;
  }
  for (const auto& [documented, ops] : doc["paths"].items()) {
    // Every route is also under /models/{model}/, the model by the path (an enum of the served names).
    std::string path = documented;
    const std::string prefix = "/models/{model}";
    const bool prefixed = path.rfind(prefix, 0) == 0;
    if (prefixed) path = path.substr(prefix.size());
    const std::string url = prefixed ? "/models/http_mlm" + path : path;
    EXPECT_TRUE(prefixed || path == "/openapi.json" || doc["paths"].contains(prefix + path)) << path;
    for (const auto& [method, op] : ops.items()) {
      if (prefixed) {
        EXPECT_EQ(op["parameters"][0]["schema"]["enum"], json::array({"http_mlm"})) << documented;
        EXPECT_TRUE(op["responses"].contains("404")) << documented;
      }
      if (method == "get") {
        EXPECT_EQ(s.client().Get(url.c_str())->status, 200) << url;
        continue;
      }
      const json example = op["requestBody"]["content"]["application/json"]["example"];
      const Reply r = post(s, url, example);
      // An MLM answers 424 where a route needs another head or model (tests/hf/pipelines_vs_hf.py runs the
      // head routes, tests/hf/generate_clients.py the generation routes).
      const bool other_head = path == "/predict" || path == "/translate" || path == "/token-classification" ||
                              path == "/question-answering" || path == "/generate" || path == "/generate_stream" ||
                              path == "/v1/completions";
      EXPECT_TRUE(r.status == 200 || (r.status == 424 && other_head))
          << url << " " << r.status << r.body;
      EXPECT_TRUE(op["responses"].contains(std::to_string(r.status))) << url;
    }
  }
  EXPECT_EQ(s.stop(SIGTERM), 0);
  bool logged = false;
  std::istringstream log(slurp(s.log));
  for (std::string line; std::getline(log, line);) {
    const json j = json::parse(line, nullptr, false);
    const bool rerank = j.is_object() && j.value("path", "") == "/rerank";
    if (rerank && j.value("status", 0) == 200 && j.contains("ms")) logged = true;
  }
  EXPECT_TRUE(logged) << slurp(s.log);
}

// A translate-train encoder-decoder on a toy English → Spanish number corpus (30 steps: its
// translations are poor, but they are what `roformer translate` says, which is what is compared).
std::string translation_dir() {
  const std::string dir = temp_dir() + "/http_translation";
  const std::string model = dir + "/run/step-000030";
  if (fs::exists(model + "/model.safetensors")) return model;
  fs::create_directories(dir);
  const char* en[] = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"};
  const char* es[] = {"cero", "uno", "dos", "tres", "cuatro", "cinco", "seis", "siete", "ocho", "nueve"};
  std::mt19937 rng(1);
  for (const char* name : {"train", "valid"}) {
    std::ofstream out(dir + "/" + name + ".tsv");
    for (int line = 0; line < (std::string(name) == "train" ? 600 : 20); ++line) {
      std::vector<int> idx(2 + rng() % 5);
      for (int& i : idx) i = static_cast<int>(rng() % 10);
      for (size_t i = 0; i < idx.size(); ++i) out << (i ? " " : "") << en[idx[i]];
      out << "\t";
      for (size_t i = idx.size(); i-- > 0;) out << es[idx[i]] << (i ? " " : "\n");
    }
  }
  const std::string cmd = std::string(ROFORMER_CLI) + " translate-train --train " + dir + "/train.tsv --validation " + dir +
                          "/valid.tsv --out " + dir + "/run --vocab-size 40 --layers 2 --hidden 32 --heads 4 --ff 64"
                          " --max-positions 32 --max-tokens 256 --steps 30 --warmup 10 --lr 3e-3 --eval-every 30"
                          " --bleu-sentences 4 --threads 1 --no-progress 2> " + dir + "/train.log";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << slurp(dir + "/train.log");
  return model;
}

// `roformer translate ARGS` on texts: its output lines (nbest lines per text).
std::vector<std::string> translate_cli(const std::string& args, const std::vector<std::string>& texts) {
  static int n = 0;
  const std::string base = temp_dir() + "/http_translate" + std::to_string(n++);
  std::ofstream(base + ".in") << lines(texts);
  const std::string cmd = std::string(ROFORMER_CLI) + " translate " + args + " --input " + base + ".in > " + base + ".out";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::vector<std::string> out;
  std::istringstream in(slurp(base + ".out"));
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// /translate (and POST /) on an encoder-decoder equal `roformer translate` with the same options, also
// when concurrent requests with different options share the step batcher's 7 rows (beam-4 and beam-3
// sources wait for rows and join the running ones at later steps); transformers' pipeline shapes;
// /tokenize, /decode, /info and the documented examples on a translation model.
TEST(ServeHttp, TranslateEqualsTheCommandLine) {
  const std::string m = translation_dir();
  const std::vector<std::string> texts = {"one two three", "four", "nine eight seven six five four"};
  const std::vector<std::string> beam4 = translate_cli("--model " + m, texts);
  const std::vector<std::string> nbest = translate_cli("--model " + m + " --beam 3 --nbest 2 --length-penalty 0.6", texts);
  const std::vector<std::string> greedy = translate_cli("--model " + m + " --beam 1 --max-len-a 0 --max-len-b 5", texts);
  ASSERT_EQ(beam4.size(), 3u);
  ASSERT_EQ(nbest.size(), 6u);
  Server s("--model " + m + " --max-client-batch-size 8 --slots 7 --no-access-log");

  Reply r = post(s, "/translate", json{{"inputs", texts[0]}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, json::parse(json::array({{{"translation_text", beam4[0]}}}).dump()));
  r = post(s, "/", json{{"inputs", texts}});  // POST / translates; a list: one object per text
  ASSERT_EQ(r.status, 200) << r.body;
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(r.body[i]["translation_text"], beam4[i]) << i;

  // Concurrent requests with three decoding settings: each equals the command line with its options.
  const json p_nbest = {{"num_beams", 3}, {"num_return_sequences", 2}, {"length_penalty", 0.6}};
  const json p_greedy = {{"generate_parameters", {{"num_beams", 1}, {"max_new_tokens", 5}}}};  // huggingface_hub's nesting
  std::vector<Reply> replies(12);
  std::vector<std::thread> threads;
  for (size_t k = 0; k < replies.size(); ++k) {
    threads.emplace_back([&, k] {
      const json params = k % 3 == 0 ? json::object() : k % 3 == 1 ? p_nbest : p_greedy;
      replies[k] = post(s, "/translate", json{{"inputs", texts}, {"parameters", params}});
    });
  }
  for (auto& t : threads) t.join();
  for (size_t k = 0; k < replies.size(); ++k) {
    ASSERT_EQ(replies[k].status, 200) << replies[k].body;
    for (size_t i = 0; i < texts.size(); ++i) {
      const json& got = replies[k].body[i];
      if (k % 3 == 1) {  // num_return_sequences 2: a list of two per text
        ASSERT_EQ(got.size(), 2u) << got;
        EXPECT_EQ(got[0]["translation_text"], nbest[2 * i]) << k << " " << i;
        EXPECT_EQ(got[1]["translation_text"], nbest[2 * i + 1]) << k << " " << i;
      } else {
        EXPECT_EQ(got["translation_text"], (k % 3 == 0 ? beam4 : greedy)[i]) << k << " " << i;
      }
    }
  }

  r = post(s, "/tokenize", json{{"inputs", "one two"}});  // SentencePiece pieces, then the eos
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body[0].back()["special"], true);
  std::vector<int32_t> ids;
  for (const json& t : r.body[0]) ids.push_back(t["id"]);
  r = post(s, "/decode", json{{"ids", ids}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body[0], "one two");
  // Every documented example: answered, or refused with 424 where an encoder model is needed.
  const json doc = json::parse(s.client().Get("/openapi.json")->body);
  for (const auto& [documented, ops] : doc["paths"].items()) {
    if (!ops.contains("post")) continue;
    std::string path = documented, url = documented;  // /models/{model}/ROUTE: the model by name
    if (path.rfind("/models/{model}", 0) == 0) {
      path = path.substr(15);
      url = "/models/" + ops["post"]["parameters"][0]["schema"]["enum"][0].get<std::string>() + path;
    }
    const int status = post(s, url, ops["post"]["requestBody"]["content"]["application/json"]["example"]).status;
    const bool translation_route = path == "/translate" || path == "/" || path == "/tokenize" || path == "/decode";
    EXPECT_EQ(status, translation_route ? 200 : 424) << path;
  }
  const json info = json::parse(s.client().Get("/info")->body);
  EXPECT_EQ(info["model_type"]["translation"]["position_encoding"], "rope") << info;
  EXPECT_EQ(info["model_type"]["translation"]["slots"], 7) << info;
  EXPECT_EQ(info["max_input_length"], 31) << info;
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// /translate's refusals: long inputs 413 unless truncated, bad or unknown parameters 422, too many
// inputs 413, the encoder routes 424 on a translation model and /translate 424 on an encoder; a
// sampled request with a seed gives the same answer twice.
TEST(ServeHttp, TranslateRefusesWhatItCannotDo) {
  Server s("--model " + translation_dir() + " --max-client-batch-size 8 --no-access-log");
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "one ";
  expect_error(post(s, "/translate", json{{"inputs", long_text}}), 413, "Validation", "set `truncate`");
  EXPECT_EQ(post(s, "/translate", json{{"inputs", long_text}, {"truncate", true}}).status, 200);
  EXPECT_EQ(post(s, "/translate", json{{"inputs", long_text}, {"parameters", {{"truncation", "longest_first"}}}}).status, 200);
  expect_error(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"num_beams", 99}}}}), 422, "Validation",
               "`num_beams` must be in [1, 32]");
  expect_error(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"num_beams", 2}, {"num_return_sequences", 3}}}}),
               422, "Validation", "`num_return_sequences` must be in [1, 2]");
  expect_error(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"beam", 2}}}}), 422, "Validation",
               "`parameters.beam` is not supported");
  expect_error(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"src_lang", "en"}, {"tgt_lang", "fr"}}}}),
               422, "Validation", "one direction");
  expect_error(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"max_new_tokens", 5}, {"max_len_b", 3}}}}),
               422, "Validation", "one or the other");
  expect_error(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"max_len_a", 1e9}}}}), 422, "Validation",
               "`max_len_a` must be a number in [0, 4");
  expect_error(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"do_sample", true}, {"num_beams", 2}}}}),
               422, "Validation", "num_beams");
  const Reply r = post(s, "/translate", json{{"inputs", "one two"}, {"parameters", {{"do_sample", true}, {"seed", 7}}}});
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(post(s, "/translate", json{{"inputs", "one two"}, {"parameters", {{"do_sample", true}, {"seed", 7}}}}).body, r.body);
  expect_error(post(s, "/translate", json{{"inputs", std::vector<std::string>(9, "one")}}), 413, "Validation", "batch size 9");
  {  // the step batcher's slots: what can never fit is 422, what fits is answered
    Server small("--model " + translation_dir() + " --slots 2 --max-total-tokens 20 --no-access-log");
    expect_error(post(small, "/translate", json{{"inputs", "one"}, {"parameters", {{"num_beams", 4}}}}), 422, "Validation",
                 "`parameters.num_beams` 4 needs as many slots");
    // "one": at most 3 subwords + eos + 14 tokens; six words: at least 6 + 1 + 14
    const json budget = {{"num_beams", 1}, {"max_new_tokens", 14}};
    expect_error(post(small, "/translate", json{{"inputs", {"one", long_text.substr(0, 24)}}, {"parameters", budget}}),
                 422, "Validation", "input 1 needs");
    EXPECT_EQ(post(small, "/translate", json{{"inputs", "one"}, {"parameters", budget}}).status, 200);
    const Reply ok = post(small, "/translate", json{{"inputs", {"one", "two"}}, {"parameters", {{"num_beams", 2}, {"max_new_tokens", 3}}}});
    EXPECT_EQ(ok.status, 200) << ok.body;
    EXPECT_EQ(ok.body.size(), 2u) << ok.body;
  }
  expect_error(post(s, "/embed", json{{"inputs", "one"}}), 424, "Backend", "a translation model");
  expect_error(post(s, "/fill-mask", json{{"inputs", "one"}}), 424, "Backend", "a translation model");

  EXPECT_EQ(s.stop(SIGTERM), 0);

  Server encoder("--model " + model_dir("http_mlm") + " --no-access-log");
  expect_error(post(encoder, "/translate", json{{"inputs", "one"}}), 424, "Backend", "not a translation model");
  EXPECT_EQ(encoder.stop(SIGTERM), 0);
}

// A raw TCP connection to the server, for clients that misbehave.
int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

// Hundreds of idle connections (opened, nothing sent) and clients that vanish mid-request do not stop
// a normal client from being answered at once; the server keeps serving and stops cleanly.
TEST(ServeHttp, IdleAndVanishingConnectionsDoNotStarveClients) {
  // Idle connections would hold their threads for 30 s: an answer within 10 s was not starved.
  Server s("--model " + model_dir("http_mlm") + " --no-access-log --read-timeout 30 --keep-alive-timeout 30");
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) idle.push_back(connect_to(s.port));
  for (int i = 0; i < 20; ++i) {  // half a request, then gone
    const int fd = connect_to(s.port);
    const std::string head = "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             "Content-Length: 1000\r\n\r\n{\"inputs\": \"hel";
    EXPECT_GT(send(fd, head.data(), head.size(), MSG_NOSIGNAL), 0);
    close(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  const Reply r = post(s, "/embed", json{{"inputs", "hello"}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_LT(seconds, 10.0);  // not after the idle connections' 30-second timeouts
  for (int fd : idle) close(fd);
  EXPECT_EQ(post(s, "/embed", json{{"inputs", "world"}}).status, 200);
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

// A metric's value in /metrics: its series of `model` ("name{model=\"M\"} value"), or its first
// series when model is ""; -1 when absent.
double metric(const Server& s, const std::string& name, const std::string& model = "") {
  const std::string start = name + (model.empty() ? "{" : "{model=\"" + model + "\"");
  std::istringstream in(s.client().Get("/metrics")->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(start, 0) == 0) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// Polls /metrics until `name` reads `value` (up to 60 s: debug builds on a loaded machine); its last value.
double await_metric(const Server& s, const std::string& name, double value, const std::string& model = "") {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  double v = metric(s, name, model);
  for (; v != value && std::chrono::steady_clock::now() < end; v = metric(s, name, model)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return v;
}

// About a second of the model thread (4000 inputs of 62 tokens; servers with --threads 1 and
// --max-client-batch-size 5000), posted from its own thread: constructed once the request is running.
// route and model: another model's (several models served).
struct BusyRequest {
  Reply reply;
  std::thread client;
  explicit BusyRequest(const Server& s, const std::string& route = "/embed", const std::string& model = "") {
    std::string text;
    for (int i = 0; i < 30; ++i) text += "hello world ";
    const std::string busy = json{{"inputs", std::vector<std::string>(4000, text)}, {"truncate", true}}.dump();
    client = std::thread([this, &s, busy, route] { reply = post(s, route, busy); });
    EXPECT_EQ(await_metric(s, "roformer_requests_in_flight", 1, model), 1);  // tokenized,
    EXPECT_EQ(await_metric(s, "roformer_queue_depth", 0, model), 0);         // then taken by the model thread
  }
  void answered() {  // joins the client: the request was answered in full
    client.join();
    EXPECT_EQ(reply.status, 200);
    EXPECT_EQ(reply.body.size(), 4000u);
  }
};

// A request whose client closes the connection while it waits in the queue is dropped unrun (counted
// in roformer_requests_cancelled_total and logged with 499); the one running meanwhile is answered.
TEST(ServeHttp, RequestsWhoseClientLeftTheQueueAreDropped) {
  Server s("--model " + model_dir("http_mlm") + " --max-client-batch-size 5000 --threads 1");
  BusyRequest busy(s);
  // The second request is sent whole, waits behind the first, and its client goes away.
  const int fd = connect_to(s.port);
  const std::string body = json{{"inputs", "gone"}}.dump();
  const std::string request = "POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  ASSERT_EQ(await_metric(s, "roformer_queue_depth", 1), 1);
  close(fd);
  await_metric(s, "roformer_requests_cancelled_total", 1);
  busy.answered();
  EXPECT_EQ(metric(s, "roformer_requests_cancelled_total"), 1);
  EXPECT_EQ(metric(s, "roformer_sequences_total"), 4000);  // the dropped request never ran
  EXPECT_EQ(metric(s, "roformer_requests_in_flight"), 0);
  EXPECT_EQ(post(s, "/embed", json{{"inputs", "still serving"}}).status, 200);
  EXPECT_EQ(s.stop(SIGTERM), 0);
  EXPECT_NE(slurp(s.log).find("\"error_type\":\"ClientClosed\""), std::string::npos) << slurp(s.log).substr(0, 2000);
}

// On the step batcher (one slot): a translation whose client closes the connection while it decodes
// frees its rows at the next step, answered Cancelled (499, counted) long before its 600 sources × 30
// steps would end; and a short request sent while such a long one decodes takes the next free row
// (fewest admitted first), answered in a small part of the long one's time rather than behind its
// sources; SIGTERM answers the one decoding, then exits 0.
TEST(ServeHttp, TranslationStepsFreeRowsOfClientsGoneAndLetShortRequestsIn) {
  Server s("--model " + translation_dir() + " --max-client-batch-size 5000 --slots 1 --threads 1");
  const int fd = connect_to(s.port);
  const std::string body = json{{"inputs", std::vector<std::string>(600, "one two")},
                                {"parameters", {{"num_beams", 1}, {"max_new_tokens", 30}, {"min_new_tokens", 30}}}}.dump();
  const std::string request = "POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  ASSERT_EQ(await_metric(s, "roformer_requests_in_flight", 1), 1);  // accepted,
  ASSERT_EQ(await_metric(s, "roformer_queue_depth", 0), 0);         // then decoding
  close(fd);
  EXPECT_EQ(await_metric(s, "roformer_requests_cancelled_total", 1), 1);
  EXPECT_EQ(await_metric(s, "roformer_requests_in_flight", 0), 0);
  EXPECT_EQ(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"num_beams", 1}}}}).status, 200);

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  clock::time_point long_end;
  Reply long_reply;
  std::thread client([&] {
    long_reply = post(s, "/translate", body);
    long_end = clock::now();
  });
  ASSERT_EQ(await_metric(s, "roformer_requests_in_flight", 1), 1);
  ASSERT_EQ(await_metric(s, "roformer_queue_depth", 0), 0);
  const auto t1 = clock::now();
  EXPECT_EQ(post(s, "/translate", json{{"inputs", "one"}, {"parameters", {{"num_beams", 1}, {"max_new_tokens", 2}}}}).status, 200);
  const double short_s = std::chrono::duration<double>(clock::now() - t1).count();
  client.join();
  ASSERT_EQ(long_reply.status, 200);
  EXPECT_EQ(long_reply.body.size(), 600u);
  EXPECT_LT(short_s, std::chrono::duration<double>(long_end - t0).count() / 4) << "the short request waited behind the long one";
  // SIGTERM while one decodes: it is answered in full, then the server exits 0.
  client = std::thread([&] { long_reply = post(s, "/translate", body); });
  ASSERT_EQ(await_metric(s, "roformer_requests_in_flight", 1), 1);
  ASSERT_EQ(await_metric(s, "roformer_queue_depth", 0), 0);
  EXPECT_EQ(s.stop(SIGTERM), 0);
  client.join();
  EXPECT_EQ(long_reply.status, 200);
  EXPECT_EQ(long_reply.body.size(), 600u);
  EXPECT_NE(slurp(s.log).find("\"error_type\":\"ClientClosed\""), std::string::npos) << slurp(s.log).substr(0, 2000);
}

// With several models, SIGTERM drains every model's queue: the request running on each model thread
// and the one queued behind it are answered, then the server exits 0.
TEST(ServeHttp, SigtermDrainsEveryModelsQueue) {
  const std::string m = model_dir("http_mlm");
  Server s("--model " + m + " --model b=" + m + " --max-client-batch-size 5000 --threads 2");  // a thread each
  BusyRequest a(s), b(s, "/models/b/embed", "b");
  Reply queued_a, queued_b;
  std::thread qa([&] { queued_a = post(s, "/embed", json{{"inputs", "queued on a"}}); });
  std::thread qb([&] { queued_b = post(s, "/models/b/embed", json{{"inputs", "queued on b"}}); });
  ASSERT_EQ(await_metric(s, "roformer_queue_depth", 1, "http_mlm"), 1);
  ASSERT_EQ(await_metric(s, "roformer_queue_depth", 1, "b"), 1);
  EXPECT_EQ(s.stop(SIGTERM), 0);
  a.answered();
  b.answered();
  qa.join();
  qb.join();
  EXPECT_EQ(queued_a.status, 200) << queued_a.body;
  EXPECT_EQ(queued_b.status, 200) << queued_b.body;
}

// SIGTERM stops accepting and answers what was accepted; requests still queued when
// --shutdown-timeout passes are answered 503 unrun, the one running is finished, and the exit is 0.
TEST(ServeHttp, ShutdownTimeoutAnswersWhatIsStillQueued503) {
  Server s("--model " + model_dir("http_mlm") + " --max-client-batch-size 5000 --threads 1 --shutdown-timeout 0.2");
  BusyRequest busy(s);
  std::vector<Reply> queued(3);
  std::vector<std::thread> clients;
  for (auto& r : queued) clients.emplace_back([&] { r = post(s, "/embed", json{{"inputs", "queued"}}); });
  ASSERT_EQ(await_metric(s, "roformer_queue_depth", 3), 3);
  EXPECT_EQ(s.stop(SIGTERM), 0);
  busy.answered();
  for (auto& c : clients) c.join();
  for (const Reply& r : queued) expect_error(r, 503, "Overloaded", "--shutdown-timeout");
  EXPECT_NE(slurp(s.log).find("3 queued requests answered 503"), std::string::npos) << slurp(s.log).substr(0, 2000);
}

// With --request-timeout, requests that waited longer in the queue are dropped with 503, not run.
TEST(ServeHttp, RequestsPastTheQueueTimeoutAre503) {
  Server s("--model " + model_dir("http_mlm") + " --request-timeout 0.001 --max-batch-tokens 64 --no-access-log");
  std::string text;
  for (int i = 0; i < 25; ++i) text += "hello world ";
  const std::string body = json{{"inputs", std::vector<std::string>(16, text)}, {"truncate", true}}.dump();
  std::vector<Reply> replies(12);
  std::vector<std::thread> threads;
  for (auto& r : replies) threads.emplace_back([&] { r = post(s, "/embed", body); });
  for (auto& t : threads) t.join();
  int timed_out = 0;
  for (const auto& r : replies) {
    EXPECT_TRUE(r.status == 200 || r.status == 503) << r.status << r.body;
    if (r.status == 503) {
      ++timed_out;
      EXPECT_EQ(r.body["error_type"], "Overloaded");
    }
  }
  EXPECT_GT(timed_out, 0);
  EXPECT_NE(s.client().Get("/metrics")->body.find("roformer_requests_timed_out_total{model=\"http_mlm\"} " + std::to_string(timed_out)),
            std::string::npos);
  EXPECT_EQ(slurp(s.log).find("\"path\""), std::string::npos);  // --no-access-log
  EXPECT_EQ(s.stop(SIGTERM), 0);
}

}  // namespace
