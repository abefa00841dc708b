// RoFormerConfig: validation and the HF config.json reader/writer (see config.h).
#include "config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <stdexcept>

#include "base/enum_names.h"
#include "io/mapped_file.h"
#include "model/head.h"
#include "io/safetensors.h"
#include "rope/rope.hpp"

namespace model {
namespace {

using nlohmann::json;

// The most labels a sequence classifier may have: far above any label set a sequence classifier is
// trained on, and small enough that the label names, id2label / label2id in config.json and the
// (num_labels, H) head stay cheap (2^20 labels took a minute to read and write back under the fuzzer).
constexpr int64_t kMaxLabels = int64_t{1} << 16;

// PretrainedConfig fields that HF writes into every config.json (and BERT-era fields that published
// RoFormer checkpoints carry). They do not change the network, so they are accepted and ignored.
const std::set<std::string>& generic_fields() {
  static const std::set<std::string> f = {
      "architectures", "model_type", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
      "use_cache", "bos_token_id", "eos_token_id", "sep_token_id", "tie_word_embeddings", "id2label",
      "label2id", "num_labels", "classifier_dropout", "gradient_checkpointing", "output_hidden_states",
      "output_attentions", "return_dict", "problem_type", "tokenizer_class",
      "chunk_size_feed_forward", "torchscript", "pruned_heads", "finetuning_task", "directionality",
      "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head",
      "pooler_type", "position_embedding_type", "is_encoder_decoder"};
  return f;
}

// The task head that architectures[0] names (head.h's registry) and, for a head that uses labels, its
// labels from id2label (keys "0".."n-1"), else, as HF, num_labels of them named LABEL_i (2 when
// num_labels is absent too); for sequence classification problem_type as given, else HF's default
// (regression for one label, single-label classification otherwise). Other architectures keep no
// labels (HF writes a default id2label into every config).
void read_head(const json& j, const std::string& origin, RoFormerConfig* c) {
  const json& arch = j.contains("architectures") ? j["architectures"] : json();
  if (!arch.is_array() || arch.empty() || !arch[0].is_string()) return;
  c->head = find_head(arch[0].get<std::string>());
  if (!c->head || !c->head->uses_labels()) return;
  // num_labels is checked before any label is made: a huge value fails here, not in an allocation.
  int64_t n = 2;
  const bool has_num_labels = j.contains("num_labels") && !j["num_labels"].is_null();
  if (has_num_labels) {
    const json& v = j["num_labels"];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > kMaxLabels) {
      throw io::Error(origin + ": 'num_labels' must be an integer in [1, " + std::to_string(kMaxLabels) + "], got " +
                      v.dump());
    }
    n = v.get<int64_t>();
  }
  if (j.contains("id2label") && !j["id2label"].is_null()) {
    const json& id2label = j["id2label"];
    if (id2label.is_object() && static_cast<int64_t>(id2label.size()) > kMaxLabels) {
      throw io::Error(origin + ": 'id2label' has " + std::to_string(id2label.size()) + " labels, beyond the supported " +
                      std::to_string(kMaxLabels));
    }
    for (size_t i = 0; id2label.is_object() && i < id2label.size(); ++i) {
      const std::string key = std::to_string(i);
      if (!id2label.contains(key) || !id2label[key].is_string()) break;
      c->labels.push_back(id2label[key].get<std::string>());
    }
    if (!id2label.is_object() || id2label.empty() || c->labels.size() != id2label.size()) {
      throw io::Error(origin + ": 'id2label' must map \"0\", \"1\", ... to label names, got " + id2label.dump());
    }
    if (has_num_labels && n != static_cast<int64_t>(c->labels.size())) {  // as transformers' PretrainedConfig
      throw io::Error(origin + ": 'num_labels' is " + std::to_string(n) + " but 'id2label' has " +
                      std::to_string(c->labels.size()) + " labels");
    }
  } else {
    for (int64_t i = 0; i < n; ++i) c->labels.push_back("LABEL_" + std::to_string(i));
  }
  if (!c->sequence_classifier()) return;
  c->problem_type = c->labels.size() == 1 ? ProblemType::regression : ProblemType::single_label_classification;
  if (j.contains("problem_type") && !j["problem_type"].is_null()) {
    if (!j["problem_type"].is_string()) throw io::Error(origin + ": 'problem_type' must be a string");
    try {
      c->problem_type = parse_problem_type(j["problem_type"].get<std::string>());
    } catch (const std::invalid_argument& e) {
      throw io::Error(origin + ": " + e.what());
    }
  }
}

// Every size field is positive and at most a bound far above any published RoFormer (and any
// model this engine can hold), and so is the parameter count as a whole: a corrupt or hostile
// config.json fails here with the field's name instead of in an allocation.
void check_sizes(const RoFormerConfig& c) {
  const struct {
    const char* field;
    int64_t value, max;
  } sizes[] = {{"vocab_size", c.vocab_size, int64_t{1} << 24},
               {"embedding_size", c.embedding_size, int64_t{1} << 16},
               {"hidden_size", c.hidden_size, int64_t{1} << 16},
               {"num_hidden_layers", c.num_hidden_layers, 1024},
               {"num_attention_heads", c.num_attention_heads, c.hidden_size},
               {"intermediate_size", c.intermediate_size, int64_t{1} << 18},
               {"max_position_embeddings", c.max_position_embeddings, int64_t{1} << 24},
               {"type_vocab_size", c.type_vocab_size, int64_t{1} << 16},
               {"num_labels", c.head && c.head->uses_labels() ? c.num_labels() : 1, kMaxLabels}};
  for (const auto& s : sizes) {
    if (s.value <= 0) throw std::invalid_argument(std::string(s.field) + " must be positive, got " + std::to_string(s.value));
  }
  for (const auto& s : sizes) {
    if (s.value > s.max) {
      throw std::invalid_argument(std::string(s.field) + " " + std::to_string(s.value) + " is beyond the supported " +
                                  std::to_string(s.max));
    }
  }
  // The whole: at most 2^33 parameters (32 GiB in fp32), counted in floating point so that nothing
  // overflows; param_layout has the exact count.
  const double h = static_cast<double>(c.hidden_size), e = static_cast<double>(c.embedding_size);
  const double params =
      static_cast<double>(c.num_hidden_layers) * (4 * h * h + 2 * h * static_cast<double>(c.intermediate_size)) +
      e * static_cast<double>(c.vocab_size + c.type_vocab_size) +
      (c.position_encoding == PositionEncoding::learned ? e * static_cast<double>(c.max_position_embeddings) : 0);
  if (params > 8589934592.0) {
    throw std::invalid_argument("the sizes ask for " + std::to_string(static_cast<int64_t>(params / 1e9)) +
                                "e9 parameters, beyond the supported 8.6e9 (check hidden_size, intermediate_size, "
                                "num_hidden_layers and vocab_size)");
  }
  // FAVOR+'s fixed random features, num_hidden_layers × (performer_features, head_dim) floats, are made
  // with the model (and again by each Generator): at most 2^28 (1 GiB).
  const double favor = static_cast<double>(c.num_hidden_layers) * static_cast<double>(c.performer_features) *
                       static_cast<double>(c.head_dim());
  if (c.attention_type == AttentionType::performer && favor > 268435456.0) {
    throw std::invalid_argument("performer_features " + std::to_string(c.performer_features) + " asks for " +
                                std::to_string(static_cast<int64_t>(favor)) +
                                " random features (num_hidden_layers x performer_features x head_dim), beyond the "
                                "supported 268435456");
  }
}

}  // namespace

