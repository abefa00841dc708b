// KV-cache decoding and sampling (see generate.h). Shapes: n new tokens, H hidden, E embedding,
// I intermediate, V vocabulary, P = max_position_embeddings, heads of D.
#include "generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "ops/activation.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/random.h"

namespace model {

Generator::Generator(const RoFormer<float>& m, int64_t capacity)
    : m_(m), capacity_(capacity > 0 ? capacity : m.config().max_position_embeddings) {
  const auto& c = m.config();
  if (!c.is_decoder) throw std::invalid_argument("generation needs a causal LM (is_decoder: true in config.json)");
  if (capacity_ > c.max_position_embeddings && c.position_encoding == PositionEncoding::learned) {
    throw std::invalid_argument("a context of " + std::to_string(capacity_) + " tokens exceeds the " +
                                std::to_string(c.max_position_embeddings) + " learned positions");
  }
  if (c.position_encoding == PositionEncoding::rope) {
    rope_.emplace(rope_settings(c));
    if (rope_settings(c).scaling.type == ROPE_SCALING_DYNAMIC_NTK) rope_->set_seq_len(capacity_);
  }
  k_cache_.assign(c.num_hidden_layers, std::vector<float>(capacity_ * c.hidden_size));
  if (c.attention_type != "softmax") {
    linear_shape_ = linear_attention_shape(c, 1, 1, 0);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      linear_.push_back(ops::linear_attention_state<float>(linear_shape_));
      if (c.attention_type == "performer") favor_.push_back(performer_features<float>(c, l));
    }
  }
  v_cache_ = k_cache_;
  logits_.resize(c.vocab_size);
}

const std::vector<float>& Generator::feed(const std::vector<int64_t>& ids) {
  const auto& c = m_.config();
  const auto& p = m_.p;
  const int64_t n = static_cast<int64_t>(ids.size()), E = c.embedding_size, H = c.hidden_size,
                I = c.intermediate_size, V = c.vocab_size, heads = c.num_attention_heads, D = c.head_dim();
  if (n == 0) return logits_;
  if (pos_ + n > capacity_) {
    throw std::length_error("context of " + std::to_string(pos_ + n) + " tokens exceeds the generator's capacity " +
                            std::to_string(capacity_));
  }
  auto act = [&](float* out, const float* in, int64_t count) {
    if (c.hidden_act == "gelu") ops::gelu_forward(out, in, count); else ops::relu_forward(out, in, count);
  };
  // Embeddings of the new tokens.
  std::vector<float> e(n * E), tmp(n * E), mean(n), rstd(n);  // (n, E)
  ops::embedding_forward(e.data(), ids.data(), p.word, n, V, E);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < E; ++j) e[i * E + j] += p.token_type[j];  // token type 0
  }
  if (c.position_encoding == PositionEncoding::learned) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < E; ++j) e[i * E + j] += p.position[(pos_ + i) * E + j];
    }
  } else if (c.position_encoding == PositionEncoding::sinusoidal) {
    const std::vector<float> table = sinusoidal_positions(c, pos_, n);  // (n, E)
    for (int64_t i = 0; i < n * E; ++i) e[i] += table[i];
  }
  norm_forward(c, tmp.data(), mean.data(), rstd.data(), e.data(), p.emb_ln_w, p.emb_ln_b, n, E);
  std::vector<float> x(n * H);  // (n, H)
  if (p.proj_w) ops::linear_forward(x.data(), tmp.data(), p.proj_w, p.proj_b, n, E, H); else x = tmp;

  std::vector<float> q(n * H), ctx(n * H), res(n * H), a(n * H), f1(n * I), f1a(n * I), scores(pos_ + n);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerParams<float>& w = p.layers[l];
    float* kc = k_cache_[l].data() + pos_ * H;  // (n, H) slots of the new tokens
    float* vc = v_cache_[l].data() + pos_ * H;
    ops::linear_forward(q.data(), x.data(), w.q_w, w.q_b, n, H, H);
    ops::linear_forward(kc, x.data(), w.k_w, w.k_b, n, H, H);
    ops::linear_forward(vc, x.data(), w.v_w, w.v_b, n, H, H);
    const rope_positions at = rope::offset_positions(pos_);
    if (rope_ && linear_.empty()) {
      rope_->apply_qk(ROPE_FORWARD, at, rope::bshd(q.data(), ROPE_DTYPE_F32, 1, n, heads, D),
                      rope::bshd(kc, ROPE_DTYPE_F32, 1, n, heads, D));
    }
    if (rope_ && c.rotary_value) rope_->apply(ROPE_FORWARD, ROPE_ROLE_KEY, at, rope::bshd(vc, ROPE_DTYPE_F32, 1, n, heads, D));
    // Linear attention: the recurrent form, one token at a time (RoPE on its features inside).
    for (int64_t i = 0; i < n && !linear_.empty(); ++i) {
      if (!favor_.empty()) {  // as in training: scale q, k by D^(−1/4) for FAVOR+
        const float f = static_cast<float>(std::pow(static_cast<double>(D), -0.25));
        for (int64_t j = 0; j < H; ++j) {
          q[i * H + j] *= f;
          kc[i * H + j] *= f;
        }
      }
      ops::linear_attention_step(ctx.data() + i * H, q.data() + i * H, kc + i * H, vc + i * H,
                                 favor_.empty() ? nullptr : favor_[l].data(), linear_shape_, linear_[l]);
    }
    // Softmax: causal attention of each new token over the cache up to itself.
    for (int64_t i = 0; i < n && linear_.empty(); ++i) {
      const int64_t visible = pos_ + i + 1;
      for (int64_t h = 0; h < heads; ++h) {
        const float* qh = q.data() + i * H + h * D;
        float mx = -INFINITY;
        for (int64_t j = 0; j < visible; ++j) {
          const float* kh = k_cache_[l].data() + j * H + h * D;
          float s = 0;
          for (int64_t d = 0; d < D; ++d) s += qh[d] * kh[d];
          scores[j] = s * scale;
          mx = std::max(mx, scores[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < visible; ++j) sum += scores[j] = std::exp(scores[j] - mx);
        float* out = ctx.data() + i * H + h * D;
        std::fill(out, out + D, 0.0f);
        for (int64_t j = 0; j < visible; ++j) {
          const float pj = static_cast<float>(scores[j] / sum);
          const float* vh = v_cache_[l].data() + j * H + h * D;
          for (int64_t d = 0; d < D; ++d) out[d] += pj * vh[d];
        }
      }
    }
    ops::linear_forward(res.data(), ctx.data(), w.ao_w, w.ao_b, n, H, H);
    for (int64_t i = 0; i < n * H; ++i) res[i] += x[i];
    norm_forward(c, a.data(), mean.data(), rstd.data(), res.data(), w.ln1_w, w.ln1_b, n, H);
    ops::linear_forward(f1.data(), a.data(), w.ff1_w, w.ff1_b, n, H, I);
    act(f1a.data(), f1.data(), n * I);
    ops::linear_forward(res.data(), f1a.data(), w.ff2_w, w.ff2_b, n, I, H);
    for (int64_t i = 0; i < n * H; ++i) res[i] += a[i];
    norm_forward(c, x.data(), mean.data(), rstd.data(), res.data(), w.ln2_w, w.ln2_b, n, H);
  }
  pos_ += n;

  // Head on the last token only.
  std::vector<float> t1(E), t2(E), t3(E);
  float m1, r1;
  if (c.rms_norm()) {  // RoFormer-V2: the tied matmul only
    ops::linear_forward(logits_.data(), x.data() + (n - 1) * H, p.word, static_cast<const float*>(nullptr), 1, H, V);
  } else {
    ops::linear_forward(t1.data(), x.data() + (n - 1) * H, p.head_w, p.head_b, 1, H, E);
    act(t2.data(), t1.data(), E);
    norm_forward(c, t3.data(), &m1, &r1, t2.data(), p.head_ln_w, p.head_ln_b, 1, E);
    ops::linear_forward(logits_.data(), t3.data(), p.word, p.decoder_bias, 1, E, V);
  }
  return logits_;
}

