// RoFormer encoder forward (see roformer.h). Shapes in comments: B batch, T tokens, E embedding
// size, H hidden size, I intermediate size, V vocabulary, n heads of D = H / n.
#include "roformer.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "rope/rope.hpp"

namespace model {
namespace {

void activation_forward(const std::string& act, float* out, const float* inp, int64_t n) {
  if (act == "gelu") {
    ops::gelu_forward(out, inp, n);
  } else {
    ops::relu_forward(out, inp, n);
  }
}

}  // namespace

RoFormerConfig RoFormerConfig::from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw io::Error(path + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw io::Error(path + ": not valid JSON: " + e.what());
  }
  RoFormerConfig c;
  auto get_int = [&](const char* key, int64_t* out) {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() <= 0) {
      throw io::Error(path + ": '" + key + "' must be a positive integer, got " + j[key].dump());
    }
    *out = j[key].get<int64_t>();
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
  if (j.contains("pad_token_id") && j["pad_token_id"].is_number_integer()) c.pad_token_id = j["pad_token_id"];
  if (j.contains("hidden_act")) {
    if (!j["hidden_act"].is_string()) throw io::Error(path + ": 'hidden_act' must be a string");
    c.hidden_act = j["hidden_act"];
    if (c.hidden_act != "gelu" && c.hidden_act != "relu") {
      throw io::Error(path + ": unknown activation '" + c.hidden_act + "' (supported: gelu, relu)");
    }
  }
  if (j.contains("layer_norm_eps")) {
    if (!j["layer_norm_eps"].is_number() || !(j["layer_norm_eps"].get<double>() > 0)) {
      throw io::Error(path + ": 'layer_norm_eps' must be a positive number");
    }
    c.layer_norm_eps = j["layer_norm_eps"];
  }
  if (j.contains("rotary_value")) {
    if (!j["rotary_value"].is_boolean()) throw io::Error(path + ": 'rotary_value' must be true or false");
    c.rotary_value = j["rotary_value"];
  }
  if (c.hidden_size % c.num_attention_heads != 0 || (c.hidden_size / c.num_attention_heads) % 2 != 0) {
    throw io::Error(path + ": hidden_size must split into heads of even size");
  }
  return c;
}

