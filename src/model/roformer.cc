// The RoFormer forward and backward (see roformer.h). Every tensor is commented with its shape;
// backward ops accumulate, so each gradient buffer is zeroed right before its first use.
#include "roformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/position.h"
#include "ops/random.h"
#include "rope/rope.hpp"

namespace model {

template <typename T>
void norm_forward(const RoFormerConfig& c, T* out, T* mean, T* rstd, const T* in, const T* w, const T* b, int64_t N,
                  int64_t C) {
  if (c.rms_norm()) {
    ops::rmsnorm_forward(out, rstd, in, static_cast<const T*>(nullptr), N, C, c.layer_norm_eps);
  } else {
    ops::layernorm_forward(out, mean, rstd, in, w, b, N, C, c.layer_norm_eps);
  }
}
template void norm_forward<float>(const RoFormerConfig&, float*, float*, float*, const float*, const float*,
                                  const float*, int64_t, int64_t);

template <typename T>
void norm_backward(const RoFormerConfig& c, T* din, T* dw, T* db, const T* dout, const T* in, const T* w, const T* mean,
                   const T* rstd, int64_t N, int64_t C) {
  if (c.rms_norm()) {
    ops::rmsnorm_backward(din, static_cast<T*>(nullptr), dout, in, static_cast<const T*>(nullptr), rstd, N, C);
  } else {
    ops::layernorm_backward(din, dw, db, dout, in, w, mean, rstd, N, C);
  }
}

std::vector<float> sinusoidal_positions(const RoFormerConfig& c, int64_t start, int64_t count) {
  const int64_t E = c.embedding_size;
  std::vector<float> table((start + count) * E);  // from librope's exact cos/sin
  ops::sinusoidal_table(table.data(), start + count, E);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  std::vector<float> out(count * E);
  for (int64_t i = 0; i < count * E; ++i) out[i] = table[start * E + i] * scale;
  return out;
}

rope_config rope_settings(const RoFormerConfig& c) {
  rope_config rc = rope::default_config(static_cast<int32_t>(c.head_dim()));
  rc.base = c.rope_theta;
  rc.layout = c.rope_half_layout ? ROPE_LAYOUT_HALF : ROPE_LAYOUT_INTERLEAVED;
  rope::apply_scaling_spec(c.rope_scaling, &rc);
  return rc;
}

ops::LinearAttentionShape linear_attention_shape(const RoFormerConfig& c, int64_t B, int64_t T, int64_t start) {
  ops::LinearAttentionShape s{B, T, c.num_attention_heads, c.head_dim(), c.head_dim(), c.is_decoder};
  s.feature_map = c.attention_type == "performer" ? ops::FeatureMap::favor : ops::FeatureMap::elu_plus_one;
  s.favor_features = c.attention_type == "performer" ? c.performer_features : 0;
  s.rope = c.position_encoding == PositionEncoding::rope;
  s.rope_cfg = rope_settings(c);  // librope settings of the model (linear attention sets head_dim = F)
  s.start = start;
  return s;
}

template <typename T>
std::vector<T> performer_features(const RoFormerConfig& c, int64_t layer) {
  std::vector<T> w(c.performer_features * c.head_dim());
  ops::favor_projection(w.data(), c.performer_features, c.head_dim(), ops::mix64(0xfa70ull + layer));
  return w;
}
template std::vector<float> performer_features<float>(const RoFormerConfig&, int64_t);
template std::vector<double> performer_features<double>(const RoFormerConfig&, int64_t);

// RoPE on (B, T, n, D) q/k/v at positions 0..T-1. float goes through librope; double (gradient
// checks) rotates with cos/sin evaluated in double from the same plan's frequencies (without a
// scaling method's attention factor). Dynamic NTK takes its frequencies from the batch length.
template <typename T>
struct RoFormer<T>::Rope {
  explicit Rope(const RoFormerConfig& c)
      : plan(rope_settings(c)), inv_freq(plan.inv_freq()), half(c.rope_half_layout),
        dynamic(rope_settings(c).scaling.type == ROPE_SCALING_DYNAMIC_NTK) {}

  void set_length(int64_t S) {
    if (dynamic && S != length) {
      plan.set_seq_len(S);
      inv_freq = plan.inv_freq();
      length = S;
    }
  }

