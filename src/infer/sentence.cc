// Pooling modes and sentence-transformers folders (see sentence.h): each mode as
// sentence_transformers.models.Pooling computes it (v2.7), and the folder's modules read and checked.
#include "infer/sentence.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/enum_names.h"
#include "io/mapped_file.h"
#include "io/weights.h"

namespace infer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr base::EnumName<Pooling> kPoolingNames[] = {
    {Pooling::cls, "cls"},       {Pooling::mean, "mean"},       {Pooling::pooler, "pooler"},
    {Pooling::max, "max"},       {Pooling::mean_sqrt_len, "mean_sqrt_len"}, {Pooling::weightedmean, "weightedmean"},
    {Pooling::lasttoken, "lasttoken"}, {Pooling::automatic, "auto"}};

bool flag(const json& j, const char* name, const std::string& path) {
  if (!j.contains(name) || j[name].is_null()) return false;
  if (!j[name].is_boolean()) throw io::Error(path + ": \"" + name + "\" must be true or false");
  return j[name].get<bool>();
}

int64_t positive(const json& j, const char* name, const std::string& path) {
  if (!j.contains(name) || !j[name].is_number_integer() || j[name].get<int64_t>() < 1 ||
      j[name].get<int64_t>() > (int64_t{1} << 20)) {
    throw io::Error(path + ": \"" + name + "\" must be a positive integer (at most 2^20)");
  }
  return j[name].get<int64_t>();
}

// The module's type as modules.json writes it (sentence_transformers.models.Dense), its class name.
std::string class_name(const std::string& type) { return type.substr(type.rfind('.') + 1); }

DenseLayer read_dense(const std::string& dir, const std::string& module_dir, int64_t in) {
  const std::string path = module_dir + "/config.json";
  const json c = io::read_json_object(path);
  DenseLayer d;
  d.in = positive(c, "in_features", path);
  d.out = positive(c, "out_features", path);
  if (d.in != in) {
    throw io::Error(path + ": in_features " + std::to_string(d.in) + " but the module before it gives " +
                    std::to_string(in) + " values (" + dir + "/modules.json)");
  }
  const bool bias = !c.contains("bias") || flag(c, "bias", path);
  const std::string act = c.contains("activation_function") && c["activation_function"].is_string()
                              ? c["activation_function"].get<std::string>() : "torch.nn.modules.activation.Tanh";
  d.activation = class_name(act);
  static const char* known[] = {"Identity", "Tanh", "ReLU", "Sigmoid", "GELU", "SiLU"};
  if (std::find(std::begin(known), std::end(known), d.activation) == std::end(known)) {
    throw io::Error(path + ": activation_function \"" + act +
                    "\" is not one this runs (torch.nn's Identity, Tanh, ReLU, Sigmoid, GELU, SiLU)");
  }
  const auto w = io::open_weights(module_dir);
  d.weight = w->f32("linear.weight", {d.out, d.in});
  if (bias) d.bias = w->f32("linear.bias", {d.out});
  return d;
}

}  // namespace

const char* pooling_name(Pooling p) { return base::enum_name(kPoolingNames, p); }

std::vector<std::string> pooling_names() {
  std::vector<std::string> out;
  for (const auto& n : kPoolingNames) out.push_back(n.name);
  return out;
}

Pooling parse_pooling(const std::string& name) { return base::parse_enum(kPoolingNames, name, "pooling"); }

std::vector<double> DenseLayer::apply(const std::vector<double>& x) const {
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    double s = bias.empty() ? 0.0 : bias[o];
    const float* w = weight.data() + o * in;
    for (int64_t i = 0; i < in; ++i) s += double(w[i]) * x[i];
    if (activation == "Tanh") s = std::tanh(s);
    else if (activation == "ReLU") s = std::max(s, 0.0);
    else if (activation == "Sigmoid") s = 1 / (1 + std::exp(-s));
    else if (activation == "GELU") s = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
    else if (activation == "SiLU") s = s / (1 + std::exp(-s));
    y[o] = s;
  }
  return y;
}

int64_t SentenceModules::dimension(int64_t hidden) const {
  return dense.empty() ? hidden * static_cast<int64_t>(pooling.size()) : dense.back().out;
}

std::string SentenceModules::pooling_name() const {
  std::string s;
  for (Pooling p : pooling) {
    if (!s.empty()) s += '+';
    s += infer::pooling_name(p);
  }
  return s;
}

