// The RoFormer blocks (see blocks.h): each forward/backward pair, with the shapes of every tensor.
#include "blocks.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "base/threads.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/norm.h"
#include "ops/position.h"
#include "ops/vmath.h"
#include "base/random.h"

namespace model {

namespace {

template <typename T>
void accumulate(T* out, const T* a, int64_t n) {  // out += a
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] += a[i];
}

template <typename T>
void zero(T* x, int64_t n) {
  std::fill(x, x + n, T(0));
}

// out (N, OC) = x (N, IC)·Wᵀ + b: through the layer's packed weights when the model is packed for
// inference (RoFormer::pack), in bf16 products when it trains in bf16 (p.w16), else on the arena
// (ops/linear.h). A packed layer's fused activation, if any, is applied too: callers check
// fuses_activation.
template <typename T>
void linear(T* out, const T* x, const LinearParams<T>& p, int64_t N, int64_t IC, int64_t OC) {
  if constexpr (std::is_same_v<T, float>) {
    if (p.packed) return p.packed->forward(out, x, N);
    if (p.w16) return ops::linear_forward_bf16(out, x, p.w16, p.b, N, IC, OC);
  }
  ops::linear_forward(out, x, p.w, p.b, N, IC, OC);
}

// Where p reads bf16 (bf16 training, or packed in bf16): x (n) rounded to bf16 into x16, once for every
// dense that reads x and for their backward (the same bits each of them would round to); null, x16
// emptied, otherwise.
template <typename T>
const uint16_t* bf16_input(std::vector<uint16_t>& x16, const T* x, const LinearParams<T>& p, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (uint16_t* out = bf16_input_buffer(x16, p, n)) {
      ops::round_to_bf16(out, x, n);
      return out;
    }
  }
  x16.clear();
  return nullptr;
}

// v emptied and its memory returned: for the buffers of the other precision when a model switches
// between bf16 training and fp32 evaluation, which would otherwise both stay allocated.
template <typename V>
void release(std::vector<V>& v) {
  std::vector<V>().swap(v);
}

const uint16_t* kept(const std::vector<uint16_t>& x16) { return x16.empty() ? nullptr : x16.data(); }

// linear() on x, or on its bf16 rounding x16 when one was made (bf16_input, Bf16Handoff).
template <typename T>
void linear(T* out, const T* x, const uint16_t* x16, const LinearParams<T>& p, int64_t N, int64_t IC, int64_t OC) {
  if constexpr (std::is_same_v<T, float>) {
    if (x16 && p.packed) return p.packed->forward(out, x16, N);
    if (x16) return ops::linear_forward_bf16(out, x16, p.w16, p.b, N, IC, OC);
  }
  linear(out, x, p, N, IC, OC);
}

// dx (N, IC) += dout (N, OC)·W (= with dx_mode overwrite; dx may be null); g.w += doutᵀ·x;
// g.b += Σ dout: the backward of linear(), in the forward's precision.
template <typename T>
void linear_back(T* dx, const LinearParams<T>& g, const T* dout, const T* x, const LinearParams<T>& p, int64_t N,
                 int64_t IC, int64_t OC, ops::Grad dx_mode = ops::Grad::accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    if (p.w16) return ops::linear_backward_bf16(dx, g.w, g.b, dout, x, p.w16, N, IC, OC, dx_mode);
  }
  ops::linear_backward(dx, g.w, g.b, dout, x, p.w, N, IC, OC, dx_mode);
}

// linear_back() on x, or on its kept bf16 rounding x16.
template <typename T>
void linear_back(T* dx, const LinearParams<T>& g, const T* dout, const T* x, const uint16_t* x16,
                 const LinearParams<T>& p, int64_t N, int64_t IC, int64_t OC,
                 ops::Grad dx_mode = ops::Grad::accumulate) {
  if constexpr (std::is_same_v<T, float>) {
    if (x16) return ops::linear_backward_bf16(dx, g.w, g.b, dout, x16, p.w16, N, IC, OC, dx_mode);
  }
  linear_back(dx, g, dout, x, p, N, IC, OC, dx_mode);
}

template <typename T>
bool fuses_activation(const LinearParams<T>& p) {
  return p.packed && p.packed->epilogue() != ops::Epilogue::none;
}

// out (N, C) = dropout(out), in place: the sub-layer's output before its residual add.
template <typename T>
void dropout_output(T* out, int64_t N, int64_t C, const Dropout& d, int64_t site) {
  if (d.hidden > 0) ops::dropout_forward(out, out, N * C, d.hidden, d.site_seed(site), d.first(C));
}

// Rows per pass of a row-wise sub-layer: `chunk` (an Acts' chunk_rows, set for inference) or, with
// none or with dropout (whose masks are keyed by the whole batch's rows), all N at once.
int64_t rows_per_pass(int64_t chunk, int64_t N, const Dropout& d) {
  return chunk > 0 && d.hidden == 0 ? std::min(chunk, N) : N;
}

// dx (N, C) = dropout'(dy): the backward of a dropout site (dx and dy may alias). Written, not
// accumulated, it is the forward's mask and scale applied to dy: dropout_forward, element-wise.
template <typename T>
void dropout_back(T* dx, const T* dy, int64_t count, const Dropout& d, int64_t site, uint64_t first) {
  if (d.hidden > 0) {
    ops::dropout_forward(dx, dy, count, d.hidden, d.site_seed(site), first);
  } else if (dx != dy) {
    std::copy(dy, dy + count, dx);
  }
}

template <typename T>
constexpr rope_dtype rope_dtype_of() {
  return std::is_same_v<T, float> ? ROPE_DTYPE_F32 : ROPE_DTYPE_F64;
}

// x (B, S, n, D) rotated by librope at positions start .. start + S − 1 (float64 for the gradient
// checks: the same rotation, attention factor included, in double).
template <typename T>
void rotate(const rope::Plan& plan, rope_direction dir, rope_role role, T* x, int64_t B, int64_t S, int64_t n,
            int64_t D, int64_t start) {
  plan.apply(dir, role, rope::offset_positions(start), rope::bshd(x, rope_dtype_of<T>(), B, S, n, D));
}

// q and k (B, S, n, D) rotated as rotate's query and key roles do it, in one librope call (one
// parallel region instead of two).
template <typename T>
void rotate_qk(const rope::Plan& plan, rope_direction dir, T* q, T* k, int64_t B, int64_t S, int64_t n, int64_t D,
               int64_t start) {
  plan.apply_qk(dir, rope::offset_positions(start), rope::bshd(q, rope_dtype_of<T>(), B, S, n, D),
                rope::bshd(k, rope_dtype_of<T>(), B, S, n, D));
}

// Rows [0, len) of a (len, 3H) packed product's q and k parts (columns [0, H) and [H, 2H)), rotated
// at positions at .. at + len − 1 and written to q_out and k_out (len, H): a copy and a rotation in
// one librope pass (out of place, strided input).
void rotate_qk_from_packed(const rope::Plan& plan, const float* qkv, float* q_out, float* k_out, int64_t len,
                           int64_t n, int64_t D, int64_t at) {
  const int64_t H = n * D;
  auto view = [&](const float* data, int64_t row_stride) {
    return rope_tensor{const_cast<float*>(data), ROPE_DTYPE_F32, 1, len, n, len * row_stride, row_stride, D};
  };
  const rope_tensor q = view(qkv, 3 * H), k = view(qkv + H, 3 * H), qo = view(q_out, H), ko = view(k_out, H);
  plan.apply_qk(ROPE_FORWARD, rope::offset_positions(at), q, k, &qo, &ko);
}

}  // namespace

uint64_t Dropout::site_seed(int64_t site) const { return base::mix64(seed ^ base::mix64(0x5eed0000ull + site)); }

Dropout Dropout::training(const RoFormerConfig& c, uint64_t seed, int64_t row0, int64_t tokens) {
  return {c.hidden_dropout_prob, c.attention_probs_dropout_prob, seed, row0, tokens};
}