  void apply(rope_direction dir, rope_role role, T* x, int64_t B, int64_t S, int64_t n, int64_t D) const {
    if constexpr (std::is_same_v<T, float>) {
      plan.apply(dir, role, rope::offset_positions(0), rope::bshd(x, ROPE_DTYPE_F32, B, S, n, D));
    } else {
      const int64_t P = D / 2;
      const double sign = dir == ROPE_FORWARD ? 1.0 : -1.0;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < S; ++t) {
          for (int64_t h = 0; h < n; ++h) {
            T* head = x + ((b * S + t) * n + h) * D;
            for (int64_t i = 0; i < P; ++i) {
              const double angle = static_cast<double>(t) * inv_freq[i];
              const double c = std::cos(angle), s = sign * std::sin(angle);
              T& x0 = head[half ? i : 2 * i];
              T& x1 = head[half ? i + P : 2 * i + 1];
              const double a = x0, bb = x1;
              x0 = static_cast<T>(a * c - bb * s);
              x1 = static_cast<T>(bb * c + a * s);
            }
          }
        }
      }
    }
  }

  rope::Plan plan;
  std::vector<double> inv_freq;
  bool half, dynamic;
  int64_t length = -1;
};

// Everything the backward needs from the forward, plus gradient scratch, for one (B, T).
template <typename T>
struct RoFormer<T>::Activations {
  int64_t B = 0, S = 0, N = 0;
  Keep keep = Keep::all;  // outputs: h holds 2 buffers and layers 1, reused by every layer
  std::vector<int64_t> ids, token_types, mask, targets, position_ids;  // (B, T)
  std::vector<int64_t> row_limit;  // (B, T) UniLM prefix limits (RoFormer-Sim)
  bool has_mask = false;
  std::vector<T> emb_sum, emb_ln, emb_out;  // (N, E): word + type (+ position); LayerNorm; dropout
  std::vector<T> emb_mean, emb_rstd;        // (N)
  std::vector<std::vector<T>> h;            // L+1 × (N, H): block inputs and the last output (Keep::all)
  std::vector<T>& input_of(int64_t l) { return h[keep == Keep::all ? l : l % 2]; }  // (N, H) of block l
  std::vector<T>& last_hidden(int64_t L) { return input_of(L); }
  struct Layer {
    std::vector<T> q, k, v, ctx, res1, a, res2;  // (N, H); q, k (v) after RoPE; res = pre-LN sums
    std::vector<T> att;                          // (B, n, T, T), softmax attention
    std::vector<T> saved;                        // linear attention: (B, T, n, 2F + 2)
    std::vector<T> f1, f1a;                      // (N, I) pre- and post-activation
    std::vector<T> mean1, rstd1, mean2, rstd2;   // (N)
  };
  std::vector<Layer> layers;
  std::vector<T> t1, t2, t3, head_mean, head_rstd;  // (N, E) head dense, activation, LayerNorm; (N)
  std::vector<T> logits, probs;                     // (N, V)
  std::vector<T> pooled;                            // (B, H) RoFormer-Sim's pooler output
  int64_t counted = 0;
  bool has_loss = false;  // the last forward computed a loss (backward needs it)
  bool training = false;
  uint64_t dropout_seed = 0;
  // Gradient scratch.
  std::vector<T> d_logits;                              // (N, V)
  std::vector<T> d_t3, d_t2, d_t1;                      // (N, E)
  std::vector<T> d_h, d_a, d_res, d_x, d_q, d_k, d_v, d_ctx;  // (N, H)
  std::vector<T> d_f1, d_f1a;                           // (N, I)
  std::vector<T> d_emb_out, d_emb_ln, d_emb_sum;        // (N, E)
  std::vector<T> d_tmp;                                 // dropout's in-place backward
};

namespace {

template <typename T>
void activation_forward(const std::string& act, T* out, const T* inp, int64_t n) {
  if (act == "gelu") {
    ops::gelu_forward(out, inp, n);
  } else {
    ops::relu_forward(out, inp, n);
  }
}

template <typename T>
void activation_backward(const std::string& act, T* dinp, const T* inp, const T* dout, int64_t n) {
  if (act == "gelu") {
    ops::gelu_backward(dinp, inp, dout, n);
  } else {
    ops::relu_backward(dinp, inp, dout, n);
  }
}

template <typename T>
void zero(std::vector<T>& v) {
  std::fill(v.begin(), v.end(), T(0));
}

template <typename T>
void add_into(T* out, const T* a, const T* b, int64_t n) {  // out = a + b
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void accumulate(T* out, const T* a, int64_t n) {  // out += a
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] += a[i];
}

// Dropout masks: one independent stream per site (embeddings, and per layer: attention
// probabilities, attention output, feed-forward output).
uint64_t site_seed(uint64_t seed, int64_t site) { return ops::mix64(seed ^ ops::mix64(0x5eed0000ull + site)); }

}  // namespace