int64_t sample_token(const std::vector<float>& logits, const SampleOptions& opt, double u) {
  if (!(opt.temperature >= 0)) throw std::invalid_argument("temperature must be >= 0");
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  order.erase(std::remove_if(order.begin(), order.end(),
                             [&](int64_t id) { return std::find(opt.banned.begin(), opt.banned.end(), id) != opt.banned.end(); }),
              order.end());
  if (order.empty()) throw std::invalid_argument("every token is banned");
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (opt.temperature == 0) return order[0];
  if (opt.top_k > 0 && opt.top_k < static_cast<int64_t>(order.size())) order.resize(opt.top_k);
  std::vector<double> w(order.size());
  double sum = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    w[i] = std::exp((logits[order[i]] - logits[order[0]]) / opt.temperature);
    sum += w[i];
  }
  double acc = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    acc += w[i] / sum;
    if (u < acc) return order[i];
  }
  return order.back();
}

std::vector<int64_t> generate(const RoFormer<float>& m, const std::vector<int64_t>& prompt, const SampleOptions& opt,
                              int64_t capacity) {
  if (prompt.empty()) throw std::invalid_argument("generation needs a prompt of at least one token");
  Generator g(m, capacity);
  const int64_t room = capacity > 0 ? capacity : m.config().max_position_embeddings;
  std::vector<int64_t> context(prompt.end() - std::min<int64_t>(prompt.size(), room), prompt.end());
  std::vector<int64_t> out;
  const std::vector<float>* logits = &g.feed(context);
  for (int64_t i = 0; i < opt.max_new_tokens && g.position() < room; ++i) {
    const int64_t next = sample_token(*logits, opt, ops::uniform01(opt.seed, static_cast<uint64_t>(i)));
    out.push_back(next);
    if (g.position() + 1 > room) break;
    logits = &g.feed({next});
  }
  return out;
}

}  // namespace model
