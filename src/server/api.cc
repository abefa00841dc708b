// server::Api: request validation (every refusal names its field), tokenization with TEI's
// truncate / 413 rules, and the TEI, OpenAI and fill-mask response shapes.
#include "server/api.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstring>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>

#include "base/utf8.h"
#include "infer/fill_mask.h"

namespace server {
namespace {

using nlohmann::json;

Input text_input(std::string a) {
  Input in;
  in.a = std::move(a);
  return in;
}

Input pair_input(std::string a, std::string b) {
  Input in = text_input(std::move(a));
  in.b = std::move(b);
  in.pair = true;
  return in;
}

Input ids_input(std::vector<int32_t> ids) {
  Input in;
  in.ids = std::move(ids);
  in.tokens = true;
  return in;
}

ApiError invalid(const std::string& message) { return ApiError(422, "Validation", message); }

const json& require_object(const json& request) {
  if (!request.is_object()) throw invalid("the request body must be a JSON object");
  return request;
}

bool present(const json& request, const char* name) { return request.contains(name) && !request[name].is_null(); }

bool flag(const json& request, const char* name, bool fallback) {
  if (!present(request, name)) return fallback;
  if (!request[name].is_boolean()) throw invalid(std::string("`") + name + "` must be a boolean");
  return request[name].get<bool>();
}

// TEI's truncate and truncation_direction ("Right" / "Left"; either case is taken).
infer::Truncate truncation(const json& request, bool auto_truncate) {
  infer::Truncate t;
  t.enabled = flag(request, "truncate", auto_truncate);
  if (present(request, "truncation_direction")) {
    const json& d = request["truncation_direction"];
    std::string side = d.is_string() ? d.get<std::string>() : "";
    std::transform(side.begin(), side.end(), side.begin(), [](unsigned char c) { return std::tolower(c); });
    if (side != "right" && side != "left") throw invalid("`truncation_direction` must be \"right\" or \"left\"");
    t.side = side == "left" ? text::Side::Left : text::Side::Right;
  }
  return t;
}

bool is_ids(const json& v) {
  return v.is_array() && !v.empty() &&
         std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_number_integer(); });
}

// A list of token ids, each within int32 (the model's own range is Pipeline::check's).
std::vector<int32_t> token_ids(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) throw invalid(field + " must be a non-empty list of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& x = v[i];
    const bool fits = x.is_number_unsigned() ? x.get<uint64_t>() <= INT32_MAX
                                             : x.is_number_integer() && x.get<int64_t>() >= INT32_MIN &&
                                                   x.get<int64_t>() <= INT32_MAX;
    if (!fits) throw invalid(field + "[" + std::to_string(i) + "] must be a token id (a 32-bit integer)");
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

// `name`: a string or a non-empty list of strings; with ids, also a list of token ids or of such lists.
std::vector<Input> inputs(const json& request, const char* name, bool ids = true) {
  const std::string field = std::string("`") + name + "`";
  if (!request.contains(name)) throw invalid(field + " is required");
  const json& v = request[name];
  if (v.is_string()) return {text_input(v.get<std::string>())};
  if (!v.is_array()) {
    throw invalid(field + (ids ? " must be a string, a list of strings, a list of token ids or a list of such lists"
                               : " must be a string or a list of strings"));
  }
  if (v.empty()) throw invalid(field + " cannot be empty");
  if (ids && is_ids(v)) return {ids_input(token_ids(v, field))};
  std::vector<Input> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (v[i].is_string()) {
      out.push_back(text_input(v[i].get<std::string>()));
    } else if (ids && v[i].is_array()) {
      out.push_back(ids_input(token_ids(v[i], at)));
    } else {
      throw invalid(at + (ids ? " must be a string or a list of token ids" : " must be a string"));
    }
  }
  return out;
}

// `name`: a non-empty list of strings (/rerank's texts, /similarity's sentences: a lone string is refused).
std::vector<Input> text_list(const json& request, const char* name) {
  if (present(request, name) && request[name].is_string()) {
    throw invalid(std::string("`") + name + "` must be a list of strings");
  }
  return inputs(request, name, false);
}

bool is_pair(const json& v) { return v.is_array() && v.size() == 2 && v[0].is_string() && v[1].is_string(); }

// /predict's inputs as TEI reads them: a string, a pair [a, b], or a list of strings, [str] or pairs.
std::vector<Input> predict_inputs(const json& request, bool* batch) {
  if (!request.contains("inputs")) throw invalid("`inputs` is required");
  const json& v = request["inputs"];
  *batch = false;
  if (v.is_string()) return {text_input(v.get<std::string>())};
  if (is_pair(v)) return {pair_input(v[0].get<std::string>(), v[1].get<std::string>())};
  if (!v.is_array()) throw invalid("`inputs` must be a string, a pair [a, b] or a list of them");
  if (v.empty()) throw invalid("`inputs` cannot be empty");
  *batch = true;
  std::vector<Input> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const json& x = v[i];
    if (x.is_string()) {
      out.push_back(text_input(x.get<std::string>()));
    } else if (x.is_array() && x.size() == 1 && x[0].is_string()) {
      out.push_back(text_input(x[0].get<std::string>()));
    } else if (is_pair(x)) {
      out.push_back(pair_input(x[0].get<std::string>(), x[1].get<std::string>()));
    } else {
      throw invalid("`inputs`[" + std::to_string(i) + "] must be a string, [string] or a pair [a, b]");
    }
  }
  return out;
}

// Client-given ids as one sequence: type 0, all attended, none marked special (nothing was added);
// truncate cuts them to `limit` from its side.
text::Encoding ids_encoding(const text::RoFormerTokenizer& tok, std::vector<int32_t> ids,
                            const infer::Truncate& truncate, int64_t limit) {
  if (truncate.enabled && static_cast<int64_t>(ids.size()) > limit) {
    const auto cut = static_cast<std::ptrdiff_t>(ids.size() - static_cast<size_t>(limit));
    if (truncate.side == text::Side::Left) {
      ids.erase(ids.begin(), ids.begin() + cut);
    } else {
      ids.resize(static_cast<size_t>(limit));
    }
  }
  text::Encoding e;
  // An id outside the vocabulary has no token (not the unknown token: the error names the id).
  for (int32_t id : ids) e.tokens.push_back(id >= 0 && id < tok.vocab_size() ? tok.id_to_token(id) : "");
  e.input_ids = std::move(ids);
  e.token_type_ids.assign(e.input_ids.size(), 0);
  e.attention_mask.assign(e.input_ids.size(), 1);
  e.special_tokens_mask.assign(e.input_ids.size(), 0);
  return e;
}

void normalize(std::vector<float>& v) {  // torch F.normalize: v / max(|v|, 1e-12)
  double norm = 0;
  for (float x : v) norm += static_cast<double>(x) * x;
  norm = std::max(std::sqrt(norm), 1e-12);
  for (float& x : v) x = static_cast<float>(x / norm);
}

// Indices of `scores`, highest first (ties: the earlier first).
std::vector<size_t> best_first(const std::vector<double>& scores) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return scores[x] > scores[y]; });
  return order;
}

// TEI's [{"score", "label"}], highest first; raw: the head's logits instead of the scores.
json sorted_scores(const infer::Classification& c, const std::vector<std::string>& labels, bool raw) {
  const std::vector<double>& v = raw ? c.logits : c.scores;
  json out = json::array();
  for (size_t i : best_first(v)) out.push_back({{"score", v[i]}, {"label", labels[i]}});
  return out;
}

// An integer field within [lo, hi], or fallback when absent.
int64_t integer(const json& request, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  if (!present(request, name)) return fallback;
  const json& v = request[name];
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (!v.is_number_integer()) throw invalid(std::string("`") + name + "` must be an integer in " + range);
  const bool too_large = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX);
  if (too_large || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    throw invalid(std::string("`") + name + "` must be in " + range);
  }
  return v.get<int64_t>();
}

// A real-valued field within [lo, hi], or fallback when absent.
double real(const json& request, const char* name, double fallback, double lo, double hi) {
  if (!present(request, name)) return fallback;
  const json& v = request[name];
  if (!v.is_number() || !(v.get<double>() >= lo && v.get<double>() <= hi)) {
    std::ostringstream range;  // 0 and 4, not 0.0 and 4.0
    range << "[" << lo << ", " << hi << "]";
    throw invalid(std::string("`") + name + "` must be a number in " + range.str());
  }
  return v.get<double>();
}