template <typename T>
RoFormer<T>::RoFormer(const RoFormerConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  layout_ = param_layout(cfg_);
  params.assign(param_count(layout_), T(0));
  p = bind_params(cfg_, layout_, params.data());
  if (cfg_.position_encoding == PositionEncoding::rope) rope_ = std::make_unique<Rope>(cfg_);
  if (cfg_.attention_type == "performer") {
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) favor_.push_back(performer_features<T>(cfg_, l));
  }
  act_ = std::make_unique<Activations>();
}

template <typename T>
RoFormer<T>::~RoFormer() = default;

template <typename T>
void RoFormer<T>::init_weights(uint64_t seed) {
  for (size_t t = 0; t < layout_.size(); ++t) {
    const ParamInfo& info = layout_[t];
    T* w = params.data() + info.offset;
    const bool norm_weight = info.name.find("LayerNorm.weight") != std::string::npos;
    if (norm_weight) {
      std::fill(w, w + info.size, T(1));
    } else if (info.shape.size() == 1) {
      std::fill(w, w + info.size, T(0));
    } else {
      const uint64_t stream = ops::mix64(seed ^ ops::mix64(t + 1));
      for (int64_t i = 0; i < info.size; ++i) {  // Box–Muller on counter-based uniforms
        const double u1 = 1.0 - ops::uniform01(stream, 2 * i), u2 = ops::uniform01(stream, 2 * i + 1);
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
        w[i] = static_cast<T>(cfg_.initializer_range * z);
      }
    }
  }
  std::fill(p.word + cfg_.pad_token_id * cfg_.embedding_size, p.word + (cfg_.pad_token_id + 1) * cfg_.embedding_size,
            T(0));
}

template <typename T>
void RoFormer<T>::load(const io::WeightStore& w, const std::vector<std::string>& other_heads, bool mlm_head) {
  *act_ = Activations();  // the head may change: the next forward sizes its buffers afresh
  // RoFormerModel checkpoints store the encoder without the "roformer." prefix.
  const bool bare = !w.contains("roformer.embeddings.word_embeddings.weight") &&
                    w.contains("embeddings.word_embeddings.weight");
  auto stored_name = [&](const std::string& name) {
    return bare && name.rfind("roformer.", 0) == 0 ? name.substr(9) : name;
  };
  const std::string head = "cls.predictions.";
  has_mlm_head_ = mlm_head && (cfg_.rms_norm() || std::any_of(layout_.begin(), layout_.end(), [&](const ParamInfo& i) {
                    return i.name.rfind(head, 0) == 0 && w.contains(i.name);
                  }));
  std::vector<std::string> skipped = other_heads;  // prefixes of tensors left unread
  if (!mlm_head) skipped.push_back(head);
  for (const ParamInfo& info : layout_) {
    if (!has_mlm_head_ && info.name.rfind(head, 0) == 0) continue;  // an encoder-only checkpoint
    const std::string name = stored_name(info.name);
    if (!w.contains(name)) throw io::Error(w.path() + ": missing tensor " + name);
    const std::vector<float> values = w.f32(name, info.shape);
    std::copy(values.begin(), values.end(), params.begin() + info.offset);
    w.release(w.at(name));  // the model holds its own copy now
  }
  for (const auto& entry : w.tensors()) {
    const std::string& name = entry.first;  // not a structured binding: clang < 16 cannot capture one
    const bool known = std::any_of(layout_.begin(), layout_.end(),
                                   [&](const ParamInfo& i) { return stored_name(i.name) == name; });
    if (known || name == stored_name("roformer.encoder.embed_positions.weight")) continue;
    if (std::any_of(skipped.begin(), skipped.end(), [&](const std::string& p) { return name.rfind(p, 0) == 0; })) {
      continue;  // a head the caller loads itself (classifier., pooler., ...) or did not ask for
    }
    if (name == "cls.predictions.decoder.weight") {  // tied: must equal the word embeddings
      const auto dec = w.f32(name, {cfg_.vocab_size, cfg_.embedding_size});
      if (!std::equal(dec.begin(), dec.end(), p.word)) {
        throw io::Error(w.path() + ": cls.predictions.decoder.weight differs from the tied word embeddings");
      }
      w.release(entry.second);
      continue;
    }
    if (name == "cls.predictions.decoder.bias") {  // tied: pytorch_model.bin files store it too
      const auto bias = w.f32(name, {cfg_.vocab_size});
      if (!std::equal(bias.begin(), bias.end(), p.decoder_bias)) {
        throw io::Error(w.path() + ": cls.predictions.decoder.bias differs from the tied cls.predictions.bias");
      }
      w.release(entry.second);
      continue;
    }
    throw io::Error(w.path() + ": unexpected tensor " + name + " for this config");
  }
}