template <typename T>
uint16_t* bf16_input_buffer(std::vector<uint16_t>& x16, const LinearParams<T>& p, int64_t n) {
  if (!p.reads_bf16()) return nullptr;
  grow_to(x16, n);
  return x16.data();
}

// ---- norm and activation ----

// sum (N, C) += x, then out = norm(sum): a post-LN sub-layer's residual add and norm in one pass; out16
// (N, C), when given, takes out rounded to bf16 in that pass.
template <typename T>
void residual_norm_forward(const RoFormerConfig& c, T* out, NormActs<T>& a, T* sum, const T* x,
                           const NormParams<T>& p, int64_t N, int64_t C, uint16_t* out16) {
  grow_to(a.rstd, N);
  if (c.rms_norm()) {
    ops::residual_rmsnorm_forward(out, a.rstd.data(), sum, x, static_cast<const T*>(nullptr), N, C, c.layer_norm_eps,
                                  out16);
  } else {
    grow_to(a.mean, N);
    ops::residual_layernorm_forward(out, a.mean.data(), a.rstd.data(), sum, x, p.w, p.b, N, C, c.layer_norm_eps,
                                    out16);
  }
}

template <typename T>
void norm_forward(const RoFormerConfig& c, T* out, NormActs<T>& a, const T* in, const NormParams<T>& p, int64_t N,
                  int64_t C, uint16_t* out16) {
  grow_to(a.rstd, N);
  if (c.rms_norm()) {
    ops::rmsnorm_forward(out, a.rstd.data(), in, static_cast<const T*>(nullptr), N, C, c.layer_norm_eps, out16);
  } else {
    grow_to(a.mean, N);
    ops::layernorm_forward(out, a.mean.data(), a.rstd.data(), in, p.w, p.b, N, C, c.layer_norm_eps, out16);
  }
}

template <typename T>
void norm_backward(const RoFormerConfig& c, T* din, const NormParams<T>& g, const T* dout, const T* in,
                   const NormParams<T>& p, const NormActs<T>& a, int64_t N, int64_t C) {
  zero(din, N * C);
  if (c.rms_norm()) {
    ops::rmsnorm_backward(din, static_cast<T*>(nullptr), dout, in, static_cast<const T*>(nullptr), a.rstd.data(), N, C);
  } else {
    ops::layernorm_backward(din, g.w, g.b, dout, in, p.w, a.mean.data(), a.rstd.data(), N, C);
  }
}

template <typename T>
void activation_forward(const RoFormerConfig& c, T* out, const T* in, int64_t n) {
  if (c.hidden_act == Activation::gelu) {
    ops::gelu_forward(out, in, n);
  } else {
    ops::relu_forward(out, in, n);
  }
}

template <typename T>
void activation_backward(const RoFormerConfig& c, T* din, const T* in, const T* dout, int64_t n) {
  if (c.hidden_act == Activation::gelu) {
    ops::gelu_backward(din, in, dout, n, ops::Grad::overwrite);
  } else {
    ops::relu_backward(din, in, dout, n, ops::Grad::overwrite);
  }
}

// ---- embeddings ----

std::vector<float> sinusoidal_positions(const RoFormerConfig& c, int64_t start, int64_t count) {
  const int64_t E = c.embedding_size;
  std::vector<float> table((start + count) * E);  // from librope's exact cos/sin
  ops::sinusoidal_table(table.data(), start + count, E);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(E)));
  std::vector<float> out(count * E);
  for (int64_t i = 0; i < count * E; ++i) out[i] = table[start * E + i] * scale;
  return out;
}

template <typename T>
void embeddings_forward(const RoFormerConfig& c, T* out, EmbeddingActs<T>& a, const EmbeddingParams<T>& p,
                        const int64_t* ids, const int64_t* types, int64_t B, int64_t T_, int64_t start,
                        const Dropout& d, uint16_t* out16) {
  const int64_t N = B * T_, E = c.embedding_size, H = c.hidden_size;
  a.ids.assign(ids, ids + N);
  a.types.assign(N, 0);
  if (types) a.types.assign(types, types + N);
  a.positions.resize(N);
  for (int64_t i = 0; i < N; ++i) a.positions[i] = start + i % T_;
  const std::vector<float> table = c.position_encoding == PositionEncoding::sinusoidal
                                       ? sinusoidal_positions(c, start, T_)  // (T, E)
                                       : std::vector<float>{};
  // Rows [r0, r0 + n) at a time: all N (the backward reads sum, normed, dropped) or, in inference,
  // chunk_rows, whose dropout-free output is the norm's.
  const int64_t step = rows_per_pass(a.chunk_rows, N, d);
  grow_to(a.sum, step * E);
  grow_to(a.normed, step * E);
  std::vector<T> tmp(step * E);  // (n, E)
  for (int64_t r0 = 0; r0 < N; r0 += step) {
    const int64_t n = std::min(step, N - r0);
    ops::embedding_forward(a.sum.data(), a.ids.data() + r0, p.word, n, c.vocab_size, E);
    ops::embedding_forward(tmp.data(), a.types.data() + r0, p.token_type, n, c.type_vocab_size, E);
    accumulate(a.sum.data(), tmp.data(), n * E);
    if (c.position_encoding == PositionEncoding::learned) {
      ops::embedding_forward(tmp.data(), a.positions.data() + r0, p.position, n, c.max_position_embeddings, E);
      accumulate(a.sum.data(), tmp.data(), n * E);
    } else if (!table.empty()) {
      for (int64_t i = 0; i < n * E; ++i) a.sum[i] += static_cast<T>(table[(r0 * E + i) % (T_ * E)]);
    }
    const bool norm_is_out = !p.project.w && d.hidden == 0;  // out's rows are the norm's
    uint16_t* rows16 = out16 ? out16 + r0 * H : nullptr;
    norm_forward(c, a.normed.data(), a.norm, a.sum.data(), p.norm, n, E, norm_is_out ? rows16 : nullptr);
    const T* normed = a.normed.data();
    if (step == N) {  // the backward's copy, dropped in place
      grow_to(a.dropped, N * E);
      std::copy_n(a.normed.data(), N * E, a.dropped.data());
      if (d.hidden > 0) {
        ops::dropout_forward(a.dropped.data(), a.dropped.data(), N * E, d.hidden, d.site_seed(0), d.first(E));
      }
      normed = a.dropped.data();
    }
    if (p.project.w) {
      linear(out + r0 * H, normed, p.project, n, E, H);  // (n, H)
    } else {
      std::copy_n(normed, n * E, out + r0 * H);
    }
    if constexpr (std::is_same_v<T, float>) {
      if (rows16 && !norm_is_out) ops::round_to_bf16(rows16, out + r0 * H, n * H);  // dropout or the projection's
    }
  }
}

template <typename T>
void embeddings_backward(const RoFormerConfig& c, const EmbeddingParams<T>& g, const T* dout, const EmbeddingActs<T>& a,
                         const EmbeddingParams<T>& p, const Dropout& d, Scratch<T>& s) {
  const int64_t N = static_cast<int64_t>(a.ids.size()), E = c.embedding_size, H = c.hidden_size;
  T* d_dropped = s.get(ScratchBuffer::embeddings_dropped, N * E);  // (N, E)
  if (p.project.w) {
    linear_back(d_dropped, g.project, dout, a.dropped.data(), p.project, N, E, H, ops::Grad::overwrite);
  } else {
    std::copy(dout, dout + N * E, d_dropped);
  }
  dropout_back(d_dropped, d_dropped, N * E, d, 0, d.first(E));
  T* d_sum = s.get(ScratchBuffer::embeddings_sum, N * E);
  norm_backward(c, d_sum, g.norm, d_dropped, a.sum.data(), p.norm, a.norm, N, E);
  ops::embedding_backward(g.token_type, d_sum, a.types.data(), N, E);
  if (p.position) ops::embedding_backward(g.position, d_sum, a.positions.data(), N, E);
  for (int64_t i = 0; i < N; ++i) {  // nn.Embedding(padding_idx): no gradient into the padding row
    if (a.ids[i] == c.pad_token_id) zero(d_sum + i * E, E);
  }
  ops::embedding_backward(g.word, d_sum, a.ids.data(), N, E);
}