constexpr base::EnumName<PositionEncoding> kPositionEncodingNames[] = {
    {PositionEncoding::rope, "rope"}, {PositionEncoding::sinusoidal, "sinusoidal"},
    {PositionEncoding::learned, "learned"}, {PositionEncoding::none, "none"}};

const char* position_encoding_name(PositionEncoding pe) { return base::enum_name(kPositionEncodingNames, pe); }

PositionEncoding parse_position_encoding(const std::string& name) {
  return base::parse_enum(kPositionEncodingNames, name, "position encoding");
}

const char* activation_name(Activation a) { return a == Activation::gelu ? "gelu" : "relu"; }

Activation parse_activation(const std::string& name) {
  if (name == "gelu") return Activation::gelu;
  if (name == "relu") return Activation::relu;
  throw std::invalid_argument("unknown activation '" + name + "' (supported: gelu, relu)");
}

constexpr base::EnumName<NormType> kNormTypeNames[] = {{NormType::layer_norm, "layer_norm"},
                                                       {NormType::rms_norm, "rms_norm"}};

const char* norm_type_name(NormType n) { return base::enum_name(kNormTypeNames, n); }

NormType parse_norm_type(const std::string& name) { return base::parse_enum(kNormTypeNames, name, "norm_type"); }

constexpr base::EnumName<AttentionType> kAttentionTypeNames[] = {
    {AttentionType::softmax, "softmax"}, {AttentionType::linear, "linear"}, {AttentionType::performer, "performer"}};

