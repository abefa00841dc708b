// The encoder-decoder (see seq2seq.h): one arena laid out as HF EncoderDecoderModel's state dict, two
// RoFormer views over it, and the composition encoder → decoder(memory) → LM head.
#include "seq2seq.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/random.h"
#include "io/atomic_file.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "rope/rope.h"
#include "io/weights.h"

namespace model {

using nlohmann::json;

namespace {

const char* const kDecoderWordEmbeddings = "roformer.embeddings.word_embeddings.weight";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The arena offset where a RoFormer layout's MLM head starts (its end when it has none): the
// encoder keeps the part below it.
int64_t encoder_size(const std::vector<ParamInfo>& layout) {
  for (const ParamInfo& info : layout) {
    if (starts_with(info.name, "cls.")) return info.offset;
  }
  return param_count(layout);
}

// The rotary table HF RoFormer keeps (frozen) in each stack's state dict: not ours to load.
bool is_rotary_table(const std::string& name) {
  return name == "encoder.encoder.embed_positions.weight" || name == "decoder.roformer.encoder.embed_positions.weight";
}

}  // namespace

void Seq2SeqConfig::validate() const {
  encoder.validate();
  decoder.validate();
  if (encoder.is_decoder || encoder.add_cross_attention) throw std::invalid_argument("the encoder must not be a decoder");
  if (!decoder.is_decoder || !decoder.add_cross_attention) {
    throw std::invalid_argument("the decoder needs is_decoder and add_cross_attention");
  }
  if (encoder.hidden_size != decoder.hidden_size) {
    throw std::invalid_argument("encoder and decoder hidden_size differ (" + std::to_string(encoder.hidden_size) +
                                " vs " + std::to_string(decoder.hidden_size) + ")");
  }
  if (shared_embeddings &&
      (encoder.vocab_size != decoder.vocab_size || encoder.embedding_size != decoder.embedding_size)) {
    throw std::invalid_argument("shared_embeddings needs equal vocab_size and embedding_size in encoder and decoder");
  }
  for (auto [name, id] : {std::pair<const char*, int64_t>{"decoder_start_token_id", decoder_start_token_id},
                          {"eos_token_id", eos_token_id}, {"pad_token_id", pad_token_id}}) {
    if (id < 0 || id >= decoder.vocab_size) {
      throw std::invalid_argument(std::string(name) + " " + std::to_string(id) + " is outside the target vocabulary");
    }
  }
}

Seq2SeqConfig Seq2SeqConfig::symmetric(const RoFormerConfig& base) {
  Seq2SeqConfig c;
  c.encoder = c.decoder = base;
  c.encoder.is_decoder = c.encoder.add_cross_attention = false;
  c.decoder.is_decoder = c.decoder.add_cross_attention = true;
  c.pad_token_id = base.pad_token_id;
  return c;
}

std::string Seq2SeqConfig::to_json() const {
  json j = {
      {"architectures", {"EncoderDecoderModel"}},
      {"model_type", "encoder-decoder"},
      {"is_encoder_decoder", true},
      {"encoder", json::parse(encoder.to_json())},
      {"decoder", json::parse(decoder.to_json())},
      {"decoder_start_token_id", decoder_start_token_id},
      {"eos_token_id", eos_token_id},
      {"pad_token_id", pad_token_id},
      {"tie_encoder_decoder", false},
      {"shared_embeddings", shared_embeddings},
      {"torch_dtype", "float32"},
  };
  j["encoder"]["architectures"] = {"RoFormerModel"};
  return j.dump(2) + "\n";
}

Seq2SeqConfig Seq2SeqConfig::from_json_text(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw io::Error(origin + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || j.value("model_type", "") != "encoder-decoder") {
    throw io::Error(origin + ": not an encoder-decoder config (model_type \"encoder-decoder\")");
  }
  Seq2SeqConfig c;
  for (const char* part : {"encoder", "decoder"}) {
    if (!j.contains(part) || !j[part].is_object()) throw io::Error(origin + ": '" + part + "' must be a config object");
  }
  c.encoder = RoFormerConfig::from_json_text(j["encoder"].dump(), origin + ": encoder");
  c.decoder = RoFormerConfig::from_json_text(j["decoder"].dump(), origin + ": decoder");
  auto get_int = [&](const char* key, int64_t* out) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number_integer()) throw io::Error(origin + ": '" + key + "' must be an integer");
    *out = j[key].get<int64_t>();
  };
  get_int("decoder_start_token_id", &c.decoder_start_token_id);
  get_int("eos_token_id", &c.eos_token_id);
  get_int("pad_token_id", &c.pad_token_id);
  if (j.contains("shared_embeddings")) {
    if (!j["shared_embeddings"].is_boolean()) throw io::Error(origin + ": 'shared_embeddings' must be true or false");
    c.shared_embeddings = j["shared_embeddings"].get<bool>();
  }
  if (j.value("tie_encoder_decoder", false)) throw io::Error(origin + ": tie_encoder_decoder is not supported");
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw io::Error(origin + ": " + e.what());
  }
  return c;
}