template <typename T>
void RoFormer<T>::ensure_activations(int64_t B, int64_t S) {
  Activations& a = *act_;
  if (a.B == B && a.S == S && a.keep == keep_) return;
  const int64_t N = B * S, E = cfg_.embedding_size, H = cfg_.hidden_size, I = cfg_.intermediate_size,
                V = cfg_.vocab_size, n = cfg_.num_attention_heads, L = cfg_.num_hidden_layers;
  a = Activations();
  a.B = B, a.S = S, a.N = N;
  a.keep = keep_;
  const bool all = keep_ == Keep::all;
  for (auto* v : {&a.emb_sum, &a.emb_ln, &a.emb_out, &a.t1, &a.t2, &a.t3}) {
    v->resize(N * E);
  }
  for (auto* v : {&a.emb_mean, &a.emb_rstd, &a.head_mean, &a.head_rstd}) v->resize(N);
  a.h.assign(all ? L + 1 : 2, std::vector<T>(N * H));  // outputs: layer l reads h[l % 2], writes the other
  a.layers.resize(all ? L : 1);
  for (auto& l : a.layers) {
    for (auto* v : {&l.q, &l.k, &l.v, &l.ctx, &l.res1, &l.a, &l.res2}) v->resize(N * H);
    if (cfg_.attention_type == "softmax") {
      l.att.resize(B * n * S * S);
    } else {
      l.saved.resize(ops::linear_attention_saved_size(linear_attention_shape(cfg_, B, S, 0)));
    }
    l.f1.resize(N * I);
    l.f1a.resize(N * I);
    for (auto* v : {&l.mean1, &l.rstd1, &l.mean2, &l.rstd2}) v->resize(N);
  }
  if (has_mlm_head_) a.logits.resize(N * V);  // probabilities and every gradient buffer come with the first loss / backward
}

template <typename T>
void RoFormer<T>::ensure_gradient_scratch() {
  Activations& a = *act_;
  const int64_t N = a.N, E = cfg_.embedding_size, H = cfg_.hidden_size, I = cfg_.intermediate_size,
                V = cfg_.vocab_size;
  if (static_cast<int64_t>(a.d_f1.size()) == N * I) return;
  for (auto* v : {&a.d_t3, &a.d_t2, &a.d_t1, &a.d_emb_out, &a.d_emb_ln, &a.d_emb_sum}) v->resize(N * E);
  a.d_logits.resize(N * V);
  for (auto* v : {&a.d_h, &a.d_a, &a.d_res, &a.d_x, &a.d_q, &a.d_k, &a.d_v, &a.d_ctx}) v->resize(N * H);
  a.d_f1.resize(N * I);
  a.d_f1a.resize(N * I);
}