const char* attention_type_name(AttentionType a) { return base::enum_name(kAttentionTypeNames, a); }

AttentionType parse_attention_type(const std::string& name) {
  return base::parse_enum(kAttentionTypeNames, name, "attention_type");
}

constexpr base::EnumName<PoolerActivation> kPoolerActivationNames[] = {
    {PoolerActivation::none, ""}, {PoolerActivation::linear, "linear"}, {PoolerActivation::tanh, "tanh"}};

const char* pooler_activation_name(PoolerActivation a) { return base::enum_name(kPoolerActivationNames, a); }

PoolerActivation parse_pooler_activation(const std::string& name) {
  return base::parse_enum(kPoolerActivationNames, name, "pooler_activation");
}

constexpr base::EnumName<ProblemType> kProblemTypeNames[] = {
    {ProblemType::none, ""},
    {ProblemType::single_label_classification, "single_label_classification"},
    {ProblemType::multi_label_classification, "multi_label_classification"},
    {ProblemType::regression, "regression"}};

const char* problem_type_name(ProblemType p) { return base::enum_name(kProblemTypeNames, p); }

ProblemType parse_problem_type(const std::string& name) {
  return base::parse_enum(kProblemTypeNames, name, "problem_type");
}

void RoFormerConfig::validate() const {
  check_sizes(*this);
  if (hidden_size % num_attention_heads != 0 || head_dim() % 2 != 0) {
    throw std::invalid_argument("hidden_size " + std::to_string(hidden_size) + " must split into " +
                                std::to_string(num_attention_heads) + " heads of even size");
  }
  if (position_encoding == PositionEncoding::sinusoidal && embedding_size % 2 != 0) {
    throw std::invalid_argument("sinusoidal positions need an even embedding_size");
  }
  if (pad_token_id < 0 || pad_token_id >= vocab_size) {
    throw std::invalid_argument("pad_token_id " + std::to_string(pad_token_id) + " is outside the vocabulary");
  }
  if (add_cross_attention && (!is_decoder || attention_type != AttentionType::softmax || pooler_activation != PoolerActivation::none ||
                              sequence_classifier())) {
    throw std::invalid_argument("add_cross_attention needs a causal softmax decoder (is_decoder, attention_type softmax)");
  }
  if (rotate_cross_attention && (!add_cross_attention || position_encoding != PositionEncoding::rope)) {
    throw std::invalid_argument("rotate_cross_attention needs add_cross_attention and position_encoding rope");
  }
  auto probability = [](const char* field, double p) {
    if (!(p >= 0 && p < 1)) throw std::invalid_argument(std::string(field) + " must be in [0, 1)");
  };
  probability("hidden_dropout_prob", hidden_dropout_prob);
  probability("attention_probs_dropout_prob", attention_probs_dropout_prob);
  if (!(initializer_range > 0)) throw std::invalid_argument("initializer_range must be positive");
  if (!(layer_norm_eps > 0)) throw std::invalid_argument("layer_norm_eps must be positive");
  if (!(rope_theta > 1)) throw std::invalid_argument("rope_theta must be greater than 1");
  if (rms_norm() && embedding_size != hidden_size) {
    throw std::invalid_argument("norm_type rms_norm (RoFormer-V2) needs embedding_size == hidden_size");
  }
  if (attention_type == AttentionType::performer && (performer_features < 2 || performer_features % 2 != 0 || performer_features > (1 << 16))) {
    throw std::invalid_argument("performer_features must be even, >= 2 and <= 65536");
  }
  if (head) head->validate(*this);
  rope_config probe = rope::default_config(static_cast<int32_t>(head_dim()));
  rope::apply_scaling_spec(rope_scaling, &probe);  // throws on a bad spec
  // The positions a scaled model accepts, factor x max_position_embeddings, become a token count: they
  // stay within the positions any model may have (no double-to-integer overflow), as the original
  // context of yarn, llama3 and dynamic NTK does.
  if (rope_scaling != "none") {
    constexpr double kMaxPositions = static_cast<double>(int64_t{1} << 24);
    if (!(probe.scaling.factor * static_cast<double>(max_position_embeddings) <= kMaxPositions)) {
      throw std::invalid_argument("rope_scaling '" + rope_scaling + "': the factor times max_position_embeddings (" +
                                  std::to_string(max_position_embeddings) + ") exceeds the supported 16777216 positions");
    }
    if (static_cast<double>(probe.scaling.original_max_positions) > kMaxPositions) {
      throw std::invalid_argument("rope_scaling '" + rope_scaling + "': the original context exceeds the supported 16777216 positions");
    }
  }
}