Seq2SeqConfig Seq2SeqConfig::from_json_file(const std::string& path) {
  return from_json_text(io::read_config_file(path), path);
}

template <typename T>
Seq2Seq<T>::Seq2Seq(const Seq2SeqConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  const std::vector<ParamInfo> enc = param_layout(cfg_.encoder), dec = param_layout(cfg_.decoder);
  decoder_base_ = encoder_size(enc);
  for (const ParamInfo& info : enc) {  // RoFormerModel names: no "roformer." prefix, no head
    if (info.offset >= decoder_base_) break;
    ParamInfo e = info;
    e.name = "encoder." + stored_name(info.name, true);
    layout_.push_back(e);
  }
  for (const ParamInfo& info : dec) {  // RoFormerForCausalLM names
    if (cfg_.shared_embeddings && info.name == kDecoderWordEmbeddings) continue;  // its slot stays unused
    ParamInfo d = info;
    d.name = "decoder." + info.name;
    d.offset += decoder_base_;
    layout_.push_back(d);
  }
  params.assign(decoder_base_ + param_count(dec), T(0));
  bind();
  for (int64_t off : encoder_->layer_offsets()) layer_offsets_.push_back(off);
  for (int64_t off : decoder_->layer_offsets()) layer_offsets_.push_back(decoder_base_ + off);
  // The views report final gradients in their own offsets; the owner's are the same plus the base.
  encoder_->on_grads_final = [this](int64_t off) {
    if (on_grads_final) on_grads_final(off);
  };
  decoder_->on_grads_final = [this](int64_t off) {
    if (on_grads_final) on_grads_final(decoder_base_ + off);
  };
}

template <typename T>
void Seq2Seq<T>::set_precision(ops::Precision precision) {
  encoder_->set_precision(precision);
  decoder_->set_precision(precision);
}

template <typename T>
void Seq2Seq<T>::bind() {
  T* g = grads.empty() ? nullptr : grads.data();
  if (!encoder_) {
    encoder_ = std::make_unique<RoFormer<T>>(cfg_.encoder, params.data(), g, false);
    decoder_ = std::make_unique<RoFormer<T>>(cfg_.decoder, params.data() + decoder_base_, g ? g + decoder_base_ : nullptr,
                                             true);
  } else if (g) {  // the gradient arena is new: point the views' gradient structs at it
    const Params<T> eg = bind_params(cfg_.encoder, param_layout(cfg_.encoder), g);
    encoder_->g = eg;
    encoder_->g.head = MlmHeadParams<T>{};
    decoder_->g = bind_params(cfg_.decoder, param_layout(cfg_.decoder), g + decoder_base_);
  }
  if (cfg_.shared_embeddings) {  // the decoder reads, writes gradients to and decodes with the encoder's table
    decoder_->p.emb.word = decoder_->p.head.decoder_w = encoder_->p.emb.word;
    if (g) decoder_->g.emb.word = decoder_->g.head.decoder_w = encoder_->g.emb.word;
  }
}

template <typename T>
void Seq2Seq<T>::allocate_grads() {
  if (grads.size() == params.size()) return;
  grads.assign(params.size(), T(0));
  bind();
}

template <typename T>
void Seq2Seq<T>::init_weights(uint64_t seed) {
  init_params(layout_, params.data(), cfg_.encoder.initializer_range, seed);
  auto zero_pad_row = [](T* table, int64_t pad, int64_t E) { std::fill(table + pad * E, table + (pad + 1) * E, T(0)); };
  zero_pad_row(encoder_->p.emb.word, cfg_.encoder.pad_token_id, cfg_.encoder.embedding_size);
  zero_pad_row(decoder_->p.emb.word, cfg_.decoder.pad_token_id, cfg_.decoder.embedding_size);
}