// The longest a translation request may ask the server to decode: a·(source + eos) + b new tokens
// stay within these, so one request cannot hold the model thread for arbitrarily long.
constexpr double kMaxLenA = 4;
constexpr int64_t kMaxServedBeams = 32;

}  // namespace

Api::Api(Backend backend, Scheduler& scheduler, Metrics& metrics, const ApiOptions& options, Generation* generation)
    : pipeline_(backend.pipeline),
      translator_(backend.translator),
      generation_(generation),
      lm_tokenizer_(backend.lm_tokenizer),
      scheduler_(scheduler),
      metrics_(metrics),
      options_(options) {}

infer::Pipeline& Api::encoder() const {
  if (!pipeline_ && generation_) {
    throw ApiError(424, "Backend", "model is a causal LM: " + options_.model_id +
                                       " answers /generate, /generate_stream and /v1/completions");
  }
  if (!pipeline_) {
    throw ApiError(424, "Backend", "model is a translation model: " + options_.model_id +
                                       " (an encoder-decoder) answers /translate, /tokenize and /decode");
  }
  return *pipeline_;
}

infer::Translator& Api::translator() const {
  if (!translator_) {
    throw ApiError(424, "Backend", "model is not a translation model: " + options_.model_id +
                                       " has no decoder (translate-train writes encoder-decoder directories)");
  }
  return *translator_;
}

void Api::check_batch_size(size_t inputs) const {
  if (static_cast<int64_t>(inputs) > options_.max_client_batch_size) {
    throw ApiError(413, "Validation", "batch size " + std::to_string(inputs) + " > maximum allowed batch size " +
                                          std::to_string(options_.max_client_batch_size));
  }
}

std::vector<text::Encoding> Api::encode(const std::vector<Input>& in, const infer::Truncate& truncate) const {
  check_batch_size(in.size());
  const auto start = std::chrono::steady_clock::now();
  const int64_t limit = encoder().max_length();
  const text::EncodeOptions eo = infer::encode_options(truncate, limit);
  const text::RoFormerTokenizer& tok = encoder().tokenizer();
  std::vector<text::Encoding> out;
  for (size_t i = 0; i < in.size(); ++i) {
    out.push_back(in[i].tokens ? ids_encoding(tok, in[i].ids, truncate, limit)
                  : in[i].pair ? tok.encode_pair(in[i].a, in[i].b, eo)
                               : tok.encode(in[i].a, eo));
    if (static_cast<int64_t>(out.back().size()) > limit) {
      throw ApiError(413, "Validation", "input " + std::to_string(i) + " must have at most " +
                                            std::to_string(limit) + " tokens. Given: " +
                                            std::to_string(out.back().size()) + " (set `truncate` to cut it)");
    }
  }
  try {
    encoder().check(out);
  } catch (const infer::InputError& e) {
    throw invalid("input " + std::to_string(e.index) + ": " + e.what());
  }
  metrics_.tokenized(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out;
}

Output Api::run(Task task, std::vector<text::Encoding> encodings, int64_t top_k, std::vector<int64_t> skip) {
  Ticket t;
  try {
    t = scheduler_.submit(task, std::move(encodings), top_k, std::move(skip));
  } catch (const Overloaded& e) {
    throw ApiError(429, "Overloaded", e.what());
  }
  return wait(t);
}

// While the request is queued, its connection is probed every 50 ms: a client that has gone (closed
// or reset) takes its request out of the queue, so the model's time goes to those still waiting.
Output Api::wait(Ticket& t) {
  bool probing = static_cast<bool>(options_.client_gone);
  while (probing && t.answer.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    if (options_.client_gone()) {
      scheduler_.cancel(t.id);  // queued: answered Cancelled at once; running already: its answer comes
      probing = false;
    }
  }
  try {
    return t.answer.get();
  } catch (const Cancelled& e) {
    throw ApiError(499, "ClientClosed", e.what());  // nginx's status; nobody reads it but the log
  } catch (const TimedOut& e) {
    throw ApiError(503, "Overloaded", e.what());
  } catch (const std::exception& e) {
    throw ApiError(500, "Backend", e.what());
  }
}

std::vector<int64_t> Api::apply_prompt(std::vector<Input>& in, const json* prompt_name) const {
  // The request's prompt_name, else --default-prompt-name, else the folder's default_prompt_name; put
  // before each text, as SentenceTransformer.encode does.
  std::string name = options_.default_prompt_name;
  if (prompt_name && !prompt_name->is_null()) {
    if (!prompt_name->is_string() || prompt_name->get<std::string>().empty() || prompt_name->get<std::string>().size() > 256) {
      throw invalid("`prompt_name` must be a non-empty string of at most 256 bytes");
    }
    name = prompt_name->get<std::string>();
  }
  std::string prompt;
  try {
    prompt = encoder().prompt(name);
  } catch (const io::Error& e) {
    throw invalid(std::string("`prompt_name`: ") + e.what());
  }
  std::vector<int64_t> skip;
  if (prompt.empty()) return skip;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].tokens) throw invalid("input " + std::to_string(i) + ": token ids take no prompt (`prompt_name`)");
    in[i].a = prompt + in[i].a;
  }
  if (const int64_t n = encoder().prompt_tokens(prompt); n > 0) skip.assign(in.size(), n);
  return skip;
}

std::vector<std::vector<float>> Api::embed_inputs(std::vector<Input> in, const infer::Truncate& truncate,
                                                  bool norm, int64_t* tokens, const json* prompt_name) {
  std::vector<int64_t> skip = apply_prompt(in, prompt_name);
  std::vector<text::Encoding> enc = encode(in, truncate);
  if (tokens) {
    *tokens = 0;
    for (const auto& e : enc) *tokens += static_cast<int64_t>(e.size());
  }
  std::vector<std::vector<float>> out = run(Task::embed, std::move(enc), 0, std::move(skip)).embeddings;
  if (norm) {
    for (auto& v : out) normalize(v);
  }
  return out;
}

json Api::embed(const json& request) {
  require_object(request);
  const bool norm = flag(request, "normalize", true);
  return embed_inputs(inputs(request, "inputs"), truncation(request, options_.auto_truncate), norm, nullptr,
                      request.contains("prompt_name") ? &request["prompt_name"] : nullptr);
}

json Api::openai_embeddings(const json& request) {
  require_object(request);
  std::string format = "float";
  if (present(request, "encoding_format")) {
    if (!request["encoding_format"].is_string()) throw invalid("`encoding_format` must be \"float\" or \"base64\"");
    format = request["encoding_format"].get<std::string>();
    if (format != "float" && format != "base64") throw invalid("`encoding_format` must be \"float\" or \"base64\"");
  }
  const int64_t H = encoder().embedding_size(options_.scheduler.pooling);
  if (present(request, "dimensions") && (!request["dimensions"].is_number_integer() ||
                                         request["dimensions"].get<int64_t>() != H)) {
    throw invalid("`dimensions` must be the model's " + std::to_string(H) +
                  " (its vectors are not trained to be cut shorter)");
  }
  int64_t tokens = 0;
  const auto vectors = embed_inputs(inputs(request, "input"), {.enabled = options_.auto_truncate}, true, &tokens,
                                    request.contains("prompt_name") ? &request["prompt_name"] : nullptr);
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
  if (!encoder().classifier()) {
    throw ApiError(424, "Backend", "model is not a classifier: " + options_.model_id +
                                       " has no sequence-classification head (use /embed)");
  }
  const bool raw = flag(request, "raw_scores", false);
  bool batch = false;
  const std::vector<Input> in = predict_inputs(request, &batch);
  const auto classes = run(Task::classify, encode(in, truncation(request, options_.auto_truncate))).classes;
  const std::vector<std::string>& labels = encoder().classifier()->labels;
  if (!batch) return sorted_scores(classes.at(0), labels, raw);
  json out = json::array();
  for (const auto& c : classes) out.push_back(sorted_scores(c, labels, raw));
  return out;
}