// ---- attention ----

rope_config rope_settings(const RoFormerConfig& c) {
  rope_config rc = rope::default_config(static_cast<int32_t>(c.head_dim()));
  rc.base = c.rope_theta;
  rc.layout = c.rope_half_layout ? ROPE_LAYOUT_HALF : ROPE_LAYOUT_INTERLEAVED;
  rope::apply_scaling_spec(c.rope_scaling, &rc);
  return rc;
}

ops::LinearAttentionShape linear_attention_shape(const RoFormerConfig& c, int64_t B, int64_t T, int64_t start) {
  ops::LinearAttentionShape s{B, T, c.num_attention_heads, c.head_dim(), c.head_dim(), c.is_decoder};
  s.feature_map = c.attention_type == AttentionType::performer ? ops::FeatureMap::favor : ops::FeatureMap::elu_plus_one;
  s.favor_features = c.attention_type == AttentionType::performer ? c.performer_features : 0;
  s.rope = c.position_encoding == PositionEncoding::rope;
  s.rope_cfg = rope_settings(c);  // linear attention sets head_dim = F itself
  s.start = start;
  return s;
}

template <typename T>
std::vector<T> performer_features(const RoFormerConfig& c, int64_t layer) {
  std::vector<T> w(c.performer_features * c.head_dim());
  ops::favor_projection(w.data(), c.performer_features, c.head_dim(), base::mix64(0xfa70ull + layer));
  return w;
}

namespace {

// FAVOR+ estimates exp(q·k): q and k are scaled by D^(−1/4) to approximate softmax(q·kᵀ/√D).
template <typename T>
void favor_scale(T* x, int64_t n, int64_t D) {
  const T f = static_cast<T>(std::pow(static_cast<double>(D), -0.25));
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

template <typename T>
ops::AttentionShape softmax_shape(const AttentionContext<T>& ctx, int64_t B, int64_t T_, int64_t Tk, int64_t start,
                                  int64_t stride) {
  const RoFormerConfig& c = *ctx.config;
  ops::AttentionShape s{B, T_, c.num_attention_heads, c.head_dim(), ctx.causal};
  s.row_limit = ctx.row_limit;
  s.Tk = Tk;
  s.kv_stride = stride;
  s.q_start = start;
  s.dropout_p = ctx.dropout.attention;
  s.dropout_seed = ctx.dropout.attention > 0 ? ctx.dropout.site_seed(1 + 3 * ctx.layer) : 0;
  s.dropout_row0 = ctx.dropout.row0;
  s.bf16_products = ctx.bf16_products;
  s.saved = ctx.saved;
  return s;
}

// Where the output dense reads bf16: a.ctx16 (N, H), which the attention writes with its context
// (attend's ctx16); else null, a.ctx16 emptied.
template <typename T>
uint16_t* context16(AttentionActs<T>& a, const AttentionParams<T>& p, int64_t n) {
  uint16_t* ctx16 = bf16_input_buffer(a.ctx16, p.out, n);
  if (!ctx16) a.ctx16.clear();  // not an earlier bf16 forward's for this one's backward
  return ctx16;
}

// ctx16 (n), when given: the context (n) rounded to bf16 in a pass of its own, where the kernel that
// wrote the context did not (decoding, ragged rows, linear attention).
template <typename T>
void round_context(uint16_t* ctx16, const T* context, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (ctx16) ops::round_to_bf16(ctx16, context, n);
  }
}

// out (N, H) = norm(x + dropout(ctx · Woᵀ + bo)): the attention output sub-layer, on ctx (N, H) (a.ctx,
// or in inference the q buffer attention wrote over) or, where the output dense reads bf16, its bf16
// rounding ctx16 (N, H), chunk_rows rows at a time in inference; out16 (N, H), when given, takes out
// rounded to bf16 in the norm's pass.
template <typename T>
void attention_output(T* out, AttentionActs<T>& a, const AttentionParams<T>& p, const AttentionContext<T>& ctx,
                      const T* context, const uint16_t* ctx16, const T* x, int64_t B, int64_t T_, uint16_t* out16) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = B * T_, H = c.hidden_size;
  const int64_t step = rows_per_pass(a.chunk_rows, N, ctx.dropout);
  grow_to(a.sum, step * H);
  for (int64_t r0 = 0; r0 < N; r0 += step) {
    const int64_t n = std::min(step, N - r0);
    linear(a.sum.data(), context + r0 * H, ctx16 ? ctx16 + r0 * H : nullptr, p.out, n, H, H);
    dropout_output(a.sum.data(), n, H, ctx.dropout, 2 + 3 * ctx.layer);
    residual_norm_forward(c, out + r0 * H, a.norm, a.sum.data(), x + r0 * H, p.norm, n, H,
                          out16 ? out16 + r0 * H : nullptr);
  }
}

// d_ctx (N, H) written, dx (N, H) = the residual branch's gradient, from dout (N, H).
template <typename T>
void attention_output_backward(T* d_ctx, T* dx, const AttentionParams<T>& g, const T* dout, const AttentionActs<T>& a,
                               const AttentionParams<T>& p, const AttentionContext<T>& ctx, int64_t B, int64_t T_,
                               Scratch<T>& s) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = B * T_, H = c.hidden_size;
  norm_backward(c, dx, g.norm, dout, a.sum.data(), p.norm, a.norm, N, H);
  T* d_sum = s.get(ScratchBuffer::attention_output_sum, N * H);
  dropout_back(d_sum, dx, N * H, ctx.dropout, 2 + 3 * ctx.layer, ctx.dropout.first(H));
  linear_back(d_ctx, g.out, d_sum, a.ctx.data(), kept(a.ctx16), p.out, N, H, H, ops::Grad::overwrite);
}

// Softmax or linear attention of rotated q, k, v; keys (B, stride, H) with Tk valid. Returns the
// context (N, H): a.ctx, or in inference (chunk_rows set, nothing saved) a.q, written over; ctx16
// (N, H), when given, takes it in bf16 too (context16).
template <typename T>
const T* attend(AttentionActs<T>& a, const AttentionContext<T>& ctx, const T* k, const T* v, int64_t B, int64_t T_,
                int64_t Tk, int64_t start, int64_t stride, KVCache<T>* cache, uint16_t* ctx16) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = B * T_, H = c.hidden_size, D = c.head_dim();
  if (c.attention_type == AttentionType::softmax) {
    const ops::AttentionShape s = softmax_shape(ctx, B, T_, Tk, start, stride);
    T* saved = nullptr;
    if (s.saved != ops::AttentionSaved::none) {
      grow_to(a.att, ops::attention_saved_size(s));
      saved = a.att.data();
    }
    T* out = a.q.data();
    if (a.chunk_rows == 0 || saved) {
      grow_to(a.ctx, N * H);
      out = a.ctx.data();
    }
    ops::attention_forward(out, saved, a.q.data(), k, v, ctx.key_mask, s, ctx16);
    return out;
  }
  grow_to(a.ctx, N * H);
  if (ctx.key_mask && std::find(ctx.key_mask, ctx.key_mask + B * Tk, 0) != ctx.key_mask + B * Tk) {
    throw std::invalid_argument("linear attention does not support padding masks");
  }
  if (ctx.favor) favor_scale(a.q.data(), N * H, D);  // keys are scaled where they are written
  if (cache) {  // the recurrent form, one token at a time; B = 1 row of tokens per step
    ops::LinearAttentionShape ls = linear_attention_shape(c, B, 1, start);
    ls.rope_seq_len = cache->capacity;  // dynamic NTK: the generation's length, fixed while decoding
    for (int64_t t = 0; t < T_; ++t) {
      ops::linear_attention_step(a.ctx.data() + t * H, a.q.data() + t * H, k + (start + t) * H, v + (start + t) * H,
                                 ctx.favor, ls, cache->linear);
    }
    round_context(ctx16, a.ctx.data(), N * H);
    return a.ctx.data();
  }
  const ops::LinearAttentionShape ls = linear_attention_shape(c, B, T_, start);
  grow_to(a.saved, ops::linear_attention_saved_size(ls));
  ops::linear_attention_forward(a.ctx.data(), a.saved.data(), a.q.data(), k, v, ctx.favor, ls);
  round_context(ctx16, a.ctx.data(), N * H);
  return a.ctx.data();
}

