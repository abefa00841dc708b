// The parameter layout and its binding to a struct of pointers (see params.h).
#include "params.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "base/random.h"
#include "io/weights.h"
#include "model/head.h"

namespace model {

std::vector<ParamInfo> param_layout(const RoFormerConfig& c) {
  const int64_t V = c.vocab_size, E = c.embedding_size, H = c.hidden_size, I = c.intermediate_size;
  std::vector<ParamInfo> layout;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay) {
    int64_t size = 1;
    for (int64_t d : shape) size *= d;
    layout.push_back({std::move(name), std::move(shape), offset, size, decay});
    offset += size;
  };
  const std::string e = "roformer.embeddings.";
  add(e + "word_embeddings.weight", {V, E}, true);
  add(e + "token_type_embeddings.weight", {c.type_vocab_size, E}, true);
  if (c.position_encoding == PositionEncoding::learned) {
    add(e + "position_embeddings.weight", {c.max_position_embeddings, E}, true);
  }
  const bool layer_norm = !c.rms_norm();  // RoFormer-V2's RMS norms have no parameters
  if (layer_norm) {
    add(e + "LayerNorm.weight", {E}, false);
    add(e + "LayerNorm.bias", {E}, false);
  }
  if (E != H) {
    add("roformer.embeddings_project.weight", {H, E}, true);
    if (c.use_bias) add("roformer.embeddings_project.bias", {H}, false);
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "roformer.encoder.layer." + std::to_string(l) + ".";
    auto linear = [&](const std::string& name, int64_t out_f, int64_t in_f) {
      add(p + name + ".weight", {out_f, in_f}, true);
      if (c.use_bias) add(p + name + ".bias", {out_f}, false);
    };
    auto norm = [&](const std::string& name) {
      if (!layer_norm) return;
      add(p + name + ".weight", {H}, false);
      add(p + name + ".bias", {H}, false);
    };
    linear("attention.self.query", H, H);
    linear("attention.self.key", H, H);
    linear("attention.self.value", H, H);
    linear("attention.output.dense", H, H);
    norm("attention.output.LayerNorm");
    if (c.add_cross_attention) {  // HF RoFormerLayer.crossattention, between attention and intermediate
      linear("crossattention.self.query", H, H);
      linear("crossattention.self.key", H, H);
      linear("crossattention.self.value", H, H);
      linear("crossattention.output.dense", H, H);
      norm("crossattention.output.LayerNorm");
    }
    linear("intermediate.dense", I, H);
    linear("output.dense", H, I);
    norm("output.LayerNorm");
  }
  if (c.pooler_activation != PoolerActivation::none) {  // RoFormer-Sim's pooler (inference only: no loss reaches it)
    add("roformer.pooler.dense.weight", {H, H}, true);
    add("roformer.pooler.dense.bias", {H}, false);
  }
  if (c.head) {  // a task head (model/head.h) instead of the MLM head
    for (HeadTensor& t : c.head->tensors(c)) add(std::move(t.name), std::move(t.shape), t.decay);
    return layout;
  }
  const std::string h = "cls.predictions.";
  if (layer_norm) {  // V1: dense → activation → LayerNorm → tied decoder + bias; V2: the tied matmul only
    add(h + "transform.dense.weight", {E, H}, true);
    add(h + "transform.dense.bias", {E}, false);
    add(h + "transform.LayerNorm.weight", {E}, false);
    add(h + "transform.LayerNorm.bias", {E}, false);
    add(h + "bias", {V}, false);
  }
  return layout;
}

int64_t param_count(const std::vector<ParamInfo>& layout) {
  return layout.empty() ? 0 : layout.back().offset + layout.back().size;
}

template <typename T>
void init_params(const std::vector<ParamInfo>& layout, T* arena, double initializer_range, uint64_t seed) {
  for (size_t t = 0; t < layout.size(); ++t) {
    const ParamInfo& info = layout[t];
    T* w = arena + info.offset;
    if (info.name.find("LayerNorm.weight") != std::string::npos) {
      std::fill(w, w + info.size, T(1));
    } else if (info.shape.size() == 1) {
      std::fill(w, w + info.size, T(0));
    } else {
      const uint64_t stream = base::mix64(seed ^ base::mix64(t + 1));
      for (int64_t i = 0; i < info.size; ++i) {  // Box–Muller on counter-based uniforms
        const double u1 = 1.0 - base::uniform01(stream, 2 * i), u2 = base::uniform01(stream, 2 * i + 1);
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
        w[i] = static_cast<T>(initializer_range * z);
      }
    }
  }
}
template void init_params<float>(const std::vector<ParamInfo>&, float*, double, uint64_t);
template void init_params<double>(const std::vector<ParamInfo>&, double*, double, uint64_t);