MlmForward roformer_mlm_forward(const RoFormerConfig& cfg, const io::SafeTensors& w,
                                const std::vector<int64_t>& ids, const std::vector<int64_t>& token_types,
                                const std::vector<int64_t>& attention_mask, int64_t B, int64_t T) {
  const int64_t E = cfg.embedding_size, H = cfg.hidden_size, I = cfg.intermediate_size, V = cfg.vocab_size;
  const int64_t n_heads = cfg.num_attention_heads, D = H / n_heads, N = B * T;
  const double eps = cfg.layer_norm_eps;
  if (T > cfg.max_position_embeddings) {
    throw io::Error("sequence length " + std::to_string(T) + " exceeds max_position_embeddings " +
                    std::to_string(cfg.max_position_embeddings));
  }
  MlmForward f;

  // Embeddings: LayerNorm(word[ids] + token_type[tt]).
  std::vector<float> x(N * E), tt_emb(N * E), mean(N), rstd(N);  // (B, T, E)
  const std::string emb = "roformer.embeddings.";
  const auto word = w.f32(emb + "word_embeddings.weight", {V, E});
  ops::embedding_forward(x.data(), ids.data(), word.data(), N, V, E);
  const auto types = w.f32(emb + "token_type_embeddings.weight", {cfg.type_vocab_size, E});
  ops::embedding_forward(tt_emb.data(), token_types.data(), types.data(), N, cfg.type_vocab_size, E);
  for (int64_t i = 0; i < N * E; ++i) x[i] += tt_emb[i];
  f.embedding_output.resize(N * E);
  ops::layernorm_forward(f.embedding_output.data(), mean.data(), rstd.data(), x.data(),
                         w.f32(emb + "LayerNorm.weight", {E}).data(), w.f32(emb + "LayerNorm.bias", {E}).data(), N, E,
                         eps);
  std::vector<float> h(N * H);  // (B, T, H)
  if (E != H) {
    ops::linear_forward(h.data(), f.embedding_output.data(), w.f32("roformer.embeddings_project.weight", {H, E}).data(),
                        w.f32("roformer.embeddings_project.bias", {H}).data(), N, E, H);
  } else {
    h = f.embedding_output;
  }
  f.hidden_states.push_back(h);

  // RoPE: interleaved pairs, base 10000, positions 0..T-1 in every sequence (the HF table).
  rope_config rc;
  rope::check(rope_config_preset(&rc, ROPE_PRESET_ROFORMER, static_cast<int32_t>(D)));
  const rope::Plan rope_plan(rc);
  const rope_positions positions = rope::offset_positions(0);

  std::vector<float> q(N * H), k(N * H), v(N * H), ctx(N * H), tmp(N * H), a(N * H), ff(N * I), ff_act(N * I);
  const ops::AttentionShape shape{B, T, n_heads, D, false};
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    const std::string p = "roformer.encoder.layer." + std::to_string(l) + ".";
    auto lin = [&](const std::string& name, float* out, const float* inp, int64_t in_f, int64_t out_f) {
      ops::linear_forward(out, inp, w.f32(p + name + ".weight", {out_f, in_f}).data(),
                          w.f32(p + name + ".bias", {out_f}).data(), N, in_f, out_f);
    };
    lin("attention.self.query", q.data(), h.data(), H, H);
    lin("attention.self.key", k.data(), h.data(), H, H);
    lin("attention.self.value", v.data(), h.data(), H, H);
    const rope_tensor qt = rope::bshd(q.data(), ROPE_DTYPE_F32, B, T, n_heads, D);
    const rope_tensor kt = rope::bshd(k.data(), ROPE_DTYPE_F32, B, T, n_heads, D);
    rope_plan.apply_qk(ROPE_FORWARD, positions, qt, kt);
    if (cfg.rotary_value) {
      rope_plan.apply(ROPE_FORWARD, ROPE_ROLE_KEY, positions, rope::bshd(v.data(), ROPE_DTYPE_F32, B, T, n_heads, D));
    }
    std::vector<float> att(B * n_heads * T * T);  // (B, n, T, T)
    ops::attention_forward(ctx.data(), att.data(), q.data(), k.data(), v.data(), attention_mask.data(), shape);
    f.attentions.push_back(std::move(att));
    lin("attention.output.dense", tmp.data(), ctx.data(), H, H);
    for (int64_t i = 0; i < N * H; ++i) tmp[i] += h[i];  // residual
    ops::layernorm_forward(a.data(), mean.data(), rstd.data(), tmp.data(),
                           w.f32(p + "attention.output.LayerNorm.weight", {H}).data(),
                           w.f32(p + "attention.output.LayerNorm.bias", {H}).data(), N, H, eps);
    lin("intermediate.dense", ff.data(), a.data(), H, I);
    activation_forward(cfg.hidden_act, ff_act.data(), ff.data(), N * I);
    lin("output.dense", tmp.data(), ff_act.data(), I, H);
    for (int64_t i = 0; i < N * H; ++i) tmp[i] += a[i];  // residual
    ops::layernorm_forward(h.data(), mean.data(), rstd.data(), tmp.data(), w.f32(p + "output.LayerNorm.weight", {H}).data(),
                           w.f32(p + "output.LayerNorm.bias", {H}).data(), N, H, eps);
    f.hidden_states.push_back(h);
  }

  // MLM head: dense (H→E) → activation → LayerNorm (E) → decoder tied to word embeddings + bias.
  std::vector<float> t1(N * E), t2(N * E), t3(N * E);
  const std::string c = "cls.predictions.";
  ops::linear_forward(t1.data(), h.data(), w.f32(c + "transform.dense.weight", {E, H}).data(),
                      w.f32(c + "transform.dense.bias", {E}).data(), N, H, E);
  activation_forward(cfg.hidden_act, t2.data(), t1.data(), N * E);
  ops::layernorm_forward(t3.data(), mean.data(), rstd.data(), t2.data(), w.f32(c + "transform.LayerNorm.weight", {E}).data(),
                         w.f32(c + "transform.LayerNorm.bias", {E}).data(), N, E, eps);
  f.logits.resize(N * V);
  ops::linear_forward(f.logits.data(), t3.data(), word.data(), w.f32(c + "bias", {V}).data(), N, E, V);
  return f;
}

}  // namespace model