// A bf16 cache (KVCache::bf16) is head-major, (cache row, head, position, D): where position t of
// head h of cache row r starts.
int64_t bf16_cache_at(const KVCache<float>& cache, int64_t r, int64_t h, int64_t t, int64_t heads, int64_t D) {
  return ((r * heads + h) * cache.capacity + t) * D;
}

// Rows i of k, v (N, heads·D) into the bf16 cache, rounded: row i at position position_of(i) of cache
// row row_of(i).
template <class RowOf, class PositionOf>
void store_bf16(KVCache<float>& cache, const float* k, const float* v, int64_t N, int64_t heads, int64_t D,
                const RowOf& row_of, const PositionOf& position_of) {
  const int64_t H = heads * D;
#pragma omp parallel for schedule(static) if (N * H >= base::kParallelMinElements)
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t to = bf16_cache_at(cache, row_of(i), h, position_of(i), heads, D);
      ops::bf16_from_f32(cache.k16.data() + to, k + i * H + h * D, D);
      ops::bf16_from_f32(cache.v16.data() + to, v + i * H + h * D, D);
    }
  }
}

// k, v (keys, heads·D) = positions [0, keys) of the bf16 cache's row r, widened: what attention_forward reads.
void widen_bf16(float* k, float* v, const KVCache<float>& cache, int64_t r, int64_t keys, int64_t heads, int64_t D) {
  const int64_t H = heads * D;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < keys; ++t) {
      const int64_t from = bf16_cache_at(cache, r, h, t, heads, D);
      ops::f32_from_bf16(k + t * H + h * D, cache.k16.data() + from, D);
      ops::f32_from_bf16(v + t * H + h * D, cache.v16.data() + from, D);
    }
  }
}

// Where a self-attention call's tokens are, and where their keys and values go. B rows of T_ tokens,
// rotated from position `start` (without a cache, or cache row b for batch row b at its length); with
// KVCache::rows, batch row b at cache row rows[b] and a position of its own (step-level batching); with
// KVCache::starts as well, the call is one row of T_ tokens that holds `rows` rows of their own counts,
// one after another. Made (and checked against the cache) by call_rows.
template <typename T>
struct CallRows {
  const KVCache<T>* cache = nullptr;
  int64_t B = 0, T_ = 0, start = 0;
  int64_t stride = 0;     // positions a row of k and v holds: the cache's capacity, or T_
  int64_t rows = 0;       // the call's rows: B, or the counted rows
  bool ragged = false;    // KVCache::rows
  bool counted = false;   // KVCache::starts
  bool staged = false;    // a bf16 cache: new keys and values made in the block's buffers, then rounded into it

  int64_t cache_row(int64_t b) const { return ragged ? cache->rows[b] : b; }
  // The position of row b's first new token in its cache row (0 without a cache).
  int64_t first_of(int64_t b) const { return ragged ? cache->positions[cache->rows[b]] : cache ? start : 0; }
  // Where row b's tokens start in the call, how many it has, and the row of the call's token i.
  int64_t offset(int64_t b) const { return counted ? cache->starts[b] : b * T_; }
  int64_t count(int64_t b) const { return offset(b + 1) - offset(b); }
  int64_t row_of(int64_t i) const {
    return counted ? std::upper_bound(cache->starts, cache->starts + rows + 1, i) - cache->starts - 1 : i / T_;
  }
  // Token i's position in its cache row, and the row of k and v that its key and value go to: in the
  // cache, or (staged, or no cache) row i.
  int64_t position(int64_t i) const {
    const int64_t b = row_of(i);
    return first_of(b) + i - offset(b);
  }
  int64_t kv_row(int64_t i) const { return staged ? i : cache_row(row_of(i)) * stride + position(i); }
  // The position RoPE rotates row b's first new token at.
  int64_t rope_at(int64_t b) const { return ragged ? first_of(b) : start; }
};

template <typename T>
CallRows<T> call_rows(const KVCache<T>* cache, bool softmax, int64_t B, int64_t T_, int64_t start) {
  CallRows<T> r{cache, B, T_, start, T_, B};
  if (!cache) return r;
  r.stride = cache->capacity;
  r.ragged = cache->rows != nullptr;
  r.counted = r.ragged && cache->starts;
  r.staged = cache->bf16;
  if (r.staged && (!softmax || !std::is_same_v<T, float>)) throw std::logic_error("a bf16 key/value cache is for fp32 softmax attention");
  if (r.counted) {
    r.rows = cache->count_rows;
    if (B != 1 || cache->starts[r.rows] != T_) throw std::logic_error("a call of counted rows is one row of all their tokens");
  }
  if (r.ragged) {
    if (!softmax) throw std::invalid_argument("linear attention decodes one row at a time");
    for (int64_t b = 0; b < r.rows; ++b) {
      if (cache->rows[b] < 0 || cache->rows[b] >= cache->B || r.count(b) < 1 ||
          r.first_of(b) + r.count(b) > cache->capacity) {
        throw std::length_error("the key/value cache's row " + std::to_string(cache->rows[b]) + " cannot take " +
                                std::to_string(r.count(b)) + " more tokens");
      }
    }
  } else if (cache->B != B || start != cache->length || start + T_ > cache->capacity) {
    throw std::length_error("the key/value cache holds " + std::to_string(cache->length) + " of " +
                            std::to_string(cache->capacity) + " tokens; cannot append " + std::to_string(T_));
  }
  return r;
}