template <typename T>
Params<T> bind_params(const RoFormerConfig& c, const std::vector<ParamInfo>& layout, T* arena) {
  std::unordered_map<std::string, T*> at;
  for (const auto& p : layout) at[p.name] = arena + p.offset;
  auto get = [&](const std::string& name) -> T* {
    const auto it = at.find(name);
    if (it == at.end()) throw std::logic_error("parameter " + name + " is not in the layout");
    return it->second;
  };
  auto maybe = [&](const std::string& name) -> T* { return at.count(name) ? at[name] : nullptr; };
  auto linear = [&](const std::string& name, bool required = true) {
    return LinearParams<T>{required ? get(name + ".weight") : maybe(name + ".weight"), maybe(name + ".bias")};
  };
  auto norm = [&](const std::string& name) { return NormParams<T>{maybe(name + ".weight"), maybe(name + ".bias")}; };
  Params<T> p;
  const std::string e = "roformer.embeddings.";
  p.emb.word = get(e + "word_embeddings.weight");
  p.emb.token_type = get(e + "token_type_embeddings.weight");
  p.emb.position = maybe(e + "position_embeddings.weight");
  p.emb.norm = norm(e + "LayerNorm");
  p.emb.project = linear("roformer.embeddings_project", false);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string q = "roformer.encoder.layer." + std::to_string(l) + ".";
    LayerParams<T> L;
    L.attn.q = linear(q + "attention.self.query");
    L.attn.k = linear(q + "attention.self.key");
    L.attn.v = linear(q + "attention.self.value");
    L.attn.out = linear(q + "attention.output.dense");
    L.attn.norm = norm(q + "attention.output.LayerNorm");
    if (c.add_cross_attention) {
      L.cross.q = linear(q + "crossattention.self.query");
      L.cross.k = linear(q + "crossattention.self.key");
      L.cross.v = linear(q + "crossattention.self.value");
      L.cross.out = linear(q + "crossattention.output.dense");
      L.cross.norm = norm(q + "crossattention.output.LayerNorm");
    }
    L.ffn.in = linear(q + "intermediate.dense");
    L.ffn.out = linear(q + "output.dense");
    L.ffn.norm = norm(q + "output.LayerNorm");
    p.layers.push_back(L);
  }
  const std::string h = "cls.predictions.";
  p.pooler.dense = linear("roformer.pooler.dense", false);
  if (c.head) {
    for (const HeadTensor& t : c.head->tensors(c)) p.task.push_back(get(t.name));
  }
  p.head.dense = linear(h + "transform.dense", false);
  p.head.norm = norm(h + "transform.LayerNorm");
  p.head.decoder_w = p.emb.word;  // tied
  p.head.decoder_b = maybe(h + "bias");
  return p;
}

template Params<float> bind_params<float>(const RoFormerConfig&, const std::vector<ParamInfo>&, float*);
template Params<double> bind_params<double>(const RoFormerConfig&, const std::vector<ParamInfo>&, double*);

bool stores_bare_encoder(const io::WeightStore& w, const std::string& prefix) {
  return !w.contains(prefix + "roformer.embeddings.word_embeddings.weight") &&
         w.contains(prefix + "embeddings.word_embeddings.weight");
}

std::string stored_name(const std::string& layout_name, bool bare_encoder) {
  return bare_encoder && layout_name.rfind("roformer.", 0) == 0 ? layout_name.substr(9) : layout_name;
}