std::vector<double> Api::rerank_scores(const std::string& query, const std::vector<Input>& texts,
                                       const infer::Truncate& truncate, bool raw, int64_t* tokens) {
  const infer::Classifier* head = encoder().classifier();
  if (head && head->num_labels() != 1) {
    throw ApiError(424, "Backend", "model is not a re-ranker: " + options_.model_id + "'s classifier has " +
                                       std::to_string(head->num_labels()) + " labels (a re-ranker has one)");
  }
  std::vector<double> scores;
  if (head) {  // a cross-encoder: one logit per (query, text), its sigmoid unless raw_scores (as TEI)
    std::vector<Input> pairs;
    for (const Input& t : texts) pairs.push_back(pair_input(query, t.a));
    std::vector<text::Encoding> enc = encode(pairs, truncate);
    for (const auto& e : enc) *tokens += static_cast<int64_t>(e.size());
    for (const auto& c : run(Task::classify, std::move(enc)).classes) {
      const double logit = c.logits.at(0);
      scores.push_back(raw ? logit : 1 / (1 + std::exp(-logit)));
    }
  } else {  // an embedding model: the cosine of the query's and each text's vectors
    std::vector<Input> all = {text_input(query)};
    all.insert(all.end(), texts.begin(), texts.end());
    const auto e = embed_inputs(all, truncate, false, tokens);
    for (size_t i = 1; i < e.size(); ++i) scores.push_back(infer::cosine(e[0], e[i]));
  }
  return scores;
}

json Api::rerank(const json& request) {
  require_object(request);
  encoder();
  if (!present(request, "query") || !request["query"].is_string()) throw invalid("`query` must be a string");
  const std::string query = request["query"].get<std::string>();
  const std::vector<Input> texts = text_list(request, "texts");
  const bool raw = flag(request, "raw_scores", false), return_text = flag(request, "return_text", false);
  int64_t tokens = 0;
  const std::vector<double> scores = rerank_scores(query, texts, truncation(request, options_.auto_truncate), raw, &tokens);
  json out = json::array();
  for (size_t i : best_first(scores)) {
    json r = {{"index", i}, {"score", scores[i]}};
    if (return_text) r["text"] = texts[i].a;
    out.push_back(std::move(r));
  }
  return out;
}

json Api::v1_rerank(const json& request) {
  require_object(request);
  encoder();
  if (!present(request, "query") || !request["query"].is_string()) throw invalid("`query` must be a string");
  const std::string query = request["query"].get<std::string>();
  if (!present(request, "documents") || !request["documents"].is_array()) {
    throw invalid("`documents` must be a list of strings or of {\"text\": str} objects");
  }
  const json& docs = request["documents"];
  if (docs.empty()) throw invalid("`documents` cannot be empty");
  check_batch_size(docs.size());
  std::vector<Input> texts;
  for (size_t i = 0; i < docs.size(); ++i) {
    const json& d = docs[i];
    if (d.is_string()) {
      texts.push_back(text_input(d.get<std::string>()));
    } else if (d.is_object() && d.contains("text") && d["text"].is_string()) {
      texts.push_back(text_input(d["text"].get<std::string>()));
    } else {
      throw invalid("`documents[" + std::to_string(i) + "]` must be a string or an object {\"text\": str}");
    }
  }
  const int64_t top_n = integer(request, "top_n", static_cast<int64_t>(texts.size()), 1, int64_t{1} << 20);
  const bool return_documents = flag(request, "return_documents", true);
  int64_t tokens = 0;
  const std::vector<double> scores = rerank_scores(query, texts, {.enabled = options_.auto_truncate}, false, &tokens);
  json results = json::array();
  for (size_t i : best_first(scores)) {
    if (static_cast<int64_t>(results.size()) >= top_n) break;
    json r = {{"index", i}, {"relevance_score", scores[i]}};
    if (return_documents) r["document"] = {{"text", texts[i].a}};
    results.push_back(std::move(r));
  }
  const bool named = request.contains("model") && request["model"].is_string();
  return {{"object", "list"},
          {"model", named ? request["model"].get<std::string>() : options_.model_id},
          {"results", std::move(results)},
          {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
}

json Api::embed_all(const json& request) {
  require_object(request);
  std::vector<Input> in = inputs(request, "inputs");
  apply_prompt(in, request.contains("prompt_name") ? &request["prompt_name"] : nullptr);  // every token is given
  const size_t H = static_cast<size_t>(encoder().config().hidden_size);
  const auto rows = run(Task::tokens, encode(in, truncation(request, options_.auto_truncate))).tokens;
  json out = json::array();
  for (const std::vector<float>& r : rows) {
    json tokens = json::array();
    for (size_t at = 0; at < r.size(); at += H) tokens.push_back(std::vector<float>(r.begin() + at, r.begin() + at + H));
    out.push_back(std::move(tokens));
  }
  return out;
}

json Api::embed_sparse(const json& request) {
  require_object(request);
  if (!encoder().has_masked_lm_head()) {
    throw ApiError(424, "Backend", "model has no masked-LM head: " + options_.model_id +
                                       " gives no sparse (SPLADE) vectors (they are read from RoFormerForMaskedLM's head)");
  }
  std::vector<Input> in = inputs(request, "inputs");
  apply_prompt(in, request.contains("prompt_name") ? &request["prompt_name"] : nullptr);
  const auto rows = run(Task::sparse, encode(in, truncation(request, options_.auto_truncate))).sparse;
  json out = json::array();
  for (const auto& r : rows) {
    json values = json::array();
    for (const infer::SparseValue& v : r) values.push_back({{"index", v.index}, {"value", v.value}});
    out.push_back(std::move(values));
  }
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
  std::vector<Input> all = {text_input(in["source_sentence"].get<std::string>())};
  for (Input& s : text_list(in, "sentences")) all.push_back(std::move(s));
  const auto e = embed_inputs(all, truncation(request, options_.auto_truncate), false);
  json out = json::array();
  for (size_t i = 1; i < e.size(); ++i) out.push_back(infer::cosine(e[0], e[i]));
  return out;
}

json Api::fill_mask(const json& request) {
  require_object(request);
  infer::Pipeline& pipeline = encoder();
  try {
    infer::check_fill_mask(pipeline);
  } catch (const std::exception& e) {
    throw ApiError(424, "Backend", std::string("model cannot fill masks: ") + e.what());
  }
  const json params = present(request, "parameters") ? request["parameters"] : json::object();
  if (!params.is_object()) throw invalid("`parameters` must be an object");
  if (present(params, "targets")) throw invalid("`parameters.targets` is not supported: every token is a candidate");
  const int64_t top_k = integer(params, "top_k", integer(request, "top_k", 5, 1, 1000), 1, 1000);
  const bool single = request.contains("inputs") && request["inputs"].is_string();
  const infer::Truncate truncate = truncation(request, options_.auto_truncate);
  std::vector<text::Encoding> enc = encode(inputs(request, "inputs", false), truncate);
  try {
    infer::mask_positions(pipeline, enc);
  } catch (const infer::InputError& e) {
    throw invalid("input " + std::to_string(e.index) + ": " + e.what());
  }
  const auto masks = run(Task::fill_mask, std::move(enc), top_k).masks;
  json out = json::array();
  for (const auto& m : masks) out.push_back(json::parse(infer::fill_mask_json(m)));
  return single ? out.at(0) : out;
}

namespace {

// A pipeline request's `parameters` object (absent: empty); every key must be one of `known`, so that
// no option is silently ignored.
json pipeline_parameters(const json& request, std::initializer_list<const char*> known) {
  const json params = present(request, "parameters") ? request["parameters"] : json::object();
  if (!params.is_object()) throw invalid("`parameters` must be an object");
  for (const auto& [key, value] : params.items()) {
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return key == k; })) {
      std::string names;
      for (const char* k : known) names += (names.empty() ? "" : ", ") + std::string(k);
      throw invalid("`parameters." + key + "` is not supported (supported: " + names + ")");
    }
  }
  return params;
}

}  // namespace