// The call's queries into a.q (N, H) and its new keys and values into rows r.kv_row(i) of k and v, from
// x (N, H): the products, RoPE at each row's positions, FAVOR+'s scaling of the keys and, for a bf16
// cache, the rounded copy in it.
template <typename T>
void project_qkv(AttentionActs<T>& a, const AttentionParams<T>& p, const AttentionContext<T>& ctx, const T* x,
                 const CallRows<T>& r, KVCache<T>* cache, T* k, T* v, const Bf16Handoff& bf16) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = r.B * r.T_, H = c.hidden_size, n = c.num_attention_heads, D = c.head_dim();
  const bool softmax = c.attention_type == AttentionType::softmax;
  // With RoPE on softmax attention's q and k, the packed product's q and k leave it rotated: librope
  // reads them from the product's buffer and writes them in place of the copy (one pass, not two).
  const bool rotated_in_split = std::is_same_v<T, float> && p.qkv && ctx.rope && softmax;
  if constexpr (std::is_same_v<T, float>) {
    if (p.qkv) {  // one packed (n, 3H) product per pass of rows, split into q, k and v
      const int64_t step = rows_per_pass(a.chunk_rows, N, ctx.dropout);
      grow_to(a.qkv, step * 3 * H);
      for (int64_t r0 = 0; r0 < N; r0 += step) {
        const int64_t rows = std::min(step, N - r0);
        if (bf16.x16_written) {  // x in bf16 as its producer wrote it
          p.qkv->forward(a.qkv.data(), a.x16.data() + r0 * H, rows);
        } else {
          p.qkv->forward(a.qkv.data(), x + r0 * H, rows);
        }
        // A pass may start or end inside a batch row: one librope call per batch row's part of it.
        for (int64_t i = r0, end = 0; rotated_in_split && i < r0 + rows; i = end) {
          const int64_t b = r.row_of(i);
          end = std::min(r0 + rows, r.offset(b) + r.count(b));
          rotate_qk_from_packed(*ctx.rope, a.qkv.data() + (i - r0) * 3 * H, a.q.data() + i * H, k + r.kv_row(i) * H,
                                end - i, n, D, r.rope_at(b) + i - r.offset(b));
        }
#pragma omp parallel for schedule(static) if (rows * H >= base::kParallelMinElements)
        for (int64_t i = r0; i < r0 + rows; ++i) {
          const T* row = a.qkv.data() + (i - r0) * 3 * H;
          if (!rotated_in_split) {
            std::copy_n(row, H, a.q.data() + i * H);
            std::copy_n(row + H, H, k + r.kv_row(i) * H);
          }
          std::copy_n(row + 2 * H, H, v + r.kv_row(i) * H);
        }
      }
    }
  }
  if (!p.qkv) {
    // q, k and v read it (no w16 when decoding): as the block that wrote x rounded it, or rounded here
    const uint16_t* x16 = bf16.x16_written ? a.x16.data() : bf16_input(a.x16, x, p.q, N * H);
    linear(a.q.data(), x, x16, p.q, N, H, H);
    if (cache) {
      std::vector<T> tmp(N * H);
      for (auto [dst, w] : {std::pair{k, p.k}, std::pair{v, p.v}}) {
        linear(tmp.data(), x, w, N, H, H);
        for (int64_t b = 0; b < r.rows; ++b) {
          std::copy_n(tmp.data() + r.offset(b) * H, r.count(b) * H, dst + r.kv_row(r.offset(b)) * H);
        }
      }
    } else {
      linear(k, x, x16, p.k, N, H, H);
      linear(v, x, x16, p.v, N, H, H);
    }
  }
  // RoPE on the new rows only (cached keys stay rotated at their own positions). A cache's batch rows
  // are strided by its capacity, so they are rotated one by one.
  const int64_t together = cache ? 1 : r.B;
  for (int64_t b = 0; b < r.rows && ctx.rope; b += together) {
    const int64_t at = r.rope_at(b);
    T *qb = a.q.data() + r.offset(b) * H, *kb = k + r.kv_row(r.offset(b)) * H, *vb = v + r.kv_row(r.offset(b)) * H;
    if (softmax && !rotated_in_split) rotate_qk(*ctx.rope, ROPE_FORWARD, qb, kb, together, r.count(b), n, D, at);
    if (c.rotary_value) rotate(*ctx.rope, ROPE_FORWARD, ROPE_ROLE_KEY, vb, together, r.count(b), n, D, at);
  }
  if (ctx.favor) {  // FAVOR+ scales the new keys (queries are scaled in attend)
    for (int64_t b = 0; b < r.B; b += together) favor_scale(k + r.kv_row(b * r.T_) * H, together * r.T_ * H, D);
  }
  if constexpr (std::is_same_v<T, float>) {  // the new rows into the bf16 cache, rounded once; every read sees them so
    if (r.staged) {
      store_bf16(*cache, k, v, N, n, D, [&](int64_t i) { return r.cache_row(r.row_of(i)); },
                 [&](int64_t i) { return r.position(i); });
    }
  }
}

// The context (N, H) of the call's queries (a.q) over their keys and values, k and v as project_qkv left
// them; the cache's length advanced past an equal-length call. Returns a.ctx, or what attend returns.
template <typename T>
const T* attend_rows(AttentionActs<T>& a, const AttentionContext<T>& ctx, const CallRows<T>& r, KVCache<T>* cache,
                     const T* k, const T* v, uint16_t* ctx16) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = r.B * r.T_, H = c.hidden_size, n = c.num_attention_heads, D = c.head_dim();
  const bool softmax = c.attention_type == AttentionType::softmax;
  // A bf16 cache's positions [0, keys) of cache row cr, widened into rows [at, at + keys) of a.k, a.v.
  auto widen = [&](int64_t cr, int64_t keys, int64_t at) {
    grow_to(a.k, (at + keys) * H), grow_to(a.v, (at + keys) * H);
    if constexpr (std::is_same_v<T, float>) widen_bf16(a.k.data() + at * H, a.v.data() + at * H, *cache, cr, keys, n, D);
  };
  // One decoding step (a token per row over a cache, no masks, inference): every row and head in one
  // pass, the rows at positions of their own or not, so that beams and a server's slots decode alike.
  const bool decode_step = cache && softmax && r.T_ == 1 && !r.counted && !ctx.key_mask && !ctx.row_limit &&
                           ctx.saved == ops::AttentionSaved::none && !ctx.bf16_products && ctx.dropout.attention == 0;
  if (decode_step) {
    grow_to(a.ctx, N * H);
    std::vector<int64_t> keys(r.B), rows(r.B);
    for (int64_t b = 0; b < r.B; ++b) keys[b] = r.first_of(b) + 1, rows[b] = r.cache_row(b);
    ops::DecodeAttentionShape s{r.B, n, D, keys.data(), rows.data(), r.stride};
    if constexpr (std::is_same_v<T, float>) {
      s.heads_major = r.staged;
      if (r.staged) ops::attention_decode_forward(a.ctx.data(), a.q.data(), cache->k16.data(), cache->v16.data(), s);
    }
    if (!r.staged) ops::attention_decode_forward<T>(a.ctx.data(), a.q.data(), k, v, s);
    if (!r.ragged) cache->length = r.start + r.T_;
    round_context(ctx16, a.ctx.data(), N * H);
    return a.ctx.data();
  }
  if (r.ragged) {  // row by row: each attends over its own cache row's first_of(b) + count(b) keys
    grow_to(a.ctx, N * H);
    for (int64_t b = 0; b < r.rows; ++b) {
      const int64_t keys = r.first_of(b) + r.count(b);
      const ops::AttentionShape s = softmax_shape(ctx, 1, r.count(b), keys, r.first_of(b), r.staged ? keys : r.stride);
      if (s.saved != ops::AttentionSaved::none || ctx.key_mask || ctx.row_limit) {
        throw std::logic_error("step-level batching is for inference without masks");
      }
      const T *kb = k + r.cache_row(b) * r.stride * H, *vb = v + r.cache_row(b) * r.stride * H;
      if (r.staged) widen(r.cache_row(b), keys, 0), kb = a.k.data(), vb = a.v.data();
      ops::attention_forward<T>(a.ctx.data() + r.offset(b) * H, nullptr, a.q.data() + r.offset(b) * H, kb, vb, nullptr, s,
                                ctx16 ? ctx16 + r.offset(b) * H : nullptr);
    }
    return a.ctx.data();
  }
  const int64_t Tk = cache ? r.start + r.T_ : r.T_;
  int64_t stride = r.stride;
  if (r.staged) {  // every row's Tk keys, (B, Tk, H)
    for (int64_t b = 0; b < r.B; ++b) widen(b, Tk, b * Tk);
    k = a.k.data(), v = a.v.data(), stride = Tk;
  }
  const T* context = attend(a, ctx, k, v, r.B, r.T_, Tk, cache ? r.start : 0, stride, cache, ctx16);
  if (cache) cache->length = r.start + r.T_;
  return context;
}

}  // namespace

template <typename T>
void self_attention_forward(T* out, AttentionActs<T>& a, const AttentionParams<T>& p, const AttentionContext<T>& ctx,
                            const T* x, int64_t B, int64_t T_, int64_t start, KVCache<T>* cache,
                            const Bf16Handoff& bf16) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = B * T_, H = c.hidden_size;
  const CallRows<T> r = call_rows(cache, c.attention_type == AttentionType::softmax, B, T_, start);
  grow_to(a.q, N * H);
  // Keys and values: the cache's rows, or the block's own buffers (without a cache, or staged for a bf16 one).
  T *k = nullptr, *v = nullptr;
  if (cache && !r.staged) {
    k = cache->k.data(), v = cache->v.data();
  } else {
    grow_to(a.k, N * H), grow_to(a.v, N * H);
    k = a.k.data(), v = a.v.data();
  }
  project_qkv(a, p, ctx, x, r, cache, k, v, bf16);
  uint16_t* ctx16 = context16(a, p, N * H);
  attention_output(out, a, p, ctx, attend_rows(a, ctx, r, cache, k, v, ctx16), ctx16, x, B, T_, bf16.out16);
}