template <typename T>
double RoFormer<T>::forward(const Inputs& in, bool training, uint64_t dropout_seed) {
  const int64_t B = in.B, S = in.T;
  if (B <= 0 || S <= 0 || !in.ids) throw std::invalid_argument("forward: empty batch");
  if (S > cfg_.max_position_embeddings && cfg_.position_encoding == PositionEncoding::learned) {
    throw std::invalid_argument("sequence length " + std::to_string(S) + " exceeds the " +
                                std::to_string(cfg_.max_position_embeddings) + " learned positions");
  }
  ensure_activations(B, S);
  if (rope_) rope_->set_length(S);
  Activations& a = *act_;
  const int64_t N = B * S, E = cfg_.embedding_size, H = cfg_.hidden_size, I = cfg_.intermediate_size,
                V = cfg_.vocab_size, n = cfg_.num_attention_heads, D = cfg_.head_dim();
  const double p_hidden = training ? cfg_.hidden_dropout_prob : 0.0;
  a.training = training;
  a.dropout_seed = dropout_seed;
  a.ids.assign(in.ids, in.ids + N);
  a.token_types.assign(N, 0);
  if (in.token_types) a.token_types.assign(in.token_types, in.token_types + N);
  a.has_mask = in.attention_mask != nullptr;
  a.mask.assign(N, 1);
  if (in.attention_mask) a.mask.assign(in.attention_mask, in.attention_mask + N);
  a.targets.assign(N, kIgnoreIndex);
  if (in.targets) a.targets.assign(in.targets, in.targets + N);
  a.position_ids.resize(N);
  for (int64_t i = 0; i < N; ++i) a.position_ids[i] = i % S;
  if (cfg_.unilm_mask()) {  // UniLM: query i sees key j iff cumsum(tt)[j] <= cumsum(tt)[i], a prefix
    a.row_limit.resize(N);
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> idx(S);
      for (int64_t t = 0, sum = 0; t < S; ++t) idx[t] = sum += a.token_types[b * S + t] != 0;
      for (int64_t t = 0, lim = 0; t < S; ++t) {
        while (lim < S && idx[lim] <= idx[t]) ++lim;  // idx is non-decreasing: lim only grows
        a.row_limit[b * S + t] = lim;
      }
    }
  }
  auto dropout = [&](T* x, int64_t count, int64_t site) {
    if (p_hidden > 0) ops::dropout_forward(x, x, count, p_hidden, site_seed(dropout_seed, site));
  };

  // Embeddings.
  std::vector<T> tmp(N * E);  // (N, E)
  ops::embedding_forward(a.emb_sum.data(), a.ids.data(), p.word, N, V, E);
  ops::embedding_forward(tmp.data(), a.token_types.data(), p.token_type, N, cfg_.type_vocab_size, E);
  accumulate(a.emb_sum.data(), tmp.data(), N * E);
  if (cfg_.position_encoding == PositionEncoding::learned) {
    ops::embedding_forward(tmp.data(), a.position_ids.data(), p.position, N, cfg_.max_position_embeddings, E);
    accumulate(a.emb_sum.data(), tmp.data(), N * E);
  } else if (cfg_.position_encoding == PositionEncoding::sinusoidal) {
    const std::vector<float> table = sinusoidal_positions(cfg_, 0, S);  // (T, E)
    for (int64_t i = 0; i < N * E; ++i) a.emb_sum[i] += static_cast<T>(table[i % (S * E)]);
  }
  norm_forward(cfg_, a.emb_ln.data(), a.emb_mean.data(), a.emb_rstd.data(), a.emb_sum.data(), p.emb_ln_w,
                         p.emb_ln_b, N, E);
  a.emb_out = a.emb_ln;
  dropout(a.emb_out.data(), N * E, 0);
  if (p.proj_w) {
    ops::linear_forward(a.input_of(0).data(), a.emb_out.data(), p.proj_w, p.proj_b, N, E, H);  // (N, H)
  } else {
    a.input_of(0) = a.emb_out;
  }

  // Blocks.
  const int64_t n_layers = cfg_.num_hidden_layers;
  for (int64_t l = 0; l < n_layers; ++l) {
    const LayerParams<T>& w = p.layers[l];
    auto& L = a.layers[keep_ == Keep::all ? l : 0];
    const T* x = a.input_of(l).data();  // (N, H)
    ops::linear_forward(L.q.data(), x, w.q_w, w.q_b, N, H, H);
    ops::linear_forward(L.k.data(), x, w.k_w, w.k_b, N, H, H);
    ops::linear_forward(L.v.data(), x, w.v_w, w.v_b, N, H, H);
    const bool softmax = cfg_.attention_type == "softmax";
    if (rope_ && softmax) {
      rope_->apply(ROPE_FORWARD, ROPE_ROLE_QUERY, L.q.data(), B, S, n, D);
      rope_->apply(ROPE_FORWARD, ROPE_ROLE_KEY, L.k.data(), B, S, n, D);
    }
    if (rope_ && cfg_.rotary_value) rope_->apply(ROPE_FORWARD, ROPE_ROLE_KEY, L.v.data(), B, S, n, D);
    if (softmax) {
      ops::AttentionShape shape{B, S, n, D, cfg_.is_decoder && !cfg_.unilm_mask()};
      if (cfg_.unilm_mask()) shape.row_limit = a.row_limit.data();
      if (training) {
        shape.dropout_p = cfg_.attention_probs_dropout_prob;
        shape.dropout_seed = site_seed(dropout_seed, 1 + 3 * l);
      }
      ops::attention_forward(L.ctx.data(), L.att.data(), L.q.data(), L.k.data(), L.v.data(),
                             a.has_mask ? a.mask.data() : nullptr, shape);
    } else {
      if (a.has_mask && std::find(a.mask.begin(), a.mask.end(), 0) != a.mask.end()) {
        throw std::invalid_argument("linear attention does not support padding masks");
      }
      if (!favor_.empty()) {  // FAVOR+ estimates exp(q·k); scale for softmax(q·kᵀ/√D)
        const T c = static_cast<T>(std::pow(static_cast<double>(D), -0.25));
        for (auto* t : {&L.q, &L.k}) {
          for (T& x : *t) x *= c;
        }
      }
      ops::linear_attention_forward(L.ctx.data(), L.saved.data(), L.q.data(), L.k.data(), L.v.data(),
                                    favor_.empty() ? nullptr : favor_[l].data(), linear_attention_shape(cfg_, B, S, 0));
    }
    ops::linear_forward(L.res1.data(), L.ctx.data(), w.ao_w, w.ao_b, N, H, H);
    dropout(L.res1.data(), N * H, 2 + 3 * l);
    accumulate(L.res1.data(), x, N * H);  // residual
    norm_forward(cfg_, L.a.data(), L.mean1.data(), L.rstd1.data(), L.res1.data(), w.ln1_w, w.ln1_b, N, H);
    ops::linear_forward(L.f1.data(), L.a.data(), w.ff1_w, w.ff1_b, N, H, I);  // (N, I)
    activation_forward(cfg_.hidden_act, L.f1a.data(), L.f1.data(), N * I);
    ops::linear_forward(L.res2.data(), L.f1a.data(), w.ff2_w, w.ff2_b, N, I, H);
    dropout(L.res2.data(), N * H, 3 + 3 * l);
    accumulate(L.res2.data(), L.a.data(), N * H);  // residual
    norm_forward(cfg_, a.input_of(l + 1).data(), L.mean2.data(), L.rstd2.data(), L.res2.data(), w.ln2_w, w.ln2_b, N,
                 H);
  }

  const T* last = a.last_hidden(n_layers).data();  // (N, H)
  if (p.pooler_w) {  // RoFormer-Sim: pooled (B, H) = act(h_L[:, 0]·Wpᵀ + bp)
    a.pooled.resize(B * H);
    std::vector<T> cls(B * H);  // (B, H) the [CLS] states
    for (int64_t b = 0; b < B; ++b) std::copy_n(last + b * S * H, H, cls.data() + b * H);
    ops::linear_forward(a.pooled.data(), cls.data(), p.pooler_w, p.pooler_b, B, H, H);
    if (cfg_.pooler_activation == "tanh") {
      for (T& x : a.pooled) x = std::tanh(x);
    }
  }
  if (!has_mlm_head_) {  // an encoder-only checkpoint: the last hidden state is the output
    if (in.targets) throw std::invalid_argument("this checkpoint has no MLM head: no logits, no loss");
    a.counted = 0;
    a.has_loss = false;
    return 0.0;
  }
  if (cfg_.rms_norm()) {  // RoFormer-V2: the tied matmul only
    ops::linear_forward(a.logits.data(), last, p.word, static_cast<const T*>(nullptr), N, H, V);
  } else {  // dense → activation → LayerNorm → decoder tied to the word embeddings, + bias
    ops::linear_forward(a.t1.data(), last, p.head_w, p.head_b, N, H, E);  // (N, E)
    activation_forward(cfg_.hidden_act, a.t2.data(), a.t1.data(), N * E);
    norm_forward(cfg_, a.t3.data(), a.head_mean.data(), a.head_rstd.data(), a.t2.data(), p.head_ln_w, p.head_ln_b, N, E);
    ops::linear_forward(a.logits.data(), a.t3.data(), p.word, p.decoder_bias, N, E, V);  // (N, V)
  }
  a.counted = 0;
  a.has_loss = in.targets != nullptr;
  if (!in.targets) return 0.0;
  a.probs.resize(N * V);
  return ops::cross_entropy_forward(a.probs.data(), a.logits.data(), a.targets.data(), N, V, kIgnoreIndex,
                                    &a.counted);
}