std::optional<SentenceModules> read_sentence_modules(const std::string& dir, int64_t hidden) {
  const std::string modules_path = dir + "/modules.json";
  if (!fs::exists(modules_path)) return std::nullopt;
  const json modules = json::parse(io::read_config_file(modules_path), nullptr, false);
  if (!modules.is_array() || modules.empty()) {
    throw io::Error(modules_path + ": must be a non-empty JSON list of modules ({\"type\", \"path\"})");
  }
  SentenceModules s;
  int64_t width = hidden;  // the values the next module receives
  bool pooled = false;
  for (size_t i = 0; i < modules.size(); ++i) {
    const json& m = modules[i];
    const std::string at = modules_path + ": module " + std::to_string(i);
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string() || !m.contains("path") || !m["path"].is_string()) {
      throw io::Error(at + " must be an object with \"type\" and \"path\" strings");
    }
    const std::string type = class_name(m["type"].get<std::string>()), rel = m["path"].get<std::string>();
    if (rel.find("..") != std::string::npos || (!rel.empty() && rel.front() == '/')) {
      throw io::Error(at + ": path \"" + rel + "\" must be a folder inside " + dir);
    }
    const std::string module_dir = rel.empty() ? dir : dir + "/" + rel;
    if (i == 0) {
      if (type != "Transformer" || !rel.empty()) {
        throw io::Error(at + " must be the Transformer at the folder's root (path \"\"); it is " + type +
                        " at \"" + rel + "\"");
      }
      continue;
    }
    if (type == "Pooling") {
      if (pooled) throw io::Error(at + ": a second Pooling module");
      const std::string path = module_dir + "/config.json";
      const json c = io::read_json_object(path);
      if (c.contains("word_embedding_dimension") && positive(c, "word_embedding_dimension", path) != width) {
        throw io::Error(path + ": word_embedding_dimension " + std::to_string(c["word_embedding_dimension"].get<int64_t>()) +
                        " but the encoder's hidden_size is " + std::to_string(width));
      }
      const std::pair<const char*, Pooling> order[] = {
          {"pooling_mode_cls_token", Pooling::cls}, {"pooling_mode_max_tokens", Pooling::max},
          {"pooling_mode_mean_tokens", Pooling::mean}, {"pooling_mode_mean_sqrt_len_tokens", Pooling::mean_sqrt_len},
          {"pooling_mode_weightedmean_tokens", Pooling::weightedmean}, {"pooling_mode_lasttoken", Pooling::lasttoken}};
      for (const auto& [name, mode] : order) {
        if (flag(c, name, path)) s.pooling.push_back(mode);
      }
      if (s.pooling.empty()) throw io::Error(path + ": no pooling_mode_* is true");
      s.include_prompt = !c.contains("include_prompt") || flag(c, "include_prompt", path);
      width *= static_cast<int64_t>(s.pooling.size());
      pooled = true;
    } else if (type == "Dense") {
      if (!pooled) throw io::Error(at + ": a Dense module before the Pooling module");
      s.dense.push_back(read_dense(dir, module_dir, width));
      width = s.dense.back().out;
    } else if (type == "Normalize") {
      s.normalize = true;
    } else {
      throw io::Error(at + ": a " + type + " module, which this does not run (Transformer, Pooling, Dense, Normalize)");
    }
  }
  if (!pooled) throw io::Error(modules_path + ": no Pooling module");
  if (fs::exists(dir + "/sentence_bert_config.json")) {
    const std::string path = dir + "/sentence_bert_config.json";
    const json c = io::read_json_object(path);
    if (c.contains("max_seq_length") && !c["max_seq_length"].is_null()) s.max_seq_length = positive(c, "max_seq_length", path);
  }
  if (fs::exists(dir + "/config_sentence_transformers.json")) {
    const std::string path = dir + "/config_sentence_transformers.json";
    const json c = io::read_json_object(path);
    if (c.contains("prompts") && !c["prompts"].is_null()) {
      if (!c["prompts"].is_object()) throw io::Error(path + ": \"prompts\" must be an object of strings");
      for (const auto& [name, text] : c["prompts"].items()) {
        if (!text.is_string()) throw io::Error(path + ": prompts." + name + " must be a string");
        s.prompts[name] = text.get<std::string>();
      }
    }
    if (c.contains("default_prompt_name") && !c["default_prompt_name"].is_null()) {
      if (!c["default_prompt_name"].is_string() || !s.prompts.count(c["default_prompt_name"].get<std::string>())) {
        throw io::Error(path + ": default_prompt_name must be the name of one of its prompts");
      }
      s.default_prompt_name = c["default_prompt_name"].get<std::string>();
    }
  }
  return s;
}

void pool_tokens(Pooling mode, const float* h, int64_t T, int64_t H, const std::vector<char>& keep,
                 const float* pooled, std::vector<double>& out) {
  const size_t at = out.size();
  out.resize(at + static_cast<size_t>(H), 0.0);
  double* v = out.data() + at;
  auto row = [&](int64_t t) { return h + t * H; };
  switch (mode) {
    case Pooling::cls:  // the first token, whatever the mask (sentence-transformers' token_embeddings[:, 0])
      for (int64_t i = 0; i < H; ++i) v[i] = row(0)[i];
      return;
    case Pooling::pooler:
      if (!pooled) throw std::logic_error("infer::pool_tokens: pooler pooling without a pooler output");
      for (int64_t i = 0; i < H; ++i) v[i] = pooled[i];
      return;
    case Pooling::max:  // masked tokens count as -1e9, as sentence-transformers sets them
      for (int64_t i = 0; i < H; ++i) v[i] = -1e9;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < H; ++i) v[i] = std::max(v[i], keep[t] ? double(row(t)[i]) : -1e9);
      }
      return;
    case Pooling::mean:
    case Pooling::mean_sqrt_len:
    case Pooling::weightedmean: {
      double weight = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (!keep[t]) continue;
        const double w = mode == Pooling::weightedmean ? double(t + 1) : 1.0;
        for (int64_t i = 0; i < H; ++i) v[i] += w * row(t)[i];
        weight += w;
      }
      weight = std::max(weight, 1e-9);  // torch.clamp(sum_mask, min=1e-9)
      const double d = mode == Pooling::mean_sqrt_len ? std::sqrt(weight) : weight;
      for (int64_t i = 0; i < H; ++i) v[i] /= d;
      return;
    }
    case Pooling::lasttoken: {  // the last kept token; none kept: zeros (the masked last position)
      for (int64_t t = T - 1; t >= 0; --t) {
        if (!keep[t]) continue;
        for (int64_t i = 0; i < H; ++i) v[i] = row(t)[i];
        break;
      }
      return;
    }
    case Pooling::automatic: break;
  }
  throw std::logic_error("infer::pool_tokens: the automatic pooling is the caller's to resolve");
}

}  // namespace infer