namespace {

// The number of layers a checkpoint stores: 1 + the largest N of its "<layers>N." tensor names.
int64_t stored_layers(const io::WeightStore& w, const std::string& layers) {
  int64_t count = 0;
  for (const auto& entry : w.tensors()) {
    const std::string& name = entry.first;
    if (name.rfind(layers, 0) != 0) continue;
    const size_t dot = name.find('.', layers.size());
    const std::string index = name.substr(layers.size(), dot == std::string::npos ? 0 : dot - layers.size());
    if (index.empty() || index.size() > 6 || index.find_first_not_of("0123456789") != std::string::npos) continue;
    count = std::max<int64_t>(count, std::stoll(index) + 1);
  }
  return count;
}

// The config field that makes a layout tensor's shape what it is: the one that, set to the stored
// size, makes the config imply the stored shape; "" when no single field explains it.
std::string blame_shape(const RoFormerConfig& c, const std::string& layout_name, const std::vector<int64_t>& implied,
                        const std::vector<int64_t>& stored) {
  if (c.head && c.head->uses_labels() && !stored.empty() && stored[0] != c.num_labels()) {
    RoFormerConfig relabelled = c;  // a head tensor whose first dimension is the number of labels
    relabelled.labels.assign(static_cast<size_t>(stored[0]), "");
    for (const HeadTensor& t : c.head->tensors(relabelled)) {
      if (t.name == layout_name && t.shape == stored) return "num_labels " + std::to_string(c.num_labels());
    }
  }
  int64_t RoFormerConfig::*const fields[] = {
      &RoFormerConfig::vocab_size, &RoFormerConfig::intermediate_size, &RoFormerConfig::max_position_embeddings,
      &RoFormerConfig::type_vocab_size, &RoFormerConfig::embedding_size, &RoFormerConfig::hidden_size};
  const char* const field_names[] = {"vocab_size", "intermediate_size", "max_position_embeddings",
                                     "type_vocab_size", "embedding_size", "hidden_size"};
  for (size_t d = 0; d < implied.size() && d < stored.size(); ++d) {
    if (implied[d] == stored[d]) continue;
    for (size_t f = 0; f < std::size(fields); ++f) {
      RoFormerConfig changed = c;
      changed.*fields[f] = stored[d];
      for (const ParamInfo& info : param_layout(changed)) {
        if (info.name == layout_name && info.shape == stored) {
          return std::string(field_names[f]) + " " + std::to_string(c.*fields[f]);
        }
      }
    }
    break;
  }
  return "";
}

// The field that makes the config imply a tensor the checkpoint lacks (layers are checked before).
const char* blame_missing(const std::string& layout_name) {
  static const std::pair<const char*, const char*> causes[] = {
      {"position_embeddings", "position_encoding"}, {"embeddings_project", "embedding_size"},
      {"crossattention", "add_cross_attention"},   {"LayerNorm", "norm_type"},
      {".bias", "use_bias"}};
  for (const auto& [fragment, field] : causes) {
    if (layout_name.find(fragment) != std::string::npos) return field;
  }
  return nullptr;
}

// HF's rotary table (max_position_embeddings, head_dim), kept in RoPE checkpoints: its shape is the
// only place a checkpoint records max_position_embeddings and num_attention_heads.
void check_rotary_table(const RoFormerConfig& c, const io::WeightStore& w, const std::string& name,
                        const std::string& config_path) {
  if (c.position_encoding != PositionEncoding::rope || !w.contains(name)) return;
  const std::vector<int64_t>& stored = w.at(name).shape;
  const std::vector<int64_t> implied = {c.max_position_embeddings, c.head_dim()};
  if (stored == implied) return;
  const std::string field = stored.size() == 2 && stored[0] != implied[0]
                                ? "max_position_embeddings " + std::to_string(c.max_position_embeddings)
                                : "num_attention_heads " + std::to_string(c.num_attention_heads);
  throw io::Error(config_path + ": " + field + " does not match the checkpoint: " + name + " is " +
                  io::shape_str(stored) + " in " + w.path() + ", the config implies " + io::shape_str(implied));
}

}  // namespace

void check_config_against_weights(const RoFormerConfig& c, const io::WeightStore& w, const std::string& config_path,
                                  const std::string& prefix, const std::vector<std::string>& optional) {
  const bool bare = stores_bare_encoder(w, prefix);
  auto stored_as = [&](const std::string& layout_name) { return prefix + stored_name(layout_name, bare); };
  const std::string layers = stored_as("roformer.encoder.layer.");
  if (const int64_t n = stored_layers(w, layers); n != c.num_hidden_layers) {
    throw io::Error(config_path + ": num_hidden_layers " + std::to_string(c.num_hidden_layers) +
                    " does not match the checkpoint: " + w.path() + " holds " + std::to_string(n) + " layers (" +
                    layers + "N.*)");
  }
  const std::vector<ParamInfo> layout = param_layout(c);
  // Shapes first: a wrong size also makes tensors appear implied (embeddings_project when
  // hidden_size no longer equals embedding_size), and the size is the better name.
  for (const ParamInfo& info : layout) {
    const std::string name = stored_as(info.name);
    if (!w.contains(name) || w.at(name).shape == info.shape) continue;
    const std::vector<int64_t>& stored = w.at(name).shape;
    const std::string field = blame_shape(c, info.name, info.shape, stored);
    throw io::Error(config_path + ": " + (field.empty() ? "the sizes" : field) + " do" + (field.empty() ? "" : "es") +
                    " not match the checkpoint: " + name + " is " + io::shape_str(stored) + " in " + w.path() +
                    ", the config implies " + io::shape_str(info.shape));
  }
  std::vector<std::string> heads = {"cls.", "classifier.", "roformer.pooler."};
  if (c.head) {
    for (const HeadTensor& t : c.head->tensors(c)) heads.push_back(t.name);
  }
  auto any_prefix = [](const std::vector<std::string>& prefixes, const std::string& name) {
    return std::any_of(prefixes.begin(), prefixes.end(), [&](const std::string& p) { return name.rfind(p, 0) == 0; });
  };
  for (const ParamInfo& info : layout) {
    const std::string name = stored_as(info.name);
    if (w.contains(name) || any_prefix(heads, info.name) || any_prefix(optional, info.name)) continue;
    const char* field = blame_missing(info.name);
    throw io::Error(config_path + ": " + w.path() + " has no " + name + ", which the config implies" +
                    (field ? std::string(" (check ") + field + ")" : std::string()));
  }
  check_rotary_table(c, w, stored_as("roformer.encoder.embed_positions.weight"), config_path);
}

}  // namespace model