json Api::token_classification(const json& request) {
  require_object(request);
  if (!has_head("RoFormerForTokenClassification")) {
    throw ApiError(424, "Backend", "model is not a token classifier: " + options_.model_id +
                                       " has no RoFormerForTokenClassification head");
  }
  const json params = pipeline_parameters(request, {"aggregation_strategy", "ignore_labels"});
  model::Aggregation aggregation = model::Aggregation::simple;
  if (present(params, "aggregation_strategy")) {
    try {
      if (!params["aggregation_strategy"].is_string()) throw std::invalid_argument("it must be a string");
      aggregation = model::parse_aggregation(params["aggregation_strategy"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw invalid(std::string("`parameters.aggregation_strategy`: ") + e.what());
    }
  }
  std::vector<std::string> ignore = {"O"};
  if (present(params, "ignore_labels")) {
    const json& v = params["ignore_labels"];
    if (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); })) {
      throw invalid("`parameters.ignore_labels` must be a list of strings");
    }
    ignore = v.get<std::vector<std::string>>();
  }
  const std::vector<Input> in = inputs(request, "inputs", false);
  std::vector<text::Encoding> enc = encode(in, truncation(request, options_.auto_truncate));
  const std::vector<text::Encoding> kept = enc;  // the offsets, for the entities
  const auto logits = run(Task::head, std::move(enc)).head_logits;
  const char* label = aggregation == model::Aggregation::none ? "entity" : "entity_group";
  json out = json::array();
  for (size_t i = 0; i < in.size(); ++i) {
    json list = json::array();
    for (const model::TokenEntity& e : encoder().entities(in[i].a, kept[i], logits[i], aggregation, ignore)) {
      json j = {{label, e.label}, {"score", e.score}, {"word", e.word}, {"start", e.start}, {"end", e.end}};
      if (e.index >= 0) j["index"] = e.index;
      list.push_back(std::move(j));
    }
    out.push_back(std::move(list));
  }
  return request["inputs"].is_string() ? out.at(0) : out;
}

json Api::question_answering(const json& request) {
  require_object(request);
  if (!has_head("RoFormerForQuestionAnswering")) {
    throw ApiError(424, "Backend", "model does not answer questions: " + options_.model_id +
                                       " has no RoFormerForQuestionAnswering head");
  }
  // {"inputs": {"question", "context"}} (the pipelines' hosted form, also a list of them) or
  // {"question", "context"} (huggingface_hub's question_answering).
  const json& body = present(request, "inputs") ? request["inputs"] : request;
  const bool single = !body.is_array();
  std::vector<infer::Question> questions;
  for (size_t i = 0; i < (single ? 1 : body.size()); ++i) {
    const json& q = single ? body : body[i];
    const std::string at = present(request, "inputs") ? single ? "`inputs`" : "`inputs[" + std::to_string(i) + "]`" : "the body";
    if (!q.is_object() || !q.contains("question") || !q.contains("context") || !q["question"].is_string() ||
        !q["context"].is_string()) {
      throw invalid(at + " must be {\"question\": string, \"context\": string}");
    }
    questions.push_back({q["question"].get<std::string>(), q["context"].get<std::string>()});
  }
  if (questions.empty()) throw invalid("`inputs` cannot be empty");
  check_batch_size(questions.size());
  const json params = pipeline_parameters(request, {"top_k", "doc_stride", "max_answer_len", "max_seq_len",
                                                    "max_question_len", "handle_impossible_answer", "align_to_words"});
  infer::QaOptions o;
  o.top_k = integer(params, "top_k", 1, 1, 1000);
  o.max_answer_length = integer(params, "max_answer_len", 15, 1, 1 << 20);
  o.max_seq_len = integer(params, "max_seq_len", 0, 4, encoder().max_length());
  o.doc_stride = integer(params, "doc_stride", 0, 1, 1 << 20);
  integer(params, "max_question_len", 64, 1, 1 << 20);  // transformers' slow-tokenizer path only
  o.handle_impossible_answer = flag(params, "handle_impossible_answer", false);
  o.align_to_words = flag(params, "align_to_words", true);
  infer::Pipeline::Windows windows;
  try {
    windows = encoder().question_windows(questions, o);
  } catch (const infer::InputError& e) {
    throw invalid((single ? std::string("the question: ") : "input " + std::to_string(e.index) + ": ") + e.what());
  }
  // A long context makes many windows: one request may not hold the model longer than a full batch of
  // the longest inputs would (max_client_batch_size inputs of max_input_length tokens).
  int64_t tokens = 0;
  for (const text::Encoding& w : windows.encodings) tokens += static_cast<int64_t>(w.size());
  const int64_t budget = options_.max_client_batch_size * encoder().max_length();
  if (tokens > budget) {
    throw ApiError(413, "Validation", "the contexts make " + std::to_string(windows.encodings.size()) + " windows of " +
                                          std::to_string(tokens) + " tokens in all, more than " + std::to_string(budget) +
                                          " (max_client_batch_size x max_input_length); send shorter contexts or a "
                                          "larger doc_stride");
  }
  const auto logits = run(Task::head, windows.encodings).head_logits;
  json out = json::array();
  const auto answers = encoder().answers(questions.size(), windows, logits, o);
  for (size_t q = 0; q < questions.size(); ++q) {
    json list = json::array();
    for (const model::PipelineAnswer& a : answers[q]) {
      list.push_back({{"score", a.score}, {"start", a.start}, {"end", a.end},
                      {"answer", base::utf8_slice(questions[q].context, a.start, a.end)}});
    }
    out.push_back(list.size() == 1 ? list[0] : list);  // transformers: one answer is an object
  }
  return single || out.size() == 1 ? out.at(0) : out;  // and so is the answer to a list of one
}

namespace {

// /translate's `parameters`, with huggingface_hub's `generate_parameters` merged in (the outer ones
// win); a key that is not one of /translate's is refused, so that no option is silently ignored.
json translation_parameters(const json& request) {
  json params = present(request, "parameters") ? request["parameters"] : json::object();
  if (!params.is_object()) throw invalid("`parameters` must be an object");
  if (present(params, "generate_parameters")) {
    if (!params["generate_parameters"].is_object()) throw invalid("`parameters.generate_parameters` must be an object");
    json merged = params["generate_parameters"];
    params.erase("generate_parameters");
    merged.update(params);
    params = std::move(merged);
  }
  static const char* kKnown[] = {"num_beams", "num_return_sequences", "length_penalty", "early_stopping",
                                 "max_new_tokens", "max_len_a", "max_len_b", "min_new_tokens",
                                 "no_repeat_ngram_size", "do_sample", "temperature", "top_k", "top_p", "seed",
                                 "truncation", "clean_up_tokenization_spaces", "src_lang", "tgt_lang"};
  for (const auto& [key, value] : params.items()) {
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return key == k; }) == std::end(kKnown)) {
      throw invalid("`parameters." + key + "` is not supported (see /openapi.json for /translate's parameters)");
    }
  }
  return params;
}

// /translate's truncation: TEI's `truncate` / `truncation_direction`, or transformers' `truncation`
// (a bool or a strategy name) in `parameters` (translation_parameters').
infer::Truncate translation_truncation(const json& request, const json& params, bool auto_truncate) {
  infer::Truncate truncate = truncation(request, auto_truncate);
  if (!present(params, "truncation")) return truncate;
  const json& v = params["truncation"];
  if (v.is_boolean()) {
    truncate.enabled = v.get<bool>();
  } else if (v.is_string() && (v == "do_not_truncate" || v == "longest_first" || v == "only_first")) {
    truncate.enabled = v != "do_not_truncate";
  } else {
    throw invalid("`parameters.truncation` must be a boolean, \"do_not_truncate\", \"longest_first\" or \"only_first\"");
  }
  return truncate;
}

// transformers' translation pipeline: [{"translation_text"}] for a text (nbest of them); for a list,
// one such object per text, or a list of nbest objects per text when nbest > 1.
json translation_json(const std::vector<std::vector<infer::Translation>>& translations, bool single, int64_t nbest) {
  auto hypotheses = [](const std::vector<infer::Translation>& n) {
    json out = json::array();
    for (const infer::Translation& h : n) out.push_back({{"translation_text", h.text}});
    return out;
  };
  if (single) return hypotheses(translations.at(0));
  json out = json::array();
  for (const auto& n : translations) out.push_back(nbest == 1 ? hypotheses(n).at(0) : hypotheses(n));
  return out;
}

}  // namespace

int64_t Api::max_new_tokens() const { return translator().model().config().decoder.max_position_embeddings - 1; }