template <typename T>
void self_attention_backward(T* dx, const AttentionParams<T>& g, const T* dout, const AttentionActs<T>& a,
                             const AttentionParams<T>& p, const AttentionContext<T>& ctx, const T* x, int64_t B,
                             int64_t T_, Scratch<T>& s) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = B * T_, H = c.hidden_size, n = c.num_attention_heads, D = c.head_dim();
  T* d_ctx = s.get(ScratchBuffer::attention_context, N * H);
  T *dq = s.get(ScratchBuffer::attention_query, N * H), *dk = s.get(ScratchBuffer::attention_key, N * H),
    *dv = s.get(ScratchBuffer::attention_value, N * H);
  attention_output_backward(d_ctx, dx, g, dout, a, p, ctx, B, T_, s);  // dx = the residual branch
  zero(dq, N * H), zero(dk, N * H), zero(dv, N * H);
  if (c.attention_type == AttentionType::softmax) {
    const ops::AttentionShape shape = softmax_shape(ctx, B, T_, T_, 0, T_);
    ops::attention_backward(dq, dk, dv, d_ctx, a.att.data(), a.q.data(), a.k.data(), a.v.data(), ctx.key_mask, shape,
                            a.ctx.data());  // the forward's output: Δ for the fused backwards
    if (ctx.rope) {  // the rotation is orthogonal: its backward rotates by −θ
      rotate(*ctx.rope, ROPE_BACKWARD, ROPE_ROLE_QUERY, dq, B, T_, n, D, 0);
      rotate(*ctx.rope, ROPE_BACKWARD, ROPE_ROLE_KEY, dk, B, T_, n, D, 0);
    }
  } else {
    ops::linear_attention_backward(dq, dk, dv, d_ctx, a.saved.data(), a.q.data(), a.k.data(), a.v.data(), ctx.favor,
                                   linear_attention_shape(c, B, T_, 0));
    if (ctx.favor) {
      favor_scale(dq, N * H, D);
      favor_scale(dk, N * H, D);
    }
  }
  if (ctx.rope && c.rotary_value) rotate(*ctx.rope, ROPE_BACKWARD, ROPE_ROLE_KEY, dv, B, T_, n, D, 0);
  linear_back(dx, g.q, dq, x, kept(a.x16), p.q, N, H, H);
  linear_back(dx, g.k, dk, x, kept(a.x16), p.k, N, H, H);
  linear_back(dx, g.v, dv, x, kept(a.x16), p.v, N, H, H);
}

template <typename T>
void cross_attention_memory(std::vector<T>& k, std::vector<T>& v, const AttentionParams<T>& p,
                            const AttentionContext<T>& ctx, const T* memory, int64_t B, int64_t Tk) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t H = c.hidden_size, n = c.num_attention_heads, D = c.head_dim();
  grow_to(k, B * Tk * H);
  grow_to(v, B * Tk * H);
  linear(k.data(), memory, p.k, B * Tk, H, H);
  linear(v.data(), memory, p.v, B * Tk, H, H);
  if (ctx.rope) rotate(*ctx.rope, ROPE_FORWARD, ROPE_ROLE_KEY, k.data(), B, Tk, n, D, 0);
  if (ctx.rope && c.rotary_value) rotate(*ctx.rope, ROPE_FORWARD, ROPE_ROLE_KEY, v.data(), B, Tk, n, D, 0);
}

template <typename T>
void cross_attention_forward(T* out, AttentionActs<T>& a, const AttentionParams<T>& p, const AttentionContext<T>& ctx,
                             const T* x, const T* memory, int64_t B, int64_t T_, int64_t Tk, KVCache<T>* cache,
                             uint16_t* out16) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = B * T_, H = c.hidden_size, n = c.num_attention_heads, D = c.head_dim();
  if (c.attention_type != AttentionType::softmax) throw std::invalid_argument("cross-attention supports softmax attention only");
  if (ctx.causal) throw std::invalid_argument("cross-attention is not causal");
  grow_to(a.q, N * H);
  linear(a.q.data(), x, p.q, N, H, H);
  if (ctx.rope) rotate(*ctx.rope, ROPE_FORWARD, ROPE_ROLE_QUERY, a.q.data(), B, T_, n, D, 0);
  std::vector<T>& k = cache ? cache->k : a.k;
  std::vector<T>& v = cache ? cache->v : a.v;
  if (!cache || cache->length == 0) cross_attention_memory(k, v, p, ctx, memory, B, Tk);  // once per source
  uint16_t* ctx16 = context16(a, p, N * H);
  if (!cache || (!cache->rows && !cache->lengths)) {
    if (cache) cache->B = B, cache->capacity = cache->length = Tk;
    const T* context = attend(a, ctx, k.data(), v.data(), B, T_, Tk, 0, Tk, static_cast<KVCache<T>*>(nullptr), ctx16);
    return attention_output(out, a, p, ctx, context, ctx16, x, B, T_, out16);
  }
  // Decoding over a padded memory: batch row b reads cache row rows[b] (b without rows), whose keys are
  // its first lengths[row] (each source's own length; the padding behind them is never read).
  const int64_t stride = cache->capacity;
  std::vector<int64_t> keys(B), rows(B);
  for (int64_t b = 0; b < B; ++b) {
    rows[b] = cache->rows ? cache->rows[b] : b;
    keys[b] = cache->lengths ? cache->lengths[rows[b]] : Tk;
    if (rows[b] < 0 || rows[b] >= cache->B || keys[b] < 1 || keys[b] > stride) {
      throw std::out_of_range("cross-attention: cache row " + std::to_string(rows[b]) + " holds no memory");
    }
  }
  if (ctx.saved != ops::AttentionSaved::none || ctx.dropout.attention != 0 || ctx.key_mask) {
    throw std::logic_error("cross-attention over a padded memory is for inference without key masks");
  }
  grow_to(a.ctx, N * H);
  if (T_ == 1 && !ctx.bf16_products) {  // one decoding step: every row and head in one pass
    ops::attention_decode_forward<T>(a.ctx.data(), a.q.data(), k.data(), v.data(), {B, n, D, keys.data(), rows.data(), stride});
  } else {
    for (int64_t b = 0; b < B; ++b) {
      const int64_t row = rows[b] * stride * H;
      ops::attention_forward<T>(a.ctx.data() + b * T_ * H, nullptr, a.q.data() + b * T_ * H, k.data() + row,
                                v.data() + row, nullptr, softmax_shape(ctx, 1, T_, keys[b], 0, stride));
    }
  }
  round_context(ctx16, a.ctx.data(), N * H);
  attention_output(out, a, p, ctx, a.ctx.data(), ctx16, x, B, T_, out16);
}

template <typename T>
void cross_attention_backward(T* dx, T* dmemory, const AttentionParams<T>& g, const T* dout, const AttentionActs<T>& a,
                              const AttentionParams<T>& p, const AttentionContext<T>& ctx, const T* x, const T* memory,
                              int64_t B, int64_t T_, int64_t Tk, Scratch<T>& s) {
  const RoFormerConfig& c = *ctx.config;
  const int64_t N = B * T_, M = B * Tk, H = c.hidden_size, n = c.num_attention_heads, D = c.head_dim();
  T* d_ctx = s.get(ScratchBuffer::attention_context, N * H);
  T *dq = s.get(ScratchBuffer::attention_query, N * H), *dk = s.get(ScratchBuffer::attention_key, M * H),
    *dv = s.get(ScratchBuffer::attention_value, M * H);
  attention_output_backward(d_ctx, dx, g, dout, a, p, ctx, B, T_, s);
  zero(dq, N * H), zero(dk, M * H), zero(dv, M * H);
  ops::attention_backward(dq, dk, dv, d_ctx, a.att.data(), a.q.data(), a.k.data(), a.v.data(), ctx.key_mask,
                          softmax_shape(ctx, B, T_, Tk, 0, Tk), a.ctx.data());
  if (ctx.rope) {
    rotate(*ctx.rope, ROPE_BACKWARD, ROPE_ROLE_QUERY, dq, B, T_, n, D, 0);
    rotate(*ctx.rope, ROPE_BACKWARD, ROPE_ROLE_KEY, dk, B, Tk, n, D, 0);
    if (c.rotary_value) rotate(*ctx.rope, ROPE_BACKWARD, ROPE_ROLE_KEY, dv, B, Tk, n, D, 0);
  }
  linear_back(dx, g.q, dq, x, p.q, N, H, H);
  linear_back(dmemory, g.k, dk, memory, p.k, M, H, H);
  linear_back(dmemory, g.v, dv, memory, p.v, M, H, H);
}