template <typename T>
void RoFormer<T>::backward() {
  Activations& a = *act_;
  if (a.N == 0 || !a.has_loss) throw std::logic_error("backward needs a forward with targets");
  if (a.keep != Keep::all) throw std::logic_error("backward needs a forward with Keep::all");
  allocate_grads();
  ensure_gradient_scratch();
  const int64_t B = a.B, S = a.S, N = a.N, E = cfg_.embedding_size, H = cfg_.hidden_size,
                I = cfg_.intermediate_size, V = cfg_.vocab_size, n = cfg_.num_attention_heads, D = cfg_.head_dim();
  const double p_hidden = a.training ? cfg_.hidden_dropout_prob : 0.0;
  auto dropout_back = [&](T* dx, const T* dy, int64_t count, int64_t site) {  // dx = dropout'(dy), dx may be dy
    if (p_hidden > 0) {
      a.d_tmp.assign(dy, dy + count);
      std::fill(dx, dx + count, T(0));
      ops::dropout_backward(dx, a.d_tmp.data(), count, p_hidden, site_seed(a.dropout_seed, site));
    } else if (dx != dy) {
      std::copy(dy, dy + count, dx);
    }
  };

  // Loss and head.
  zero(a.d_logits);
  ops::cross_entropy_backward(a.d_logits.data(), a.probs.data(), a.targets.data(), N, V, kIgnoreIndex, a.counted,
                              1.0);
  zero(a.d_h);
  if (cfg_.rms_norm()) {
    ops::linear_backward(a.d_h.data(), g.word, static_cast<T*>(nullptr), a.d_logits.data(), a.h.back().data(), p.word,
                         N, H, V);
  } else {
    zero(a.d_t3);
    ops::linear_backward(a.d_t3.data(), g.word, g.decoder_bias, a.d_logits.data(), a.t3.data(), p.word, N, E, V);
    zero(a.d_t2);
    norm_backward(cfg_, a.d_t2.data(), g.head_ln_w, g.head_ln_b, a.d_t3.data(), a.t2.data(), p.head_ln_w,
                  a.head_mean.data(), a.head_rstd.data(), N, E);
    zero(a.d_t1);
    activation_backward(cfg_.hidden_act, a.d_t1.data(), a.t1.data(), a.d_t2.data(), N * E);
    ops::linear_backward(a.d_h.data(), g.head_w, g.head_b, a.d_t1.data(), a.h.back().data(), p.head_w, N, H, E);
  }

  // Blocks, last to first; d_h holds d(loss)/d(block output), then d(block input).
  for (int64_t l = cfg_.num_hidden_layers - 1; l >= 0; --l) {
    const LayerParams<T>& w = p.layers[l];
    const LayerParams<T>& gw = g.layers[l];
    auto& L = a.layers[l];
    zero(a.d_res);
    norm_backward(cfg_, a.d_res.data(), gw.ln2_w, gw.ln2_b, a.d_h.data(), L.res2.data(), w.ln2_w, L.mean2.data(),
                            L.rstd2.data(), N, H);
    a.d_a = a.d_res;                                         // residual branch
    dropout_back(a.d_res.data(), a.d_res.data(), N * H, 3 + 3 * l);
    zero(a.d_f1a);
    ops::linear_backward(a.d_f1a.data(), gw.ff2_w, gw.ff2_b, a.d_res.data(), L.f1a.data(), w.ff2_w, N, I, H);
    zero(a.d_f1);
    activation_backward(cfg_.hidden_act, a.d_f1.data(), L.f1.data(), a.d_f1a.data(), N * I);
    ops::linear_backward(a.d_a.data(), gw.ff1_w, gw.ff1_b, a.d_f1.data(), L.a.data(), w.ff1_w, N, H, I);
    zero(a.d_res);
    norm_backward(cfg_, a.d_res.data(), gw.ln1_w, gw.ln1_b, a.d_a.data(), L.res1.data(), w.ln1_w, L.mean1.data(),
                            L.rstd1.data(), N, H);
    a.d_x = a.d_res;  // residual branch into the block input
    dropout_back(a.d_res.data(), a.d_res.data(), N * H, 2 + 3 * l);
    zero(a.d_ctx);
    ops::linear_backward(a.d_ctx.data(), gw.ao_w, gw.ao_b, a.d_res.data(), L.ctx.data(), w.ao_w, N, H, H);
    zero(a.d_q);
    zero(a.d_k);
    zero(a.d_v);
    if (cfg_.attention_type == "softmax") {
      ops::AttentionShape shape{B, S, n, D, cfg_.is_decoder && !cfg_.unilm_mask()};
      if (cfg_.unilm_mask()) shape.row_limit = a.row_limit.data();
      if (a.training) {
        shape.dropout_p = cfg_.attention_probs_dropout_prob;
        shape.dropout_seed = site_seed(a.dropout_seed, 1 + 3 * l);
      }
      ops::attention_backward(a.d_q.data(), a.d_k.data(), a.d_v.data(), a.d_ctx.data(), L.att.data(), L.q.data(),
                              L.k.data(), L.v.data(), shape);
      if (rope_) {  // the rotation is orthogonal: its backward rotates by −θ
        rope_->apply(ROPE_BACKWARD, ROPE_ROLE_QUERY, a.d_q.data(), B, S, n, D);
        rope_->apply(ROPE_BACKWARD, ROPE_ROLE_KEY, a.d_k.data(), B, S, n, D);
      }
    } else {
      ops::linear_attention_backward(a.d_q.data(), a.d_k.data(), a.d_v.data(), a.d_ctx.data(), L.saved.data(),
                                     L.q.data(), L.k.data(), L.v.data(), favor_.empty() ? nullptr : favor_[l].data(),
                                     linear_attention_shape(cfg_, B, S, 0));
      if (!favor_.empty()) {
        const T c = static_cast<T>(std::pow(static_cast<double>(D), -0.25));
        for (auto* t : {&a.d_q, &a.d_k}) {
          for (T& x : *t) x *= c;
        }
      }
    }
    if (rope_ && cfg_.rotary_value) rope_->apply(ROPE_BACKWARD, ROPE_ROLE_KEY, a.d_v.data(), B, S, n, D);
    const T* x = a.h[l].data();
    ops::linear_backward(a.d_x.data(), gw.q_w, gw.q_b, a.d_q.data(), x, w.q_w, N, H, H);
    ops::linear_backward(a.d_x.data(), gw.k_w, gw.k_b, a.d_k.data(), x, w.k_w, N, H, H);
    ops::linear_backward(a.d_x.data(), gw.v_w, gw.v_b, a.d_v.data(), x, w.v_w, N, H, H);
    std::swap(a.d_h, a.d_x);
  }

  // Embeddings.
  if (p.proj_w) {
    zero(a.d_emb_out);
    ops::linear_backward(a.d_emb_out.data(), g.proj_w, g.proj_b, a.d_h.data(), a.emb_out.data(), p.proj_w, N, E, H);
  } else {
    a.d_emb_out = a.d_h;
  }
  dropout_back(a.d_emb_ln.data(), a.d_emb_out.data(), N * E, 0);
  zero(a.d_emb_sum);
  norm_backward(cfg_, a.d_emb_sum.data(), g.emb_ln_w, g.emb_ln_b, a.d_emb_ln.data(), a.emb_sum.data(),
                          p.emb_ln_w, a.emb_mean.data(), a.emb_rstd.data(), N, E);
  ops::embedding_backward(g.token_type, a.d_emb_sum.data(), a.token_types.data(), N, E);
  if (p.position) ops::embedding_backward(g.position, a.d_emb_sum.data(), a.position_ids.data(), N, E);
  // nn.Embedding(padding_idx): the lookup gives the padding row no gradient (the tied decoder does).
  for (int64_t i = 0; i < N; ++i) {
    if (a.ids[i] == cfg_.pad_token_id) std::fill(a.d_emb_sum.begin() + i * E, a.d_emb_sum.begin() + (i + 1) * E, T(0));
  }
  ops::embedding_backward(g.word, a.d_emb_sum.data(), a.ids.data(), N, E);
}