// /translate's decoding: `roformer translate`'s defaults (beam 4, a = 1.5, b = 10), then the request's
// `parameters` (translation_parameters) under transformers' generate() names.
model::DecodeOptions Api::decode_options(const json& params) const {
  if (present(params, "src_lang") || present(params, "tgt_lang")) {
    throw invalid("`parameters.src_lang` / `tgt_lang`: " + options_.model_id + " translates in one direction only");
  }
  flag(params, "clean_up_tokenization_spaces", false);  // checked; SentencePiece's detokenisation has none to clean
  const int64_t cap = max_new_tokens();
  model::DecodeOptions o;
  o.beam_size = integer(params, "num_beams", 4, 1, kMaxServedBeams);
  o.nbest = integer(params, "num_return_sequences", 1, 1, o.beam_size);
  o.length_penalty = real(params, "length_penalty", 1.0, -100, 100);
  o.early_stopping = flag(params, "early_stopping", false);
  o.max_len_a = real(params, "max_len_a", 1.5, 0, kMaxLenA);
  o.max_len_b = integer(params, "max_len_b", 10, 0, cap);
  if (present(params, "max_new_tokens")) {
    if (present(params, "max_len_a") || present(params, "max_len_b")) {
      throw invalid("`parameters.max_new_tokens` replaces `max_len_a` and `max_len_b`: give one or the other");
    }
    o.max_len_a = 0;
    o.max_len_b = integer(params, "max_new_tokens", 0, 1, cap);
  }
  o.min_new_tokens = integer(params, "min_new_tokens", 0, 0, cap);
  o.no_repeat_ngram_size = integer(params, "no_repeat_ngram_size", 0, 0, cap);
  o.sample = flag(params, "do_sample", false);
  o.temperature = real(params, "temperature", 1.0, 0, 1e6);
  o.top_k = integer(params, "top_k", 0, 0, INT32_MAX);
  o.top_p = real(params, "top_p", 1.0, 0, 1);
  o.seed = static_cast<uint64_t>(integer(params, "seed", 0, 0, INT64_MAX));
  if (o.sample && o.beam_size != 1) {
    if (present(params, "num_beams")) throw invalid("`parameters.do_sample` samples with `num_beams` 1");
    o.beam_size = 1;  // generate()'s sampling default
  }
  try {
    model::check_decode_options(o);
  } catch (const std::invalid_argument& e) {
    throw invalid(std::string("`parameters`: ") + e.what());
  }
  return o;
}

json Api::translate(const json& request) {
  require_object(request);
  infer::Translator& t = translator();
  const json params = translation_parameters(request);
  const model::DecodeOptions o = decode_options(params);
  const infer::Truncate truncate = translation_truncation(request, params, options_.auto_truncate);
  const std::vector<Input> in = inputs(request, "inputs", false);
  check_batch_size(in.size());
  const auto start = std::chrono::steady_clock::now();
  const int64_t limit = t.max_source_length();
  std::vector<std::vector<int64_t>> sources;
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<int64_t> ids = t.encode(in[i].a);
    if (static_cast<int64_t>(ids.size()) > limit) {
      if (!truncate.enabled) {
        throw ApiError(413, "Validation", "input " + std::to_string(i) + " must have at most " + std::to_string(limit) +
                                              " subwords before its eos. Given: " + std::to_string(ids.size()) +
                                              " (set `truncate` to cut it)");
      }
      const auto cut = static_cast<std::ptrdiff_t>(ids.size()) - limit;
      if (truncate.side == text::Side::Left) ids.erase(ids.begin(), ids.begin() + cut);
      else ids.resize(static_cast<size_t>(limit));
    }
    sources.push_back(std::move(ids));
  }
  // The step batcher's slots: a source decodes on num_beams rows, and holds its tokens of the budget.
  const SchedulerOptions& so = options_.scheduler;
  if (o.beam_size > so.slots) {
    throw invalid("`parameters.num_beams` " + std::to_string(o.beam_size) + " needs as many slots; this server decodes " +
                  std::to_string(so.slots) + " rows at once (--slots)");
  }
  for (size_t i = 0; i < sources.size() && so.max_total_tokens > 0; ++i) {
    const int64_t need = translation_tokens(t.model().config(), sources[i], o);
    if (!sources[i].empty() && need > so.max_total_tokens) {
      throw invalid("input " + std::to_string(i) + " needs " + std::to_string(need) +
                    " tokens (num_beams x (subwords + eos + new tokens)), more than --max-total-tokens " +
                    std::to_string(so.max_total_tokens));
    }
  }
  metrics_.tokenized(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  Ticket ticket;
  try {
    ticket = scheduler_.submit_translation(std::move(sources), o);
  } catch (const Overloaded& e) {
    throw ApiError(429, "Overloaded", e.what());
  }
  return translation_json(wait(ticket).translations, request["inputs"].is_string(), o.nbest);
}

json Api::tokenize(const json& request) const {
  require_object(request);
  text::EncodeOptions eo;
  eo.add_special_tokens = flag(request, "add_special_tokens", true);
  json out = json::array();
  if (translator_) {  // SentencePiece pieces; the special token added is the eos decoding appends
    const text::SentencePiece& sp = translator_->subwords();
    for (const Input& t : inputs(request, "inputs", false)) {
      json tokens = json::array();
      for (int64_t id : sp.encode(t.a)) tokens.push_back({{"id", id}, {"text", sp.piece(id)}, {"special", false}});
      if (eo.add_special_tokens) tokens.push_back({{"id", sp.eos_id()}, {"text", sp.piece(sp.eos_id())}, {"special", true}});
      out.push_back(std::move(tokens));
    }
    return out;
  }
  for (const Input& t : inputs(request, "inputs", false)) {
    const text::Encoding e = encoder().tokenizer().encode(t.a, eo);
    json tokens = json::array();
    for (size_t i = 0; i < e.size(); ++i) {
      tokens.push_back({{"id", e.input_ids[i]}, {"text", e.tokens[i]}, {"special", e.special_tokens_mask[i] != 0}});
    }
    out.push_back(std::move(tokens));
  }
  return out;
}

json Api::decode(const json& request) const {
  require_object(request);
  if (!request.contains("ids")) throw invalid("`ids` is required");
  const json& v = request["ids"];
  std::vector<std::vector<int32_t>> lists;
  if (is_ids(v)) {
    lists.push_back(token_ids(v, "`ids`"));
  } else if (v.is_array() && !v.empty()) {
    for (size_t i = 0; i < v.size(); ++i) lists.push_back(token_ids(v[i], "`ids`[" + std::to_string(i) + "]"));
  } else {
    throw invalid("`ids` must be a non-empty list of token ids or a list of such lists");
  }
  check_batch_size(lists.size());
  const bool skip = flag(request, "skip_special_tokens", true);
  const int64_t vocab = translator_ ? translator_->subwords().vocab_size() : encoder().tokenizer().vocab_size();
  json out = json::array();
  for (size_t i = 0; i < lists.size(); ++i) {
    for (int32_t id : lists[i]) {
      if (id < 0 || id >= vocab) {
        throw invalid("`ids`: input " + std::to_string(i) + " has id " + std::to_string(id) +
                      ", outside the tokenizer's vocabulary of " + std::to_string(vocab));
      }
    }
    if (translator_) {  // control pieces (pad, bos, eos) decode to nothing either way
      out.push_back(translator_->subwords().decode(std::vector<int64_t>(lists[i].begin(), lists[i].end())));
    } else {
      out.push_back(infer::decode(encoder().tokenizer(), lists[i], skip, encoder().clean_up_tokenization_spaces()));
    }
  }
  return out;
}

json Api::root(const json& request) {
  if (translator_) return translate(request);
  if (generation_) return json::array({generate(request)});  // TGI's compatibility route answers a list
  if (is_classifier()) return predict(request);
  if (has_head("RoFormerForTokenClassification")) return token_classification(request);
  if (has_head("RoFormerForQuestionAnswering")) return question_answering(request);
  if (request.is_object() && request.contains("inputs") && request["inputs"].is_object()) return similarity(request);
  return embed(request);
}

