// server::Api: request validation (every refusal names its field), tokenization with TEI's
// truncate / 413 rules, and the TEI and OpenAI response shapes.
#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <cstring>


namespace server {
namespace {

using nlohmann::json;

// One input of /predict (or of every other route, with pair = false).
struct Item {
  std::string a, b;
  bool pair = false;
};

ApiError invalid(const std::string& message) { return ApiError(422, "Validation", message); }

const json& require_object(const json& request) {
  if (!request.is_object()) throw invalid("the request body must be a JSON object");
  return request;
}

bool flag(const json& request, const char* name, bool fallback) {
  if (!request.contains(name) || request[name].is_null()) return fallback;
  if (!request[name].is_boolean()) throw invalid(std::string("`") + name + "` must be a boolean");
  return request[name].get<bool>();
}

// `name`: a string or a non-empty list of strings.
std::vector<std::string> texts(const json& request, const char* name) {
  const std::string field = std::string("`") + name + "`";
  if (!request.contains(name)) throw invalid(field + " is required");
  const json& v = request[name];
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) throw invalid(field + " must be a string or a list of strings");
  if (v.empty()) throw invalid(field + " cannot be empty");
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) throw invalid(field + "[" + std::to_string(i) + "] must be a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

bool is_pair(const json& v) { return v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string(); }

// /predict's inputs as TEI reads them: a string, a pair [a, b], or a list of strings, [str] or pairs.
std::vector<Item> predict_items(const json& request, bool* batch) {
  if (!request.contains("inputs")) throw invalid("`inputs` is required");
  const json& v = request["inputs"];
  *batch = false;
  if (v.is_string()) return {{v.get<std::string>(), "", false}};
  if (is_pair(v)) return {{v[0].get<std::string>(), v[1].get<std::string>(), true}};
  if (!v.is_array()) throw invalid("`inputs` must be a string, a pair [a, b] or a list of them");
  if (v.empty()) throw invalid("`inputs` cannot be empty");
  *batch = true;
  std::vector<Item> items;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& x = v[i];
    if (x.is_string()) {
      items.push_back({x.get<std::string>(), "", false});
    } else if (x.is_array() && x.size() == 1 && x[0].is_string()) {
      items.push_back({x[0].get<std::string>(), "", false});
    } else if (is_pair(x)) {
      items.push_back({x[0].get<std::string>(), x[1].get<std::string>(), true});
    } else {
      throw invalid("`inputs`[" + std::to_string(i) + "] must be a string, [string] or a pair [a, b]");
    }
  }
  return items;
}

void normalize(std::vector<float>& v) {  // torch F.normalize: v / max(|v|, 1e-12)
  double norm = 0;
  for (float x : v) norm += static_cast<double>(x) * x;
  norm = std::max(std::sqrt(norm), 1e-12);
  for (float& x : v) x = static_cast<float>(x / norm);
}

// TEI's [{"score", "label"}], highest first; raw: the head's logits instead of the scores.
json sorted_scores(const serve::Classification& c, const std::vector<std::string>& labels, bool raw) {
  const std::vector<double>& v = raw ? c.logits : c.scores;
  std::vector<size_t> order(v.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return v[x] > v[y]; });
  json out = json::array();
  for (size_t i : order) out.push_back({{"score", v[i]}, {"label", labels[i]}});
  return out;
}

}  // namespace

Api::Api(serve::Pipeline& pipeline, Scheduler& scheduler, const ApiOptions& options)
    : pipeline_(pipeline), scheduler_(scheduler), options_(options) {}

std::vector<text::Encoding> Api::encode(const std::vector<std::string>& first, const std::vector<std::string>& second,
                                        bool truncate) const {
  if (static_cast<int64_t>(first.size()) > options_.max_client_batch_size) {
    throw ApiError(413, "Validation", "batch size " + std::to_string(first.size()) + " > maximum allowed batch size " +
                                          std::to_string(options_.max_client_batch_size));
  }
  const int64_t limit = pipeline_.max_length();
  const text::EncodeOptions eo = serve::encode_options({.enabled = truncate}, limit);
  std::vector<text::Encoding> out;
  for (size_t i = 0; i < first.size(); ++i) {
    const bool pair = i < second.size() && !second[i].empty();
    out.push_back(pair ? pipeline_.tokenizer().encode_pair(first[i], second[i], eo)
                       : pipeline_.tokenizer().encode(first[i], eo));
    if (static_cast<int64_t>(out.back().size()) > limit) {
      throw ApiError(413, "Validation", "input " + std::to_string(i) + " must have less than " +
                                            std::to_string(limit) + " tokens. Given: " +
                                            std::to_string(out.back().size()) + " (set `truncate` to cut it)");
    }
  }
  try {
    pipeline_.check(out);
  } catch (const serve::InputError& e) {
    throw invalid("input " + std::to_string(e.index) + ": " + e.what());
  }
  return out;
}

Output Api::run(Task task, std::vector<text::Encoding> encodings) {
  std::future<Output> f;
  try {
    f = scheduler_.submit(task, std::move(encodings));
  } catch (const Overloaded& e) {
    throw ApiError(429, "Overloaded", e.what());
  }
  try {
    return f.get();
  } catch (const std::exception& e) {
    throw ApiError(500, "Backend", e.what());
  }
}

std::vector<std::vector<float>> Api::embed_texts(const std::vector<std::string>& t, bool truncate, bool norm,
                                                 int64_t* tokens) {
  std::vector<text::Encoding> enc = encode(t, {}, truncate);
  if (tokens) {
    *tokens = 0;
    for (const auto& e : enc) *tokens += static_cast<int64_t>(e.size());
  }
  std::vector<std::vector<float>> out = run(Task::embed, std::move(enc)).embeddings;
  if (norm) {
    for (auto& v : out) normalize(v);
  }
  return out;
}