// ---- feed-forward ----

namespace {

// out16 (n) and slope16 (n) = activation(in) and its slope, in bf16 (bf16 training's
// FeedForwardActs::act16 and slope16).
void activation_forward_bf16(const RoFormerConfig& c, uint16_t* out16, uint16_t* slope16, const float* in, int64_t n) {
  if (c.hidden_act == Activation::gelu) {
    ops::gelu_forward_bf16(out16, slope16, in, n);
  } else {
    ops::relu_forward_bf16(out16, slope16, in, n);
  }
}

// a.sum (N, H) = act(x·W1ᵀ + b1)·W2ᵀ + b2, keeping what the backward needs: in bf16 training
// (p.out.w16) the activation and its slope in bf16 alone (the pre-activation is transient: one
// buffer per thread serves every layer); else pre and act, or with a packed layer that fuses the
// activation (inference), act alone, which a model packed in bf16 writes in bf16 (act16) for the
// output dense to read. x16: x in bf16 as its producer wrote it (Bf16Handoff), or null: rounded here
// when p.in reads bf16.
template <typename T>
void feed_forward_dense(const RoFormerConfig& c, FeedForwardActs<T>& a, const FeedForwardParams<T>& p, const T* x,
                        const uint16_t* x16, int64_t N) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  if (!x16) x16 = bf16_input(a.x16, x, p.in, N * H);
  if constexpr (std::is_same_v<T, float>) {
    if (p.in.w16 && p.out.w16) {
      thread_local std::vector<float> pre;
      grow_to(pre, N * I);
      grow_to(a.act16, N * I);
      grow_to(a.slope16, N * I);
      release(a.pre);  // an fp32 forward's (validation's) buffers
      release(a.act);
      linear(pre.data(), x, x16, p.in, N, H, I);  // (N, I)
      activation_forward_bf16(c, a.act16.data(), a.slope16.data(), pre.data(), N * I);
      return ops::linear_forward_bf16(a.sum.data(), a.act16.data(), p.out.w16, p.out.b, N, I, H);  // (N, H)
    }
  }
  release(a.slope16);  // a bf16 training forward's
  if constexpr (std::is_same_v<T, float>) {
    if (x16 && fuses_activation(p.in) && p.out.packed && p.out.reads_bf16()) {  // packed in bf16
      release(a.act);
      grow_to(a.act16, N * I);
      p.in.packed->forward(a.act16.data(), x16, N);                // (N, I), rounded as it is stored
      return p.out.packed->forward(a.sum.data(), a.act16.data(), N);  // (N, H)
    }
  }
  release(a.act16);
  grow_to(a.act, N * I);
  if (fuses_activation(p.in)) {
    linear(a.act.data(), x, x16, p.in, N, H, I);  // (N, I)
  } else {
    grow_to(a.pre, N * I);
    linear(a.pre.data(), x, x16, p.in, N, H, I);  // (N, I)
    activation_forward(c, a.act.data(), a.pre.data(), N * I);
  }
  linear(a.sum.data(), a.act.data(), p.out, N, I, H);  // (N, H)
}

// d_act (N, I) = d_sum·W2; g.out += its gradients: the backward of feed_forward_dense's output dense,
// on the activation it kept.
template <typename T>
void feed_forward_dense_back(const RoFormerConfig& c, T* d_act, const FeedForwardParams<T>& g, const T* d_sum,
                             const FeedForwardActs<T>& a, const FeedForwardParams<T>& p, int64_t N) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  if constexpr (std::is_same_v<T, float>) {
    if (!a.act16.empty()) {
      return ops::linear_backward_bf16(d_act, g.out.w, g.out.b, d_sum, a.act16.data(), p.out.w16, N, I, H,
                                       ops::Grad::overwrite);
    }
  }
  linear_back(d_act, g.out, d_sum, a.act.data(), p.out, N, I, H, ops::Grad::overwrite);
}

}  // namespace

template <typename T>
void feed_forward_forward(const RoFormerConfig& c, T* out, FeedForwardActs<T>& a, const FeedForwardParams<T>& p,
                          const T* x, int64_t N, int64_t layer, const Dropout& d, const Bf16Handoff& bf16) {
  const int64_t H = c.hidden_size;
  const int64_t step = rows_per_pass(a.chunk_rows, N, d);  // N, or in inference chunk_rows
  grow_to(a.sum, step * H);
  for (int64_t r0 = 0; r0 < N; r0 += step) {
    const int64_t n = std::min(step, N - r0);
    feed_forward_dense(c, a, p, x + r0 * H, bf16.x16_written ? a.x16.data() + r0 * H : nullptr, n);
    dropout_output(a.sum.data(), n, H, d, 3 + 3 * layer);
    residual_norm_forward(c, out + r0 * H, a.norm, a.sum.data(), x + r0 * H, p.norm, n, H,
                          bf16.out16 ? bf16.out16 + r0 * H : nullptr);
  }
}

template <typename T>
void feed_forward_backward(const RoFormerConfig& c, T* dx, const FeedForwardParams<T>& g, const T* dout,
                           const FeedForwardActs<T>& a, const FeedForwardParams<T>& p, const T* x, int64_t N,
                           int64_t layer, const Dropout& d, Scratch<T>& s) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  norm_backward(c, dx, g.norm, dout, a.sum.data(), p.norm, a.norm, N, H);  // dx = the residual branch
  T* d_sum = s.get(ScratchBuffer::feed_forward_sum, N * H);
  dropout_back(d_sum, dx, N * H, d, 3 + 3 * layer, d.first(H));
  T* d_act = s.get(ScratchBuffer::feed_forward_activation, N * I);
  feed_forward_dense_back(c, d_act, g, d_sum, a, p, N);
  if constexpr (std::is_same_v<T, float>) {
    if (!a.slope16.empty()) {  // bf16 training: d_pre = d_act ⊙ slope, formed as it is rounded
      return ops::linear_backward_bf16_with_slope(dx, g.in.w, g.in.b, d_act, a.slope16.data(), a.x16.data(),
                                                  p.in.w16, N, H, I);
    }
  }
  T* d_pre = s.get(ScratchBuffer::feed_forward_pre, N * I);
  activation_backward(c, d_pre, a.pre.data(), d_act, N * I);
  linear_back(dx, g.in, d_pre, x, kept(a.x16), p.in, N, H, I);
}

// ---- heads ----

template <typename T>
void mlm_head_forward(const RoFormerConfig& c, T* logits, MlmHeadActs<T>& a, const MlmHeadParams<T>& p, const T* h,
                      int64_t N) {
  const int64_t E = c.embedding_size, H = c.hidden_size, V = c.vocab_size;
  if (!p.dense.w) {  // RoFormer-V2: the tied matmul only
    linear(logits, h, p.decoder(), N, H, V);  // decoder_b is null
    return;
  }
  for (auto* v : {&a.dense, &a.act, &a.normed}) grow_to(*v, N * E);
  linear(a.dense.data(), h, p.dense, N, H, E);  // (N, E)
  activation_forward(c, a.act.data(), a.dense.data(), N * E);
  norm_forward(c, a.normed.data(), a.norm, a.act.data(), p.norm, N, E);
  linear(logits, a.normed.data(), p.decoder(), N, E, V);  // (N, V)
}