// Kept whole: a field table (one get_* line per JSON key) with its checks, which reads best in one piece.
RoFormerConfig RoFormerConfig::from_json_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw io::Error(origin + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw io::Error(origin + ": a config must be a JSON object");
  RoFormerConfig c;
  auto fail = [&](const std::string& key, const std::string& what) {
    throw io::Error(origin + ": '" + key + "' " + what + ", got " + j[key].dump());
  };
  auto get_int = [&](const char* key, int64_t* out) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number_integer()) fail(key, "must be an integer");
    *out = j[key].get<int64_t>();
  };
  auto get_double = [&](const char* key, double* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_number()) fail(key, "must be a number");
    *out = j[key].get<double>();
  };
  auto get_bool = [&](const char* key, bool* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_boolean()) fail(key, "must be true or false");
    *out = j[key].get<bool>();
  };
  auto get_string = [&](const char* key, std::string* out) {
    if (!j.contains(key)) return;
    if (!j[key].is_string()) fail(key, "must be a string");
    *out = j[key].get<std::string>();
  };
  get_int("vocab_size", &c.vocab_size);
  get_int("hidden_size", &c.hidden_size);
  c.embedding_size = c.hidden_size;  // HF: embedding_size None → hidden_size
  get_int("embedding_size", &c.embedding_size);
  get_int("num_hidden_layers", &c.num_hidden_layers);
  get_int("num_attention_heads", &c.num_attention_heads);
  get_int("intermediate_size", &c.intermediate_size);
  get_int("max_position_embeddings", &c.max_position_embeddings);
  get_int("type_vocab_size", &c.type_vocab_size);
  get_int("pad_token_id", &c.pad_token_id);
  std::string act = activation_name(c.hidden_act), norm = norm_type_name(c.norm_type),
              attention = attention_type_name(c.attention_type);
  get_string("hidden_act", &act);
  get_double("hidden_dropout_prob", &c.hidden_dropout_prob);
  get_double("attention_probs_dropout_prob", &c.attention_probs_dropout_prob);
  get_double("initializer_range", &c.initializer_range);
  get_double("layer_norm_eps", &c.layer_norm_eps);
  get_bool("rotary_value", &c.rotary_value);
  get_bool("is_decoder", &c.is_decoder);
  get_bool("add_cross_attention", &c.add_cross_attention);
  get_bool("rotate_cross_attention", &c.rotate_cross_attention);
  std::string pe = position_encoding_name(c.position_encoding), layout = "interleaved";
  get_string("position_encoding", &pe);
  get_double("rope_theta", &c.rope_theta);
  get_string("rope_layout", &layout);
  get_string("rope_scaling", &c.rope_scaling);
  get_string("attention_type", &attention);
  get_string("norm_type", &norm);
  get_bool("use_bias", &c.use_bias);
  std::string pooler;
  get_string("pooler_activation", &pooler);
  get_int("performer_features", &c.performer_features);
  if (layout != "interleaved" && layout != "half") fail("rope_layout", "must be \"interleaved\" or \"half\"");
  read_head(j, origin, &c);
  c.rope_half_layout = layout == "half";
  if (j.contains("model_type") && j["model_type"] != "roformer") fail("model_type", "must be \"roformer\"");

  static const std::set<std::string> own = {
      "vocab_size", "hidden_size", "embedding_size", "num_hidden_layers", "num_attention_heads",
      "intermediate_size", "max_position_embeddings", "type_vocab_size", "pad_token_id", "hidden_act",
      "hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range", "layer_norm_eps",
      "rotary_value", "is_decoder", "add_cross_attention", "rotate_cross_attention", "position_encoding", "rope_theta", "rope_layout", "rope_scaling", "attention_type", "performer_features", "norm_type", "use_bias", "pooler_activation"};
  for (const auto& [key, value] : j.items()) {
    if (!own.count(key) && !generic_fields().count(key)) {
      throw io::Error(origin + ": unknown config field '" + key + "'");
    }
  }
  try {
    c.position_encoding = parse_position_encoding(pe);
    c.hidden_act = parse_activation(act);
    c.norm_type = parse_norm_type(norm);
    c.attention_type = parse_attention_type(attention);
    if (!pooler.empty()) c.pooler_activation = parse_pooler_activation(pooler);  // "" (or absent): no pooler
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw io::Error(origin + ": " + e.what());
  }
  return c;
}