json Api::info() const {
  const SchedulerOptions& s = options_.scheduler;
  json info = {{"model_id", options_.model_id},
               {"model_sha", nullptr},
               {"model_dtype", "float32"},
               {"max_concurrent_requests", s.max_concurrent_requests},
               {"max_batch_tokens", s.max_batch_tokens},
               {"max_batch_requests", s.max_batch_requests > 0 ? json(s.max_batch_requests) : json(nullptr)},
               {"max_client_batch_size", options_.max_client_batch_size},
               {"auto_truncate", options_.auto_truncate},
               {"tokenization_workers", nullptr},
               {"version", "roformer.cpp"}};
  if (generation_) {
    info["model_type"] = {{"generation", {{"vocab_size", lm_tokenizer_->vocab_size()},
                                          {"slots", options_.generation.slots},
                                          {"max_total_tokens", options_.generation.max_total_tokens},
                                          {"kv_cache", model::cache_type_name(generation_->model().kv_cache())}}}};
    info["fill_mask"] = false;
    info["max_input_length"] = generation_->context() - 1;
    info["max_total_tokens"] = generation_->context();
    return info;
  }
  if (translator_) {
    const model::Seq2SeqConfig& c = translator_->model().config();
    info["model_type"] = {{"translation", {{"position_encoding", model::position_encoding_name(c.encoder.position_encoding)},
                                           {"vocab_size", translator_->subwords().vocab_size()},
                                           {"max_new_tokens", max_new_tokens()},
                                           {"slots", options_.scheduler.slots},
                                           {"max_total_tokens", options_.scheduler.max_total_tokens},
                                           {"kv_cache", model::cache_type_name(translator_->model().decoder().kv_cache())}}}};
    info["fill_mask"] = false;
    info["max_input_length"] = translator_->max_source_length();
    return info;
  }
  json type;
  if (const infer::Classifier* c = encoder().classifier()) {
    json id2label = json::object(), label2id = json::object();
    for (size_t i = 0; i < c->labels.size(); ++i) {
      id2label[std::to_string(i)] = c->labels[i];
      label2id[c->labels[i]] = i;
    }
    type[c->num_labels() == 1 ? "reranker" : "classifier"] = {{"id2label", id2label}, {"label2id", label2id}};
  } else {
    type["embedding"] = {{"pooling", encoder().pooling_name(options_.scheduler.pooling)}};
  }
  info["model_type"] = type;
  info["fill_mask"] = encoder().has_mlm_head() && !encoder().config().is_decoder;
  info["max_input_length"] = encoder().max_length();
  return info;
}

json Api::models() const {
  return {{"object", "list"},
          {"data", json::array({{{"id", options_.model_id}, {"object", "model"}, {"created", 0},
                                 {"owned_by", "roformer.cpp"}}})}};
}

// ---- Generation (a causal LM): TGI's /generate and /generate_stream, OpenAI's /v1/completions ----

namespace {

// Stop strings: a string or a list of at most 4 non-empty strings (OpenAI's and TGI's bound).
std::vector<std::string> stop_strings(const json& request, const char* name) {
  if (!present(request, name)) return {};
  const json& v = request[name];
  std::vector<std::string> out;
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array() && v.size() <= 4 && std::all_of(v.begin(), v.end(), [](const json& x) { return x.is_string(); })) {
    for (const json& x : v) out.push_back(x.get<std::string>());
  } else {
    throw invalid(std::string("`") + name + "` must be a string or a list of at most 4 strings");
  }
  for (const std::string& x : out) {
    if (x.empty() || x.size() > 256) throw invalid(std::string("`") + name + "`: each stop string has 1 to 256 bytes");
  }
  return out;
}

// A parameter this server does not implement, refused unless it has its neutral value (no silent
// difference from what the client asked for).
void neutral(const json& request, const char* name, double value) {
  if (present(request, name) && !(request[name].is_number() && request[name].get<double>() == value)) {
    throw invalid(std::string("`") + name + "` is not supported (only its neutral value " +
                  std::to_string(static_cast<int64_t>(value)) + ")");
  }
}

uint64_t fresh_seed() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(m);
  return rng() >> 1;  // within int64, as clients read it back
}

const char* openai_finish(FinishReason r) { return r == FinishReason::length ? "length" : "stop"; }