template <typename T>
void mlm_head_backward(const RoFormerConfig& c, T* dh, const MlmHeadParams<T>& g, const T* dlogits,
                       const MlmHeadActs<T>& a, const MlmHeadParams<T>& p, const T* h, int64_t N, Scratch<T>& s) {
  const int64_t E = c.embedding_size, H = c.hidden_size, V = c.vocab_size;
  if (!p.dense.w) {
    linear_back(dh, LinearParams<T>{g.decoder_w}, dlogits, h, p.decoder(), N, H, V, ops::Grad::overwrite);
    return;
  }
  T *d_normed = s.get(ScratchBuffer::mlm_head_normed, N * E), *d_act = s.get(ScratchBuffer::mlm_head_activation, N * E),
    *d_dense = s.get(ScratchBuffer::mlm_head_dense, N * E);
  linear_back(d_normed, g.decoder(), dlogits, a.normed.data(), p.decoder(), N, E, V, ops::Grad::overwrite);
  norm_backward(c, d_act, g.norm, d_normed, a.act.data(), p.norm, a.norm, N, E);
  activation_backward(c, d_dense, a.dense.data(), d_act, N * E);
  linear_back(dh, g.dense, d_dense, h, p.dense, N, H, E, ops::Grad::overwrite);
}

template <typename T>
void pooler_forward(const RoFormerConfig& c, PoolerActs<T>& a, const PoolerParams<T>& p, const T* h, int64_t B,
                    int64_t T_) {
  const int64_t H = c.hidden_size;
  grow_to(a.cls, B * H);
  grow_to(a.out, B * H);
  for (int64_t b = 0; b < B; ++b) std::copy_n(h + b * T_ * H, H, a.cls.data() + b * H);  // (B, H) [CLS] states
  linear(a.out.data(), a.cls.data(), p.dense, B, H, H);
  if (c.pooler_activation == PoolerActivation::tanh) {
    for (T& x : a.out) x = std::tanh(x);
  }
}

template <typename T>
void pooler_backward(const RoFormerConfig& c, T* dh, const PoolerParams<T>& g, const T* dout, const PoolerActs<T>& a,
                     const PoolerParams<T>& p, int64_t B, int64_t T_) {
  const int64_t H = c.hidden_size;
  std::vector<T> d_pre(dout, dout + B * H), d_cls(B * H, T(0));  // (B, H)
  if (c.pooler_activation == PoolerActivation::tanh) {
    for (int64_t i = 0; i < B * H; ++i) d_pre[i] *= T(1) - a.out[i] * a.out[i];
  }
  linear_back(d_cls.data(), g.dense, d_pre.data(), a.cls.data(), p.dense, B, H, H);
  for (int64_t b = 0; b < B; ++b) accumulate(dh + b * T_ * H, d_cls.data() + b * H, H);
}

template <typename T>
void dense_forward(T* out, const T* x, const LinearParams<T>& p, int64_t N, int64_t IC, int64_t OC) {
  linear(out, x, p, N, IC, OC);
}

template <typename T>
void dense_backward(T* dx, const LinearParams<T>& g, const T* dout, const T* x, const LinearParams<T>& p, int64_t N,
                    int64_t IC, int64_t OC) {
  linear_back(dx, g, dout, x, p, N, IC, OC, ops::Grad::overwrite);
}

template <typename T>
void head_dropout_forward(T* x, int64_t count, const Dropout& d, int64_t site, uint64_t first) {
  if (d.hidden > 0) ops::dropout_forward(x, x, count, d.hidden, d.site_seed(site), first);
}

template <typename T>
void head_dropout_backward(T* dx, const T* dy, int64_t count, const Dropout& d, int64_t site, uint64_t first) {
  dropout_back(dx, dy, count, d, site, first);
}

// ---- instantiations ----

#define ROFORMER_BLOCKS(T)                                                                                           \
  template uint16_t* bf16_input_buffer<T>(std::vector<uint16_t>&, const LinearParams<T>&, int64_t);                 \
  template void norm_forward<T>(const RoFormerConfig&, T*, NormActs<T>&, const T*, const NormParams<T>&, int64_t,   \
                                int64_t, uint16_t*);                                                                 \
  template void norm_backward<T>(const RoFormerConfig&, T*, const NormParams<T>&, const T*, const T*,               \
                                 const NormParams<T>&, const NormActs<T>&, int64_t, int64_t);                        \
  template void activation_forward<T>(const RoFormerConfig&, T*, const T*, int64_t);                                \
  template void activation_backward<T>(const RoFormerConfig&, T*, const T*, const T*, int64_t);                     \
  template void embeddings_forward<T>(const RoFormerConfig&, T*, EmbeddingActs<T>&, const EmbeddingParams<T>&,      \
                                      const int64_t*, const int64_t*, int64_t, int64_t, int64_t, const Dropout&,     \
                                      uint16_t*);                                                                    \
  template void embeddings_backward<T>(const RoFormerConfig&, const EmbeddingParams<T>&, const T*,                  \
                                       const EmbeddingActs<T>&, const EmbeddingParams<T>&, const Dropout&,           \
                                       Scratch<T>&);                                                                 \
  template std::vector<T> performer_features<T>(const RoFormerConfig&, int64_t);                                    \
  template void self_attention_forward<T>(T*, AttentionActs<T>&, const AttentionParams<T>&,                         \
                                          const AttentionContext<T>&, const T*, int64_t, int64_t, int64_t,           \
                                          KVCache<T>*, const Bf16Handoff&);                                          \
  template void self_attention_backward<T>(T*, const AttentionParams<T>&, const T*, const AttentionActs<T>&,        \
                                           const AttentionParams<T>&, const AttentionContext<T>&, const T*, int64_t, \
                                           int64_t, Scratch<T>&);                                                    \
  template void cross_attention_memory<T>(std::vector<T>&, std::vector<T>&, const AttentionParams<T>&,              \
                                          const AttentionContext<T>&, const T*, int64_t, int64_t);                 \
  template void cross_attention_forward<T>(T*, AttentionActs<T>&, const AttentionParams<T>&,                        \
                                           const AttentionContext<T>&, const T*, const T*, int64_t, int64_t,         \
                                           int64_t, KVCache<T>*, uint16_t*);                                         \
  template void cross_attention_backward<T>(T*, T*, const AttentionParams<T>&, const T*, const AttentionActs<T>&,   \
                                            const AttentionParams<T>&, const AttentionContext<T>&, const T*,         \
                                            const T*, int64_t, int64_t, int64_t, Scratch<T>&);                       \
  template void feed_forward_forward<T>(const RoFormerConfig&, T*, FeedForwardActs<T>&,                             \
                                        const FeedForwardParams<T>&, const T*, int64_t, int64_t, const Dropout&,     \
                                        const Bf16Handoff&);                                                         \
  template void feed_forward_backward<T>(const RoFormerConfig&, T*, const FeedForwardParams<T>&, const T*,          \
                                         const FeedForwardActs<T>&, const FeedForwardParams<T>&, const T*, int64_t,  \
                                         int64_t, const Dropout&, Scratch<T>&);                                      \
  template void mlm_head_forward<T>(const RoFormerConfig&, T*, MlmHeadActs<T>&, const MlmHeadParams<T>&, const T*,  \
                                    int64_t);                                                                        \
  template void mlm_head_backward<T>(const RoFormerConfig&, T*, const MlmHeadParams<T>&, const T*,                  \
                                     const MlmHeadActs<T>&, const MlmHeadParams<T>&, const T*, int64_t, Scratch<T>&); \
  template void pooler_forward<T>(const RoFormerConfig&, PoolerActs<T>&, const PoolerParams<T>&, const T*, int64_t, \
                                  int64_t);                                                                          \
  template void pooler_backward<T>(const RoFormerConfig&, T*, const PoolerParams<T>&, const T*, const PoolerActs<T>&, \
                                   const PoolerParams<T>&, int64_t, int64_t);                                        \
  template void dense_forward<T>(T*, const T*, const LinearParams<T>&, int64_t, int64_t, int64_t);                    \
  template void dense_backward<T>(T*, const LinearParams<T>&, const T*, const T*, const LinearParams<T>&, int64_t,   \
                                  int64_t, int64_t);                                                                 \
  template void head_dropout_forward<T>(T*, int64_t, const Dropout&, int64_t, uint64_t);                             \
  template void head_dropout_backward<T>(T*, const T*, int64_t, const Dropout&, int64_t, uint64_t);
ROFORMER_BLOCKS(float)
ROFORMER_BLOCKS(double)

}  // namespace model