void RoFormerConfig::set_head(const std::string& name) { head = &head_named(name); }

bool RoFormerConfig::has_head(const char* architecture) const {
  return head && std::string(head->architecture()) == architecture;
}

RoFormerConfig RoFormerConfig::from_json_file(const std::string& path) {
  return from_json_text(io::read_config_file(path), path);
}

std::string RoFormerConfig::to_json() const {
  json j = {
      {"architectures", {head         ? head->architecture()
                         : is_decoder ? "RoFormerForCausalLM"
                                      : "RoFormerForMaskedLM"}},
      {"model_type", "roformer"},
      {"vocab_size", vocab_size},
      {"embedding_size", embedding_size},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"intermediate_size", intermediate_size},
      {"hidden_act", activation_name(hidden_act)},
      {"hidden_dropout_prob", hidden_dropout_prob},
      {"attention_probs_dropout_prob", attention_probs_dropout_prob},
      {"max_position_embeddings", max_position_embeddings},
      {"type_vocab_size", type_vocab_size},
      {"initializer_range", initializer_range},
      {"layer_norm_eps", layer_norm_eps},
      {"pad_token_id", pad_token_id},
      {"rotary_value", rotary_value},
      {"is_decoder", is_decoder},
      {"use_cache", true},
      {"torch_dtype", "float32"},
      {"position_encoding", position_encoding_name(position_encoding)},
      {"rope_theta", rope_theta},
      {"rope_layout", rope_half_layout ? "half" : "interleaved"},
  };
  if (add_cross_attention) j["add_cross_attention"] = true;
  if (rotate_cross_attention) j["rotate_cross_attention"] = true;
  if (rope_scaling != "none") j["rope_scaling"] = rope_scaling;
  if (norm_type != NormType::layer_norm) j["norm_type"] = norm_type_name(norm_type);
  if (!use_bias) j["use_bias"] = false;
  if (pooler_activation != PoolerActivation::none) j["pooler_activation"] = pooler_activation_name(pooler_activation);
  if (attention_type != AttentionType::softmax) {
    j["attention_type"] = attention_type_name(attention_type);
    j["performer_features"] = performer_features;
  }
  if (head && head->uses_labels()) {
    json id2label = json::object(), label2id = json::object();
    for (size_t i = 0; i < labels.size(); ++i) {
      id2label[std::to_string(i)] = labels[i];
      label2id[labels[i]] = i;
    }
    j["id2label"] = id2label;
    j["label2id"] = label2id;
    j["num_labels"] = labels.size();
    if (sequence_classifier()) j["problem_type"] = problem_type_name(problem_type);
  }
  return j.dump(2) + "\n";
}

}  // namespace model