template <typename T>
void RoFormer<T>::set_keep(Keep keep) {
  keep_ = keep;
}

template <typename T>
void RoFormer<T>::allocate_grads() {
  if (grads.size() == params.size()) return;
  grads.assign(params.size(), T(0));
  g = bind_params(cfg_, layout_, grads.data());
}

template <typename T>
void RoFormer<T>::zero_grad() {
  allocate_grads();
  zero(grads);
}

template <typename T>
const T* RoFormer<T>::embedding_output() const {
  return act_->emb_ln.data();
}
template <typename T>
const T* RoFormer<T>::hidden_state(int64_t l) const {
  Activations& a = *act_;
  const int64_t L = cfg_.num_hidden_layers;
  if (l < 0 || l > L) throw std::out_of_range("hidden_state: layer " + std::to_string(l) + " of " + std::to_string(L));
  if (a.keep != Keep::all && l != L) throw std::logic_error("hidden_state: only the last layer is kept (Keep::outputs)");
  return a.input_of(l).data();
}
template <typename T>
const T* RoFormer<T>::attention(int64_t l) const {
  if (act_->keep != Keep::all) throw std::logic_error("attention: attention maps are kept only with Keep::all");
  const auto& att = act_->layers.at(l).att;
  return att.empty() ? nullptr : att.data();
}
template <typename T>
const T* RoFormer<T>::logits() const {
  return has_mlm_head_ ? act_->logits.data() : nullptr;
}
template <typename T>
const T* RoFormer<T>::pooler_output() const {
  return act_->pooled.empty() ? nullptr : act_->pooled.data();
}
template <typename T>
int64_t RoFormer<T>::counted() const {
  return act_->counted;
}

template class RoFormer<float>;
template class RoFormer<double>;

}  // namespace model