json Api::embed(const json& request) {
  require_object(request);
  const bool truncate = flag(request, "truncate", options_.auto_truncate);
  const bool norm = flag(request, "normalize", true);
  return embed_texts(texts(request, "inputs"), truncate, norm);
}

json Api::openai_embeddings(const json& request) {
  require_object(request);
  std::string format = "float";
  if (request.contains("encoding_format") && !request["encoding_format"].is_null()) {
    if (!request["encoding_format"].is_string()) throw invalid("`encoding_format` must be \"float\" or \"base64\"");
    format = request["encoding_format"].get<std::string>();
    if (format != "float" && format != "base64") throw invalid("`encoding_format` must be \"float\" or \"base64\"");
  }
  if (request.contains("dimensions") && !request["dimensions"].is_null()) {
    throw invalid("`dimensions` is not supported: the model gives " + std::to_string(pipeline_.config().hidden_size));
  }
  int64_t tokens = 0;
  const auto vectors = embed_texts(texts(request, "input"), options_.auto_truncate, true, &tokens);
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (format == "base64") {
      std::string bytes(vectors[i].size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), vectors[i].data(), bytes.size());  // little-endian float32, as OpenAI's
      e["embedding"] = base64(bytes);
    } else {
      e["embedding"] = vectors[i];
    }
    data.push_back(std::move(e));
  }
  const bool named = request.contains("model") && request["model"].is_string();
  return {{"object", "list"},
          {"data", std::move(data)},
          {"model", named ? request["model"].get<std::string>() : options_.model_id},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

json Api::predict(const json& request) {
  require_object(request);
  if (!pipeline_.classifier()) {
    throw ApiError(424, "Backend", "model is not a classifier: " + options_.model_id +
                                       " has no sequence-classification head (use /embed)");
  }
  const bool raw = flag(request, "raw_scores", false);
  bool batch = false;
  const std::vector<Item> items = predict_items(request, &batch);
  std::vector<std::string> a, b;
  for (const Item& i : items) {
    a.push_back(i.a);
    b.push_back(i.pair ? i.b : "");
  }
  const bool truncate = flag(request, "truncate", options_.auto_truncate);
  const auto classes = run(Task::classify, encode(a, b, truncate)).classes;
  const std::vector<std::string>& labels = pipeline_.classifier()->labels;
  if (!batch) return sorted_scores(classes.at(0), labels, raw);
  json out = json::array();
  for (const auto& c : classes) out.push_back(sorted_scores(c, labels, raw));
  return out;
}

json Api::similarity(const json& request) {
  require_object(request);
  if (!request.contains("inputs") || !request["inputs"].is_object()) {
    throw invalid("`inputs` must be an object {\"source_sentence\": str, \"sentences\": [str]}");
  }
  const json& in = request["inputs"];
  if (!in.contains("source_sentence") || !in["source_sentence"].is_string()) {
    throw invalid("`inputs.source_sentence` must be a string");
  }
  std::vector<std::string> all = {in["source_sentence"].get<std::string>()};
  for (std::string& s : texts(in, "sentences")) all.push_back(std::move(s));
  const auto e = embed_texts(all, flag(request, "truncate", options_.auto_truncate), false);
  json out = json::array();
  for (size_t i = 1; i < e.size(); ++i) out.push_back(serve::cosine(e[0], e[i]));
  return out;
}

json Api::tokenize(const json& request) const {
  require_object(request);
  text::EncodeOptions eo;
  eo.add_special_tokens = flag(request, "add_special_tokens", true);
  json out = json::array();
  for (const std::string& t : texts(request, "inputs")) {
    const text::Encoding e = pipeline_.tokenizer().encode(t, eo);
    json tokens = json::array();
    for (size_t i = 0; i < e.size(); ++i) {
      tokens.push_back({{"id", e.input_ids[i]}, {"text", e.tokens[i]}, {"special", e.special_tokens_mask[i] != 0}});
    }
    out.push_back(std::move(tokens));
  }
  return out;
}

json Api::root(const json& request) { return is_classifier() ? predict(request) : embed(request); }

json Api::info() const {
  json type;
  if (const serve::Classifier* c = pipeline_.classifier()) {
    json id2label = json::object(), label2id = json::object();
    for (size_t i = 0; i < c->labels.size(); ++i) {
      id2label[std::to_string(i)] = c->labels[i];
      label2id[c->labels[i]] = i;
    }
    type["classifier"] = {{"id2label", id2label}, {"label2id", label2id}};
  } else {
    type["embedding"] = {{"pooling", serve::pooling_name(options_.scheduler.pooling)}};
  }
  const SchedulerOptions& s = options_.scheduler;
  return {{"model_id", options_.model_id},
          {"model_sha", nullptr},
          {"model_dtype", "float32"},
          {"model_type", type},
          {"max_concurrent_requests", s.max_concurrent_requests},
          {"max_input_length", pipeline_.max_length()},
          {"max_batch_tokens", s.max_batch_tokens},
          {"max_batch_requests", s.max_batch_requests > 0 ? json(s.max_batch_requests) : json(nullptr)},
          {"max_client_batch_size", options_.max_client_batch_size},
          {"auto_truncate", options_.auto_truncate},
          {"tokenization_workers", nullptr},
          {"version", "roformer.cpp"}};
}

json Api::models() const {
  return {{"object", "list"},
          {"data", json::array({{{"id", options_.model_id}, {"object", "model"}, {"created", 0},
                                 {"owned_by", "roformer.cpp"}}})}};
}

std::string base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

}  // namespace server