std::string sse(const json& data) {
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace

struct Api::Sequences {
  struct One {
    GenerationRequest request;
    std::string prompt_text;
    std::shared_ptr<GenerationStream> stream;
    std::vector<GenerationEvent> tokens;  // gathered (non-streaming) or being streamed
    std::string text;                     // the completion so far
    GenerationEvent end;  // finish != none once it ended
  };
  std::vector<One> all;
  bool details = false, full_text = false;
  int64_t top = 0;
  bool sampled = false;
  uint64_t seed = 0;
  std::string model;
  int64_t openai_logprobs = -1;  // -1: none asked
  int64_t n = 1;                 // choices per prompt: all[i] is prompt i / n's choice i % n
  int64_t prompt_tokens() const {  // each prompt once, however many choices it has
    int64_t total = 0;
    for (size_t i = 0; i < all.size(); i += static_cast<size_t>(n)) total += static_cast<int64_t>(all[i].request.prompt.size());
    return total;
  }
};

Generation& Api::generation() const {
  if (!generation_) {
    throw ApiError(424, "Backend", "model is not a causal LM: " + options_.model_id +
                                       " has no generation (roformer train writes causal LMs)");
  }
  return *generation_;
}

// A prompt's ids, checked against the context with max_new_tokens (0: as many as fit, up to `fallback`).
static std::vector<int64_t> prompt_ids(const text::Tokenizer& tok, const std::string& text, const std::string& field) {
  std::vector<int64_t> ids;
  for (int32_t id : tok.encode_ids(text)) ids.push_back(id);
  if (ids.empty()) throw invalid("`" + field + "` encodes to no tokens");
  return ids;
}

Api::Sequences Api::tgi_sequences(const json& request) const {
  require_object(request);
  Generation& g = generation();
  if (!request.contains("inputs") || !request["inputs"].is_string()) throw invalid("`inputs` must be a string");
  json params = json::object();
  if (present(request, "parameters")) {
    params = request["parameters"];
    if (!params.is_object()) throw invalid("`parameters` must be an object");
  }
  neutral(params, "repetition_penalty", 1);
  neutral(params, "frequency_penalty", 0);
  neutral(params, "typical_p", 1);
  neutral(params, "best_of", 1);
  if (flag(params, "watermark", false)) throw invalid("`parameters.watermark` is not supported");
  if (flag(params, "decoder_input_details", false)) throw invalid("`parameters.decoder_input_details` is not supported");
  if (present(params, "grammar")) throw invalid("`parameters.grammar` is not supported");
  Sequences s;
  Sequences::One one;
  one.prompt_text = request["inputs"].get<std::string>();
  one.request.prompt = prompt_ids(*lm_tokenizer_, one.prompt_text, "inputs");
  const int64_t context = g.context();
  if (present(params, "truncate")) {  // TGI: keep the prompt's last `truncate` tokens
    const int64_t keep = integer(params, "truncate", 0, 1, context - 1);
    if (static_cast<int64_t>(one.request.prompt.size()) > keep) {
      one.request.prompt.erase(one.request.prompt.begin(), one.request.prompt.end() - keep);
    }
  }
  const int64_t P = static_cast<int64_t>(one.request.prompt.size());
  if (P >= context) {
    throw invalid("`inputs` must have less than " + std::to_string(context) + " tokens. Given: " + std::to_string(P));
  }
  one.request.max_new_tokens = integer(params, "max_new_tokens", std::min<int64_t>(100, context - P), 1, context);
  if (P + one.request.max_new_tokens > context) {
    throw invalid("`inputs` tokens + `max_new_tokens` must be <= " + std::to_string(context) + ". Given: " +
                  std::to_string(P) + " `inputs` tokens and " + std::to_string(one.request.max_new_tokens) +
                  " `max_new_tokens`");
  }
  model::DecodeOptions& o = one.request.decode;
  o.beam_size = 1;
  o.temperature = real(params, "temperature", 1.0, 1e-6, 1e6);
  o.top_k = integer(params, "top_k", 0, 1, INT32_MAX);
  o.top_p = real(params, "top_p", 1.0, 1e-6, 1);
  // TGI samples when asked to or when a warper is set.
  o.sample = flag(params, "do_sample", false) || o.temperature != 1.0 || o.top_k > 0 || o.top_p < 1.0;
  s.sampled = o.sample;
  s.seed = present(params, "seed") ? static_cast<uint64_t>(integer(params, "seed", 0, 0, INT64_MAX)) : fresh_seed();
  o.seed = s.seed;
  for (int32_t id : lm_tokenizer_->special_ids()) o.banned.push_back(id);  // as `roformer generate`
  one.request.stop = stop_strings(params, "stop");
  s.top = integer(params, "top_n_tokens", 0, 0, 5);
  one.request.top_logprobs = s.top;
  s.details = flag(params, "details", false);
  s.full_text = flag(params, "return_full_text", false);
  s.all.push_back(std::move(one));
  return s;
}

Api::Sequences Api::openai_sequences(const json& request) const {
  require_object(request);
  Generation& g = generation();
  neutral(request, "presence_penalty", 0);
  neutral(request, "frequency_penalty", 0);
  if (present(request, "suffix")) throw invalid("`suffix` is not supported");
  if (present(request, "logit_bias") && !(request["logit_bias"].is_object() && request["logit_bias"].empty())) {
    throw invalid("`logit_bias` is not supported");
  }
  Sequences s;
  s.model = present(request, "model") && request["model"].is_string() ? request["model"].get<std::string>() : options_.model_id;
  if (!present(request, "prompt")) throw invalid("`prompt` is required");
  const json& p = request["prompt"];
  std::vector<std::pair<std::string, std::vector<int64_t>>> prompts;  // text, ids
  auto from_ids = [&](const json& v, const std::string& field) {
    std::vector<int64_t> ids;
    for (int32_t id : token_ids(v, field)) {
      if (id < 0 || id >= lm_tokenizer_->vocab_size()) {
        throw invalid("`" + field + "`: token id " + std::to_string(id) + " is outside the vocabulary of " +
                      std::to_string(lm_tokenizer_->vocab_size()));
      }
      ids.push_back(id);
    }
    if (ids.empty()) throw invalid("`" + field + "` cannot be empty");
    return ids;
  };
  if (p.is_string()) {
    prompts.emplace_back(p.get<std::string>(), prompt_ids(*lm_tokenizer_, p.get<std::string>(), "prompt"));
  } else if (is_ids(p) && !p.empty()) {
    prompts.emplace_back("", from_ids(p, "prompt"));
  } else if (p.is_array() && !p.empty()) {
    check_batch_size(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string field = "prompt[" + std::to_string(i) + "]";
      if (p[i].is_string()) {
        prompts.emplace_back(p[i].get<std::string>(), prompt_ids(*lm_tokenizer_, p[i].get<std::string>(), field));
      } else if (is_ids(p[i])) {
        prompts.emplace_back("", from_ids(p[i], field));
      } else {
        throw invalid("`" + field + "` must be a string or a list of token ids");
      }
    }
  } else {
    throw invalid("`prompt` must be a string, a list of strings, a list of token ids or a list of such lists");
  }
  const int64_t context = g.context();
  const int64_t max_tokens = integer(request, "max_tokens", 16, 1, context);
  const int64_t n = integer(request, "n", 1, 1, 16);
  s.n = n;
  if (present(request, "best_of") && integer(request, "best_of", n, 1, 16) != n) throw invalid("`best_of` must equal `n`");
  check_batch_size(prompts.size() * static_cast<size_t>(n));
  model::DecodeOptions o;
  o.beam_size = 1;
  o.temperature = real(request, "temperature", 1.0, 0, 2);
  o.top_p = real(request, "top_p", 1.0, 1e-6, 1);
  o.sample = o.temperature > 0;  // temperature 0: greedy
  s.sampled = o.sample;
  s.seed = present(request, "seed") ? static_cast<uint64_t>(integer(request, "seed", 0, 0, INT64_MAX)) : fresh_seed();
  o.seed = s.seed;
  for (int32_t id : lm_tokenizer_->special_ids()) o.banned.push_back(id);
  const std::vector<std::string> stop = stop_strings(request, "stop");
  if (present(request, "logprobs")) s.openai_logprobs = integer(request, "logprobs", 0, 0, 5);
  s.full_text = flag(request, "echo", false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t P = static_cast<int64_t>(prompts[i].second.size());
    if (P + max_tokens > context) {
      throw invalid("prompt " + std::to_string(i) + ": its " + std::to_string(P) + " tokens + `max_tokens` " +
                    std::to_string(max_tokens) + " exceed the model's context of " + std::to_string(context) + " tokens");
    }
    for (int64_t j = 0; j < n; ++j) {
      Sequences::One one;
      one.prompt_text = prompts[i].first.empty() && !prompts[i].second.empty()
                            ? lm_tokenizer_->decode_ids(std::vector<int32_t>(prompts[i].second.begin(), prompts[i].second.end()))
                            : prompts[i].first;
      one.request.prompt = prompts[i].second;
      one.request.max_new_tokens = max_tokens;
      one.request.decode = o;
      one.request.stream = static_cast<uint64_t>(j);  // the choices of a prompt draw from streams 0 .. n − 1
      one.request.stop = stop;
      one.request.top_logprobs = std::max<int64_t>(s.openai_logprobs, 0);
      s.all.push_back(std::move(one));
    }
  }
  return s;
}

void Api::submit(Sequences& s, bool whole) const {
  try {
    for (auto& one : s.all) {
      one.request.whole = whole;
      one.stream = generation_->submit(one.request);
    }
  } catch (const Overloaded& e) {
    for (auto& one : s.all) {
      if (one.stream) one.stream->cancel();
    }
    throw ApiError(429, "Overloaded", e.what());
  }
}

void Api::gather(Sequences& s) const {
  for (auto& one : s.all) {
    GenerationEvent e;
    bool probing = static_cast<bool>(options_.client_gone), timed_out = false;
    while (one.end.finish == FinishReason::none) {
      if (!one.stream->next_for(e, std::chrono::milliseconds(probing ? 50 : 1000), timed_out)) {
        if (timed_out && probing && options_.client_gone()) {
          for (auto& x : s.all) x.stream->cancel();
          throw ApiError(499, "ClientClosed", "the client closed the connection");
        }
        continue;
      }
      one.text += e.text;
      if (e.finish == FinishReason::error) throw ApiError(500, "Backend", "generation failed");
      if (e.finish != FinishReason::none) {
        one.end = std::move(e);
      } else {
        one.tokens.push_back(std::move(e));
      }
    }
  }
}

namespace {

json tgi_token(const GenerationEvent& e, const std::string& text) {
  return {{"id", e.id}, {"text", text}, {"logprob", e.logprob}, {"special", false}};
}

json tgi_top_tokens(const text::Tokenizer& tok, const GenerationEvent& e) {
  json top = json::array();
  for (const auto& [id, lp] : e.top) {
    top.push_back({{"id", id}, {"text", tok.decode_ids({static_cast<int32_t>(id)})}, {"logprob", lp}, {"special", false}});
  }
  return top;
}

}  // namespace

json Api::generate(const json& request) {
  Sequences s = tgi_sequences(request);
  submit(s, /*whole=*/true);
  gather(s);
  const auto& one = s.all[0];
  json out = {{"generated_text", s.full_text ? one.prompt_text + one.text : one.text}};
  if (s.details) {
    json tokens = json::array(), top = json::array();
    for (const auto& e : one.tokens) {
      tokens.push_back(tgi_token(e, lm_tokenizer_->decode_ids({static_cast<int32_t>(e.id)})));
      top.push_back(tgi_top_tokens(*lm_tokenizer_, e));
    }
    out["details"] = {{"finish_reason", finish_reason_name(one.end.finish)},
                      {"generated_tokens", one.end.generated_tokens},
                      {"seed", s.sampled ? json(s.seed) : json(nullptr)},
                      {"prefill", json::array()},
                      {"tokens", tokens}};
    if (s.top > 0) out["details"]["top_tokens"] = top;
  }
  return out;
}

namespace {

// TGI's stream: an event per token; the last token's event also carries generated_text and details
// (so each event is held until the next one shows whether it is the last).
class TgiStream : public EventStream {
 public:
  TgiStream(std::shared_ptr<GenerationStream> stream, const text::Tokenizer& tok, std::string prefix, bool sampled,
            uint64_t seed, int64_t top)
      : stream_(std::move(stream)), tok_(tok), prefix_(std::move(prefix)), sampled_(sampled), seed_(seed), top_(top) {}
  bool next(std::string& chunk, std::chrono::milliseconds wait) override {
    chunk.clear();
    if (done_) return false;
    GenerationEvent e;
    bool timed_out = false;
    if (!stream_->next_for(e, wait, timed_out)) {
      if (timed_out) return true;
      done_ = true;
      return false;
    }
    text_ += e.text;
    if (e.finish == FinishReason::error) {
      done_ = true;
      chunk = sse({{"error", "generation failed"}, {"error_type", "generation"}});
      return true;
    }
    if (e.finish == FinishReason::none) {
      if (held_) chunk = event(*held_, json(nullptr), json(nullptr));
      held_ = std::move(e);
      return true;
    }
    // The end: its text joins the last token's (an eos first: an empty special token).
    done_ = true;
    GenerationEvent last;
    if (held_) {
      last = std::move(*held_);
      last.text += e.text;
    } else {
      last.id = -1, last.text = e.text;
    }
    const json details = {{"finish_reason", finish_reason_name(e.finish)},
                          {"generated_tokens", e.generated_tokens},
                          {"seed", sampled_ ? json(seed_) : json(nullptr)}};
    chunk = event(last, prefix_ + text_, details, !held_);
    return true;
  }
  void cancel() override { stream_->cancel(); }

 private:
  std::string event(const GenerationEvent& e, const json& generated, const json& details, bool special = false) {
    json token = {{"id", e.id}, {"text", e.text}, {"logprob", e.logprob}, {"special", special}};
    return sse({{"index", ++index_},
                {"token", token},
                {"top_tokens", top_ > 0 ? tgi_top_tokens(tok_, e) : json(nullptr)},
                {"generated_text", generated},
                {"details", details}});
  }
  std::shared_ptr<GenerationStream> stream_;
  const text::Tokenizer& tok_;
  const std::string prefix_;
  const bool sampled_;
  const uint64_t seed_;
  const int64_t top_;
  std::optional<GenerationEvent> held_;
  std::string text_;
  int64_t index_ = 0;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<EventStream> Api::generate_stream(const json& request) {
  Sequences s = tgi_sequences(request);
  submit(s);
  auto& one = s.all[0];
  return std::make_unique<TgiStream>(one.stream, *lm_tokenizer_, s.full_text ? one.prompt_text : "", s.sampled,
                                     s.seed, s.top);
}

namespace {

std::atomic<uint64_t> completion_ids{1};

// OpenAI's logprobs of one chunk of tokens: their strings, log-probabilities, alternatives and
// offsets into the choice's text (`offset`: the text before them).
json openai_logprobs(const text::Tokenizer& tok, const std::vector<GenerationEvent>& tokens, size_t offset) {
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const auto& e : tokens) {
    out["tokens"].push_back(tok.decode_ids({static_cast<int32_t>(e.id)}));
    out["token_logprobs"].push_back(e.logprob);
    json top = json::object();
    for (const auto& [id, lp] : e.top) top[tok.decode_ids({static_cast<int32_t>(id)})] = lp;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(offset);
    offset += e.text.size();
  }
  return out;
}

json completion_head(const std::string& id, const std::string& model) {
  return {{"id", id}, {"object", "text_completion"}, {"created", static_cast<int64_t>(std::time(nullptr))},
          {"model", model}, {"system_fingerprint", nullptr}};
}

}  // namespace

json Api::completions(const json& request) {
  Sequences s = openai_sequences(request);
  submit(s, /*whole=*/true);
  gather(s);
  json out = completion_head("cmpl-" + std::to_string(completion_ids++), s.model);
  json choices = json::array();
  const int64_t prompt_tokens = s.prompt_tokens();
  int64_t completion_tokens = 0;
  for (size_t i = 0; i < s.all.size(); ++i) {
    const auto& one = s.all[i];
    const std::string prefix = s.full_text ? one.prompt_text : "";
    choices.push_back({{"index", i},
                       {"text", prefix + one.text},
                       {"logprobs", s.openai_logprobs >= 0 ? openai_logprobs(*lm_tokenizer_, one.tokens, prefix.size()) : json(nullptr)},
                       {"finish_reason", openai_finish(one.end.finish)}});
    completion_tokens += one.end.generated_tokens;
  }
  out["choices"] = choices;
  out["usage"] = {{"prompt_tokens", prompt_tokens},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", prompt_tokens + completion_tokens}};
  return out;
}

namespace {

// OpenAI's stream: a chunk per token of any choice, a last chunk per choice with its finish_reason,
// then (stream_options.include_usage) the usage, then [DONE].
class OpenAiStream : public EventStream {
 public:
  OpenAiStream(std::vector<std::shared_ptr<GenerationStream>> streams, std::vector<std::string> prefixes,
               const text::Tokenizer& tok, std::string model, bool logprobs, bool usage, int64_t prompt_tokens)
      : streams_(std::move(streams)), prefixes_(std::move(prefixes)), tok_(tok),
        head_(completion_head("cmpl-" + std::to_string(completion_ids++), model)), logprobs_(logprobs),
        usage_(usage), offsets_(streams_.size(), 0), ended_(streams_.size(), false), prompt_tokens_(prompt_tokens) {}
  bool next(std::string& chunk, std::chrono::milliseconds wait) override {
    chunk.clear();
    if (done_) return false;
    if (std::all_of(ended_.begin(), ended_.end(), [](bool b) { return b; })) {
      if (usage_) {
        json u = head_;
        u["choices"] = json::array();
        u["usage"] = {{"prompt_tokens", prompt_tokens_}, {"completion_tokens", completion_tokens_},
                      {"total_tokens", prompt_tokens_ + completion_tokens_}};
        chunk = sse(u);
      }
      chunk += "data: [DONE]\n\n";
      done_ = true;
      return true;
    }
    const auto per = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1), wait / static_cast<int64_t>(streams_.size()));
    for (size_t i = 0; i < streams_.size(); ++i) {
      if (ended_[i]) continue;
      GenerationEvent e;
      bool timed_out = false;
      if (!streams_[i]->next_for(e, per, timed_out)) {
        if (!timed_out) ended_[i] = true;  // cancelled
        continue;
      }
      json c = head_;
      json choice = {{"index", i}, {"text", e.text}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (!prefixes_[i].empty()) choice["text"] = prefixes_[i] + e.text, prefixes_[i].clear();
      if (e.has_token && logprobs_) choice["logprobs"] = openai_logprobs(tok_, {e}, offsets_[i]);
      offsets_[i] += e.text.size();
      if (e.finish == FinishReason::error) {
        done_ = true;
        chunk = sse({{"error", "generation failed"}, {"error_type", "generation"}});
        return true;
      }
      if (e.finish != FinishReason::none) {
        ended_[i] = true;
        choice["finish_reason"] = openai_finish(e.finish);
        completion_tokens_ += e.generated_tokens;
      }
      c["choices"] = json::array({choice});
      chunk += sse(c);
    }
    return true;
  }
  void cancel() override {
    for (auto& s : streams_) s->cancel();
  }

 private:
  std::vector<std::shared_ptr<GenerationStream>> streams_;
  std::vector<std::string> prefixes_;
  const text::Tokenizer& tok_;
  json head_;
  const bool logprobs_, usage_;
  std::vector<size_t> offsets_;
  std::vector<bool> ended_;
  int64_t prompt_tokens_, completion_tokens_ = 0;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<EventStream> Api::completions_stream(const json& request) {
  Sequences s = openai_sequences(request);
  bool usage = false;
  if (present(request, "stream_options")) {
    const json& so = request["stream_options"];
    if (!so.is_object()) throw invalid("`stream_options` must be an object");
    usage = flag(so, "include_usage", false);
  }
  submit(s);
  std::vector<std::shared_ptr<GenerationStream>> streams;
  std::vector<std::string> prefixes;
  for (auto& one : s.all) {
    streams.push_back(one.stream);
    prefixes.push_back(s.full_text ? one.prompt_text : "");
  }
  return std::make_unique<OpenAiStream>(std::move(streams), std::move(prefixes), *lm_tokenizer_, s.model,
                                        s.openai_logprobs >= 0, usage, s.prompt_tokens());
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