template <typename T>
void Seq2Seq<T>::load(const io::WeightStore& w) {
  for (const ParamInfo& info : layout_) {
    if (!w.contains(info.name)) throw io::Error(w.path() + ": missing tensor " + info.name);
    const std::vector<float> values = w.f32(info.name, info.shape);
    std::copy(values.begin(), values.end(), params.begin() + info.offset);
    w.release(w.at(info.name));
  }
  const T* word = decoder_->p.emb.word;
  const int64_t V = cfg_.decoder.vocab_size, E = cfg_.decoder.embedding_size;
  for (const auto& entry : w.tensors()) {
    const std::string& name = entry.first;
    const bool known = std::any_of(layout_.begin(), layout_.end(), [&](const ParamInfo& i) { return i.name == name; });
    if (known || is_rotary_table(name)) continue;
    // Copies HF may store of tied tensors: they must equal what they are tied to.
    const bool copy_of_word = name == "decoder.cls.predictions.decoder.weight" ||
                              (cfg_.shared_embeddings && name == std::string("decoder.") + kDecoderWordEmbeddings);
    if (copy_of_word) {
      const auto stored = w.f32(name, {V, E});
      if (!std::equal(stored.begin(), stored.end(), word)) {
        throw io::Error(w.path() + ": " + name + " differs from the tied word embeddings it must equal");
      }
      continue;
    }
    if (name == "decoder.cls.predictions.decoder.bias") {
      const auto stored = w.f32(name, {V});
      if (!std::equal(stored.begin(), stored.end(), decoder_->p.head.decoder_b)) {
        throw io::Error(w.path() + ": " + name + " differs from the tied decoder.cls.predictions.bias");
      }
      continue;
    }
    throw io::Error(w.path() + ": unexpected tensor " + name + " for this encoder-decoder config");
  }
}

template <typename T>
void Seq2Seq<T>::forward(const Seq2SeqInputs& in, bool training, uint64_t dropout_seed) {
  if (in.B <= 0 || in.S <= 0 || in.T <= 0 || !in.source || !in.decoder_input) {
    throw std::invalid_argument("seq2seq forward: empty batch");
  }
  Inputs src;
  src.ids = in.source, src.attention_mask = in.source_mask, src.B = in.B, src.T = in.S, src.row0 = in.row0;
  encoder_->forward(src, training, dropout_seed);
  source_mask_.assign(in.B * in.S, 1);
  if (in.source_mask) source_mask_.assign(in.source_mask, in.source_mask + in.B * in.S);
  decoder_->set_memory(encoder_->hidden_state(cfg_.encoder.num_hidden_layers), source_mask_.data(), in.S);
  Inputs tgt;
  tgt.ids = in.decoder_input, tgt.attention_mask = in.decoder_mask, tgt.B = in.B, tgt.T = in.T, tgt.row0 = in.row0;
  // The decoder's dropout masks come from their own stream: the same sites in both stacks must not
  // share masks.
  decoder_->forward(tgt, training, base::mix64(dropout_seed ^ 0xdec0de5eedull));
}

template <typename T>
void Seq2Seq<T>::backward_from_logits(const T* d_logits) {
  allocate_grads();
  decoder_->backward_from_logits(d_logits);
  encoder_->backward_from_hidden(decoder_->memory_grad());
}

template class Seq2Seq<float>;
template class Seq2Seq<double>;

void save_seq2seq(const std::string& dir, const Seq2Seq<float>& m) {
  const Seq2SeqConfig& c = m.config();
  std::vector<io::TensorView> tensors;
  for (const ParamInfo& info : m.layout()) {
    tensors.push_back({info.name, io::DType::F32, info.shape, m.params.data() + info.offset});
  }
  if (c.shared_embeddings) {
    tensors.push_back({std::string("decoder.") + kDecoderWordEmbeddings, io::DType::F32,
                       {c.decoder.vocab_size, c.decoder.embedding_size}, m.decoder().p.emb.word});
  }
  std::vector<std::vector<float>> tables;  // HF RoFormer keeps its rotary table (frozen) in the state dict
  tables.reserve(2);                       // the views point into them
  for (const auto& [name, stack] : {std::pair<const char*, const RoFormerConfig*>{"encoder.encoder.embed_positions.weight", &c.encoder},
                                    {"decoder.roformer.encoder.embed_positions.weight", &c.decoder}}) {
    if (stack->position_encoding != PositionEncoding::rope) continue;
    const int64_t P = stack->max_position_embeddings, D = stack->head_dim();
    tables.emplace_back(P * D);
    if (rope_hf_roformer_table(P, static_cast<int32_t>(D), tables.back().data()) != ROPE_OK) {
      throw io::Error(std::string("rotary table: ") + rope_last_error());
    }
    tensors.push_back({name, io::DType::F32, {P, D}, tables.back().data()});
  }
  io::write_file_atomic(dir + "/model.safetensors", io::safetensors_bytes(tensors, {{"format", "pt"}}));
  io::write_file_atomic(dir + "/config.json", c.to_json());
}

void check_seq2seq_against_weights(const Seq2SeqConfig& c, const io::WeightStore& weights, const std::string& path) {
  check_config_against_weights(c.encoder, weights, path + ": encoder", "encoder.");
  check_config_against_weights(c.decoder, weights, path + ": decoder", "decoder.",
                               c.shared_embeddings ? std::vector<std::string>{kDecoderWordEmbeddings} : std::vector<std::string>{});
}

}  // namespace model
