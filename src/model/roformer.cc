// The RoFormer encoder models as a composition of blocks (see roformer.h and blocks.h).
#include "roformer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <sys/mman.h>
#include <unistd.h>
#include <type_traits>

#include "base/enum_names.h"
#include "ops/loss.h"
#include "ops/linear.h"
#include "base/random.h"
#include "model/head.h"

namespace model {

// Everything the backward needs from the forward, for one (B, T).
template <typename T>
struct RoFormer<T>::Activations {
  int64_t B = 0, S = 0, N = 0;
  Keep keep = Keep::backward;
  std::vector<int64_t> mask, targets, row_limit;  // (B, T); row_limit: UniLM prefix limits (Sim)
  bool has_mask = false, has_loss = false;
  Dropout dropout;  // off at inference
  EmbeddingActs<T> emb;
  std::vector<std::vector<T>> h;  // L+1 × (N, H) block inputs and the last output; Keep::outputs: 2
  std::vector<T>& input_of(int64_t l) { return h[keep != Keep::outputs ? l : l % 2]; }  // (N, H) of block l
  const std::vector<T>& input_of(int64_t l) const { return h[keep != Keep::outputs ? l : l % 2]; }
  std::vector<LayerActs<T>> layers;  // L; Keep::outputs and Keep::inputs: 1, shared by every layer
  bool shared() const { return keep == Keep::outputs || keep == Keep::inputs; }
  LayerActs<T>& layer(int64_t l) { return layers[shared() ? 0 : l]; }
  int64_t shared_layer = -1;  // Keep::inputs: the layer whose activations the shared set holds
  MlmHeadActs<T> head;
  std::vector<T> logits, probs, d_logits;  // (N, V); logits (logit_rows.size(), V) when chosen
  std::vector<int64_t> logit_rows;         // Inputs::logit_rows, or empty: every row
  std::vector<T> picked;                   // (logit_rows.size(), H) the last hidden states of those rows
  PoolerActs<T> pooler;
  std::vector<T> head_logits;  // a task head's logits (HeadDef::logits_count)
  Dropout head_dropout;        // the task head's own sites, off at inference
  int64_t counted = 0;
};

template <typename T>
RoFormer<T>::RoFormer(const RoFormerConfig& cfg) : cfg_(cfg) {
  cfg_.validate();
  layout_ = param_layout(cfg_);
  max_kept_keys_ = (4 * cfg_.hidden_size + 2 * cfg_.intermediate_size) / cfg_.num_attention_heads;
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string first = "roformer.encoder.layer." + std::to_string(l) + ".";
    for (const ParamInfo& info : layout_) {
      if (info.name.rfind(first, 0) == 0) {
        layer_offsets_.push_back(info.offset);
        break;
      }
    }
  }
  params.assign(param_count(layout_), T(0));
  if (cfg_.head) {
    if constexpr (std::is_same_v<T, float>) {
      head_ = cfg_.head->make_f32();
    } else {
      head_ = cfg_.head->make_f64();
    }
  }
  p = bind_params(cfg_, layout_, params.data());
  bind_head();
  statics_ = std::make_unique<LayerStatics<T>>(cfg_);
  act_ = std::make_unique<Activations>();
  has_mlm_head_ = !cfg_.head;
}

template <typename T>
void RoFormer<T>::bind_head() {
  if (head_) head_->bind(cfg_, p.task, g.task);
}

template <typename T>
RoFormer<T>::RoFormer(const RoFormerConfig& cfg, T* params_base, T* grads_base, bool mlm_head) : RoFormer(cfg) {
  params.clear();
  params.shrink_to_fit();
  view_ = true;
  p = bind_params(cfg_, layout_, params_base);
  if (grads_base) g = bind_params(cfg_, layout_, grads_base);
  bind_head();
  has_mlm_head_ = mlm_head && !cfg_.head;
  if (!has_mlm_head_) p.head = g.head = MlmHeadParams<T>{};
}

template <typename T>
RoFormer<T>::~RoFormer() = default;

template <typename T>
void RoFormer<T>::init_weights(uint64_t seed) {
  if (view_) throw std::logic_error("init_weights: a view's owner initialises the arena");
  unpack();
  arena_released_ = false;
  init_params(layout_, params.data(), cfg_.initializer_range, seed);
  std::fill(p.emb.word + cfg_.pad_token_id * cfg_.embedding_size, p.emb.word + (cfg_.pad_token_id + 1) * cfg_.embedding_size,
            T(0));
}

template <typename T>
void RoFormer<T>::load(const io::WeightStore& w, const std::vector<std::string>& other_heads, bool mlm_head,
                       const std::vector<std::string>& optional) {
  if (view_) throw std::logic_error("load: a view's owner loads the arena");
  unpack();
  arena_released_ = false;
  *act_ = Activations();  // the head may change: the next forward sizes its buffers afresh
  const bool bare = stores_bare_encoder(w);
  const std::string head = "cls.predictions.";
  // The head is there when stored, or when the caller lets it keep its initialisation (optional).
  const bool head_optional = std::any_of(optional.begin(), optional.end(),
                                         [&](const std::string& prefix) { return head.rfind(prefix, 0) == 0; });
  has_mlm_head_ = mlm_head && !cfg_.head &&
                  (cfg_.rms_norm() || head_optional || std::any_of(layout_.begin(), layout_.end(), [&](const ParamInfo& i) {
                     return i.name.rfind(head, 0) == 0 && w.contains(i.name);
                   }));
  std::vector<std::string> skipped = other_heads;  // prefixes of tensors left unread
  if (!mlm_head) skipped.push_back(head);
  for (const ParamInfo& info : layout_) {
    if (!has_mlm_head_ && info.name.rfind(head, 0) == 0) continue;  // an encoder-only checkpoint
    const std::string name = stored_name(info.name, bare);
    const bool may_miss = std::any_of(optional.begin(), optional.end(),
                                      [&](const std::string& prefix) { return info.name.rfind(prefix, 0) == 0; });
    if (!w.contains(name) && may_miss) continue;  // keeps its value (e.g. a new head's initialisation)
    if (!w.contains(name)) throw io::Error(w.path() + ": missing tensor " + name);
    const std::vector<float> values = w.f32(name, info.shape);
    std::copy(values.begin(), values.end(), params.begin() + info.offset);
    w.release(w.at(name));  // the model holds its own copy now
  }
  for (const auto& entry : w.tensors()) {
    const std::string& name = entry.first;  // not a structured binding: clang < 16 cannot capture one
    const bool known = std::any_of(layout_.begin(), layout_.end(),
                                   [&](const ParamInfo& i) { return stored_name(i.name, bare) == name; });
    if (known || name == stored_name("roformer.encoder.embed_positions.weight", bare)) continue;
    if (std::any_of(skipped.begin(), skipped.end(), [&](const std::string& p) { return name.rfind(p, 0) == 0; })) {
      continue;  // a head the caller loads itself (classifier., pooler., ...) or did not ask for
    }
    if (name == "cls.predictions.decoder.weight") {  // tied: must equal the word embeddings
      const auto dec = w.f32(name, {cfg_.vocab_size, cfg_.embedding_size});
      if (!std::equal(dec.begin(), dec.end(), p.emb.word)) {
        throw io::Error(w.path() + ": cls.predictions.decoder.weight differs from the tied word embeddings");
      }
      w.release(entry.second);
      continue;
    }
    if (name == "cls.predictions.decoder.bias") {  // tied: pytorch_model.bin files store it too
      const auto bias = w.f32(name, {cfg_.vocab_size});
      if (!std::equal(bias.begin(), bias.end(), p.head.decoder_b)) {
        throw io::Error(w.path() + ": cls.predictions.decoder.bias differs from the tied cls.predictions.bias");
      }
      w.release(entry.second);
      continue;
    }
    throw io::Error(w.path() + ": unexpected tensor " + name + " for this config");
  }
}

template <typename T>
void RoFormer<T>::embed(const Inputs& in, bool training, uint64_t dropout_seed) {
  const int64_t B = in.B, S = in.T, N = B * S;
  if (B <= 0 || S <= 0 || !in.ids) throw std::invalid_argument("forward: empty batch");
  if (S > cfg_.max_position_embeddings && cfg_.position_encoding == PositionEncoding::learned) {
    throw std::invalid_argument("sequence length " + std::to_string(S) + " exceeds the " +
                                std::to_string(cfg_.max_position_embeddings) + " learned positions");
  }
  Activations& a = *act_;
  const int64_t L = cfg_.num_hidden_layers, H = cfg_.hidden_size;
  if (a.B != B || a.S != S || a.keep != keep_) {  // new shapes: buffers only grow (grow_to), so batches
    a.B = B, a.S = S, a.N = N, a.keep = keep_;      // of varying length reuse them
    a.h.resize(keep_ != Keep::outputs ? L + 1 : 2);
    for (std::vector<T>& h : a.h) grow_to(h, N * H);
    a.layers.resize(a.shared() ? 1 : L);
  }
  const int64_t rows = keep_ == Keep::outputs ? inference_rows_ : 0;  // rows per pass; 0: all
  a.emb.chunk_rows = rows;
  for (LayerActs<T>& l : a.layers) l.attn.chunk_rows = l.cross.chunk_rows = l.ffn.chunk_rows = rows;
  statics_->set_length(S);  // dynamic NTK: frequencies for this length
  a.has_mask = in.attention_mask != nullptr;
  a.mask.assign(N, 1);
  if (in.attention_mask) a.mask.assign(in.attention_mask, in.attention_mask + N);
  a.targets.assign(N, kIgnoreIndex);
  if (in.targets) a.targets.assign(in.targets, in.targets + N);
  a.has_loss = in.targets != nullptr;
  a.logit_rows.clear();
  if (in.logit_rows) {
    if (in.targets) throw std::invalid_argument("forward: logit_rows with targets (a loss needs every row's logits)");
    if (in.logit_row_count < 1) throw std::invalid_argument("forward: logit_rows needs at least one row");
    for (int64_t r = 0; r < in.logit_row_count; ++r) {
      if (in.logit_rows[r] < 0 || in.logit_rows[r] >= N) {
        throw std::out_of_range("forward: logit row " + std::to_string(in.logit_rows[r]) + " outside the batch's " +
                                std::to_string(N) + " rows");
      }
    }
    a.logit_rows.assign(in.logit_rows, in.logit_rows + in.logit_row_count);
  }
  a.counted = 0;
  a.dropout = training ? Dropout::training(cfg_, dropout_seed, in.row0, S) : Dropout{};
  // A task head's dropout sites draw from their own stream.
  a.head_dropout = training ? Dropout::training(cfg_, base::mix64(dropout_seed ^ 0xc1a551f1e5ull), in.row0, S)
                            : Dropout{};
  a.row_limit.clear();
  if (cfg_.unilm_mask()) {  // UniLM: query i sees key j iff cumsum(tt)[j] <= cumsum(tt)[i], a prefix
    a.row_limit.resize(N);
    std::vector<int64_t> segment(N);  // (B, S)
    unilm_row_limits(a.row_limit.data(), segment.data(), S, in.token_types, B, S, 0);
  }
  embeddings_forward(cfg_, a.input_of(0).data(), a.emb, p.emb, in.ids, in.token_types, B, S, 0, a.dropout,
                     input16(0));
}

template <typename T>
uint16_t* RoFormer<T>::input16(int64_t l) {
  Activations& a = *act_;
  if (l >= cfg_.num_hidden_layers) return nullptr;  // the last layer's output: the heads round their own
  // Shared activations: layer l + 1's x16 is the buffer layer l reads (and its backward needs), so each
  // layer rounds its own input.
  if (a.shared()) return nullptr;
  return bf16_input_buffer(a.layer(l).attn.x16, p.layers[l].attn.input_dense(), a.N * cfg_.hidden_size);
}

template <typename T>
AttentionCall RoFormer<T>::attention_call() const {
  const Activations& a = *act_;
  AttentionCall call;
  call.key_mask = a.has_mask ? a.mask.data() : nullptr;
  call.row_limit = a.row_limit.empty() ? nullptr : a.row_limit.data();
  call.memory_mask = memory_mask_;
  call.dropout = a.dropout;
  switch (a.keep) {
    case Keep::all: call.saved = ops::AttentionSaved::probabilities; break;
    case Keep::outputs: call.saved = ops::AttentionSaved::none; break;
    case Keep::backward:
    case Keep::inputs: {  // the probabilities while they are small, row statistics past max_kept_keys_
      const int64_t keys = std::max(a.S, cfg_.add_cross_attention ? memory_len_ : int64_t{0});
      call.saved = keys <= max_kept_keys_ ? ops::AttentionSaved::probabilities : ops::AttentionSaved::row_stats;
      break;
    }
  }
  // A bf16 or int8 model also takes attention's products in bf16 where the CPU multiplies bf16 natively;
  // so does a training forward in bf16 mixed precision, and its backward.
  call.bf16_products = bf16_training_ || (packed() && packed_precision_ != ops::Precision::f32 &&
                                          ops::bf16_is_native() && call.saved == ops::AttentionSaved::none &&
                                          a.dropout.attention == 0);
  return call;
}

template <typename T>
void RoFormer<T>::set_memory(const T* memory, const int64_t* memory_mask, int64_t Tk) {
  if (!cfg_.add_cross_attention) throw std::logic_error("set_memory: this model has no cross-attention");
  if (!memory || Tk <= 0) throw std::invalid_argument("set_memory: empty memory");
  memory_ = memory, memory_mask_ = memory_mask, memory_len_ = Tk;
}

template <typename T>
const T* RoFormer<T>::memory_grad() const {
  return d_memory_.data();
}

template <typename T>
void RoFormer<T>::encode() {
  Activations& a = *act_;
  if (cfg_.add_cross_attention && !memory_) throw std::logic_error("a decoder with cross-attention needs set_memory");
  const AttentionCall call = attention_call();
  const CrossMemory<T> memory{memory_, memory_len_};
  KVCache<T>* const no_cache = nullptr;  // the whole sequence: the layers keep their keys and values
  a.shared_layer = -1;
  uint16_t* in16 = input16(0);  // bf16 training: h[0] in bf16, which the embeddings wrote
  for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {  // h[l + 1] (N, H) from h[l]
    // layer l's input in bf16 was written with h[l], and its output's goes to layer l + 1
    const Bf16Handoff bf16{input16(l + 1), in16 != nullptr};
    in16 = bf16.out16;
    layer_forward(a.input_of(l + 1).data(), a.layer(l), p.layers[l], statics_->self_context(l, call),
                  statics_->cross_context(l, call), a.input_of(l).data(), a.B, a.S, 0, no_cache, memory, bf16);
  }
  a.shared_layer = cfg_.num_hidden_layers - 1;
}

template <typename T>
void RoFormer<T>::recompute_layer(int64_t l, const AttentionCall& call, const CrossMemory<T>& memory) {
  Activations& a = *act_;
  if (a.shared_layer == l) return;  // the last layer's, as the forward left them
  // Its output equals h[l + 1], which stays as the forward wrote it (hidden_state(l + 1)).
  T* out = scratch_->get(ScratchBuffer::model_recomputed, a.N * cfg_.hidden_size);
  layer_forward(out, a.layer(l), p.layers[l], statics_->self_context(l, call), statics_->cross_context(l, call),
                a.input_of(l).data(), a.B, a.S, 0, static_cast<KVCache<T>*>(nullptr), memory);
  a.shared_layer = l;
}

template <typename T>
void RoFormer<T>::run_heads(bool logits) {
  Activations& a = *act_;
  const T* last = a.input_of(cfg_.num_hidden_layers).data();  // (N, H)
  if (p.pooler.dense.w) pooler_forward(cfg_, a.pooler, p.pooler, last, a.B, a.S);
  if (head_) {
    a.head_logits.resize(cfg_.head->logits_count(cfg_, a.B, a.S));
    head_->forward(a.head_logits.data(), head_call());
  }
  if (!has_mlm_head_ || !logits) {
    a.logits.clear();  // logits() is null rather than an earlier batch's
    return;
  }
  if (a.logit_rows.empty()) {
    a.logits.resize(a.N * cfg_.vocab_size);
    mlm_head_forward(cfg_, a.logits.data(), a.head, p.head, last, a.N);
    return;
  }
  const int64_t R = static_cast<int64_t>(a.logit_rows.size()), H = cfg_.hidden_size;
  a.picked.resize(R * H);
  for (int64_t r = 0; r < R; ++r) std::copy_n(last + a.logit_rows[r] * H, H, a.picked.data() + r * H);
  a.logits.resize(R * cfg_.vocab_size);
  mlm_head_forward(cfg_, a.logits.data(), a.head, p.head, a.picked.data(), R);
}

template <typename T>
double RoFormer<T>::forward(const Inputs& in, bool training, uint64_t dropout_seed) {
  if (in.targets && !has_mlm_head_) throw std::invalid_argument("this checkpoint has no MLM head: no logits, no loss");
  if (in.targets && !in.logits) throw std::invalid_argument("a loss needs the logits (Inputs::logits)");
  use_bf16_weights(training && precision_ == ops::Precision::bf16);
  embed(in, training, dropout_seed);
  encode();
  run_heads(in.logits);
  Activations& a = *act_;
  if (!a.has_loss) return 0.0;
  a.probs.resize(a.N * cfg_.vocab_size);
  return ops::cross_entropy_forward(a.probs.data(), a.logits.data(), a.targets.data(), a.N, cfg_.vocab_size,
                                    kIgnoreIndex, &a.counted);
}

template <typename T>
void RoFormer<T>::backward() {
  Activations& a = *act_;
  if (a.N == 0 || !a.has_loss) throw std::logic_error("backward needs a forward with targets");
  a.d_logits.assign(a.N * cfg_.vocab_size, T(0));
  ops::cross_entropy_backward(a.d_logits.data(), a.probs.data(), a.targets.data(), a.N, cfg_.vocab_size, kIgnoreIndex,
                              a.counted, 1.0);
  backward_from_logits(a.d_logits.data());
}

template <typename T>
void RoFormer<T>::backward_from_logits(const T* d_logits) {
  Activations& a = *act_;
  if (a.N == 0 || !has_mlm_head_) throw std::logic_error("backward_from_logits needs a forward with an MLM head");
  require_unpacked("backward_from_logits");
  if (a.keep == Keep::outputs) throw std::logic_error("backward needs a forward that kept its activations");
  allocate_grads();
  if (!scratch_) scratch_ = std::make_unique<Scratch<T>>();
  T* d_h = scratch_->get(ScratchBuffer::model_hidden, a.N * cfg_.hidden_size);
  mlm_head_backward(cfg_, d_h, g.head, d_logits, a.head, p.head, a.input_of(cfg_.num_hidden_layers).data(), a.N,
                    *scratch_);
  backward_from_hidden(d_h);  // model_hidden is not a buffer backward_from_hidden or the blocks use
}

template <typename T>
HeadCall<T> RoFormer<T>::head_call() const {
  const Activations& a = *act_;
  return {&cfg_, a.input_of(cfg_.num_hidden_layers).data(), a.B, a.S, a.head_dropout};
}

template <typename T>
void RoFormer<T>::backward_from_head_logits(const T* d_logits) {
  Activations& a = *act_;
  if (a.N == 0 || !head_) throw std::logic_error("backward_from_head_logits needs a forward of a model with a task head");
  require_unpacked("backward_from_head_logits");
  if (a.keep == Keep::outputs) throw std::logic_error("backward needs a forward that kept its activations");
  allocate_grads();
  d_head_h_.assign(a.N * cfg_.hidden_size, T(0));  // (N, H)
  head_->backward(d_head_h_.data(), d_logits, head_call());
  backward_from_hidden(d_head_h_.data());
}

template <typename T>
void RoFormer<T>::backward_from_hidden(const T* d_hidden, const T* d_pooled) {
  Activations& a = *act_;
  if (a.N == 0) throw std::logic_error("backward needs a forward");
  if (a.keep == Keep::outputs) throw std::logic_error("backward needs a forward that kept its activations");
  require_unpacked("backward");
  allocate_grads();
  if (!scratch_) scratch_ = std::make_unique<Scratch<T>>();
  Scratch<T>& s = *scratch_;
  const int64_t N = a.N, H = cfg_.hidden_size;
  T *d_out = s.get(ScratchBuffer::model_out, N * H), *d_mid = s.get(ScratchBuffer::model_mid, N * H),
    *d_in = s.get(ScratchBuffer::model_in, N * H);  // (N, H) each
  std::copy(d_hidden, d_hidden + N * H, d_out);
  if (d_pooled && p.pooler.dense.w) pooler_backward(cfg_, d_out, g.pooler, d_pooled, a.pooler, p.pooler, a.B, a.S);
  if (cfg_.add_cross_attention) d_memory_.assign(a.B * memory_len_ * H, T(0));
  const AttentionCall call = attention_call();
  const CrossMemory<T> memory{memory_, memory_len_};
  for (int64_t l = cfg_.num_hidden_layers - 1; l >= 0; --l) {  // d_out: d(loss)/d(block l's output)
    if (a.keep == Keep::inputs) recompute_layer(l, call, memory);
    layer_backward(d_in, d_mid, d_memory_.data(), g.layers[l], d_out, a.layer(l), p.layers[l],
                   statics_->self_context(l, call), statics_->cross_context(l, call), a.input_of(l).data(), memory,
                   a.B, a.S, s);
    std::swap(d_out, d_in);
    if (on_grads_final) on_grads_final(layer_offsets_[l]);
  }
  embeddings_backward(cfg_, g.emb, d_out, a.emb, p.emb, a.dropout, s);
  if (on_grads_final) on_grads_final(0);
}

namespace {

// Hands the whole pages inside [data, data + bytes) back to the operating system (they read as zeros
// afterwards): the arena's copy of a weight that serving only reads packed.
void release_pages(void* data, int64_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(bytes)) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace

template <typename T>
void RoFormer<T>::pack(ops::Precision precision, bool release_arena) {
  if constexpr (!std::is_same_v<T, float>) {
    throw std::logic_error("pack: only fp32 models are packed for inference");
  } else {
    if (arena_released_) throw std::logic_error("pack: the arena's linear weights were released; load them again");
    unpack();
    packed_precision_ = precision;
    const ops::Epilogue activation = cfg_.hidden_act == Activation::gelu   ? ops::Epilogue::gelu
                                     : cfg_.hidden_act == Activation::relu ? ops::Epilogue::relu
                                                                 : ops::Epilogue::none;
    // Each matrix's arena copy is released (release_arena) as soon as it is packed, so the peak holds
    // the arena and one layer's packed copy, not two copies of everything.
    auto release = [&](const T* w, int64_t count) {
      if (release_arena && w) release_pages(const_cast<T*>(w), count * static_cast<int64_t>(sizeof(T)));
    };
    auto pack_one = [&](const T* w, const T* b, int64_t out, int64_t in, ops::Epilogue e = ops::Epilogue::none) {
      packed_.push_back(std::make_unique<ops::PackedLinear>(w, b, out, in, precision, e));
      return packed_.back().get();
    };
    auto pack_linear = [&](LinearParams<T>& l, int64_t out, int64_t in, ops::Epilogue e = ops::Epilogue::none) {
      if (!l.w) return;
      l.packed = pack_one(l.w, l.b, out, in, e);
      release(l.w, out * in);
    };
    const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, E = cfg_.embedding_size, V = cfg_.vocab_size;
    arena_released_ = release_arena;
    pack_linear(p.emb.project, H, E);
    for (LayerParams<T>& layer : p.layers) {
      // Self-attention's q, k and v as one (3H, H) layer: [Wq; Wk; Wv] and [bq; bk; bv].
      std::vector<T> w(3 * H * H), b(cfg_.use_bias ? 3 * H : 0);
      const LinearParams<T>* parts[] = {&layer.attn.q, &layer.attn.k, &layer.attn.v};
      for (int64_t i = 0; i < 3; ++i) {
        std::copy_n(parts[i]->w, H * H, w.data() + i * H * H);
        if (!b.empty()) std::copy_n(parts[i]->b, H, b.data() + i * H);
      }
      layer.attn.qkv = pack_one(w.data(), b.empty() ? nullptr : b.data(), 3 * H, H);
      for (const LinearParams<T>* part : parts) release(part->w, H * H);
      pack_linear(layer.attn.out, H, H);
      for (LinearParams<T>* l : {&layer.cross.q, &layer.cross.k, &layer.cross.v, &layer.cross.out}) {
        pack_linear(*l, H, H);
      }
      pack_linear(layer.ffn.in, I, H, activation);
      pack_linear(layer.ffn.out, H, I);
    }
    if (has_mlm_head_ && p.head.decoder_w) {  // the decoder is the word embedding table: never released
      pack_linear(p.head.dense, E, H);
      p.head.decoder_packed = pack_one(p.head.decoder_w, p.head.decoder_b, V, p.head.dense.w ? E : H);
    }
  }
}

template <typename T>
std::vector<typename RoFormer<T>::LinearLayer> RoFormer<T>::linear_layers() {
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, E = cfg_.embedding_size;
  std::vector<LinearLayer> all;
  auto add = [&](LinearParams<T>& l, int64_t out, int64_t in) {
    if (l.w) all.push_back({&l, out, in});
  };
  add(p.emb.project, H, E);
  for (LayerParams<T>& layer : p.layers) {
    for (AttentionParams<T>* attn : {&layer.attn, &layer.cross}) {
      for (LinearParams<T>* l : {&attn->q, &attn->k, &attn->v, &attn->out}) add(*l, H, H);
    }
    add(layer.ffn.in, I, H);
    add(layer.ffn.out, H, I);
  }
  add(p.head.dense, E, H);
  add(p.pooler.dense, H, H);
  if (head_) {
    for (const HeadDense<T>& d : head_->dense_layers()) add(*d.params, d.out, d.in);
  }
  return all;
}

template <typename T>
void RoFormer<T>::set_precision(ops::Precision precision) {
  if (precision == ops::Precision::int8) throw std::invalid_argument("set_precision: training runs in f32 or bf16");
  if constexpr (!std::is_same_v<T, float>) {
    if (precision != ops::Precision::f32) throw std::logic_error("set_precision: bf16 training is for fp32 models");
  } else if (precision == ops::Precision::bf16 && !ops::bf16_is_native()) {
    throw std::invalid_argument("bf16 training needs a CPU with AVX512-BF16 or AMX; oneDNN found " +
                                ops::cpu_isa_name());
  }
  precision_ = precision;
  use_bf16_weights(false);
}

template <typename T>
void RoFormer<T>::use_bf16_weights(bool on) {
  if (!on && !bf16_training_) return;  // fp32 forwards after fp32 ones: nothing bound
  bf16_training_ = on;
  std::vector<LinearLayer> layers = linear_layers();
  LinearParams<T> decoder = p.head.decoder();  // the word embeddings, (V, E or H)
  decoder.w16 = nullptr;
  const int64_t V = cfg_.vocab_size, decoder_in = p.head.dense.w ? cfg_.embedding_size : cfg_.hidden_size;
  if (has_mlm_head_ && decoder.w) layers.push_back({&decoder, V, decoder_in});
  for (LinearLayer& l : layers) l.params->w16 = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (on) {  // the layers' weights end to end in bf16_
      int64_t total = 0;
      for (const LinearLayer& l : layers) total += l.out * l.in;
      bf16_.resize(static_cast<size_t>(total));
      int64_t at = 0;
      for (LinearLayer& l : layers) {
        l.params->w16 = bf16_.data() + at;
        ops::round_to_bf16(bf16_.data() + at, l.params->w, l.out * l.in);
        at += l.out * l.in;
      }
    }
  }
  p.head.decoder_w16 = decoder.w16;
}

template <typename T>
void RoFormer<T>::unpack() {
  auto clear = [](LinearParams<T>& l) { l.packed = nullptr; };
  clear(p.emb.project);
  for (LayerParams<T>& layer : p.layers) {
    for (AttentionParams<T>* attn : {&layer.attn, &layer.cross}) {
      for (LinearParams<T>* l : {&attn->q, &attn->k, &attn->v, &attn->out}) clear(*l);
      attn->qkv = nullptr;
    }
    clear(layer.ffn.in);
    clear(layer.ffn.out);
  }
  clear(p.head.dense);
  p.head.decoder_packed = nullptr;
  packed_.clear();
}

template <typename T>
size_t RoFormer<T>::packed_bytes() const {
  size_t bytes = 0;
  for (const auto& l : packed_) bytes += l->packed_bytes();
  return bytes;
}

template <typename T>
void RoFormer<T>::require_unpacked(const char* what) const {
  if (packed()) throw std::logic_error(std::string(what) + ": a model packed for inference has no backward");
}

template <typename T>
void RoFormer<T>::set_keep(Keep keep) {
  keep_ = keep;
}

template <typename T>
void RoFormer<T>::allocate_grads() {
  if (view_ || grads.size() == params.size()) return;
  grads.assign(params.size(), T(0));
  g = bind_params(cfg_, layout_, grads.data());
  bind_head();
}


template <typename T>
const T* RoFormer<T>::embedding_output() const {
  const Activations& a = *act_;
  if (a.emb.chunk_rows > 0 && a.N > a.emb.chunk_rows) {  // normed holds the last pass's rows only
    throw std::logic_error("embedding_output: this forward ran its embeddings in passes (Keep::outputs over more "
                           "than inference_rows() rows)");
  }
  return a.emb.normed.data();
}
template <typename T>
const T* RoFormer<T>::hidden_state(int64_t l) const {
  Activations& a = *act_;
  const int64_t L = cfg_.num_hidden_layers;
  if (l < 0 || l > L) throw std::out_of_range("hidden_state: layer " + std::to_string(l) + " of " + std::to_string(L));
  if (a.keep == Keep::outputs && l != L) throw std::logic_error("hidden_state: only the last layer is kept (Keep::outputs)");
  return a.input_of(l).data();
}
template <typename T>
const T* RoFormer<T>::attention(int64_t l) const {
  if (act_->keep != Keep::all) throw std::logic_error("attention: attention maps are kept only with Keep::all");
  const auto& att = act_->layers.at(l).attn.att;
  return att.empty() ? nullptr : att.data();
}
template <typename T>
const T* RoFormer<T>::logits() const {
  return has_mlm_head_ && !act_->logits.empty() ? act_->logits.data() : nullptr;
}
template <typename T>
const T* RoFormer<T>::pooler_output() const {
  return act_->pooler.out.empty() ? nullptr : act_->pooler.out.data();
}
template <typename T>
const T* RoFormer<T>::head_logits() const {
  return act_->head_logits.empty() ? nullptr : act_->head_logits.data();
}
template <typename T>
int64_t RoFormer<T>::counted() const {
  return act_->counted;
}
template class RoFormer<float>;
template class RoFormer<double>;

constexpr base::EnumName<Quantize> kQuantizeNames[] = {
    {Quantize::automatic, "auto"}, {Quantize::none, "none"}, {Quantize::int8, "int8"}, {Quantize::bf16, "bf16"}};

const char* quantize_name(Quantize q) { return base::enum_name(kQuantizeNames, q); }

Quantize parse_quantize(const std::string& name) { return base::parse_enum(kQuantizeNames, name, "quantize"); }

constexpr base::EnumName<Gemm> kGemmNames[] = {{Gemm::automatic, "auto"}, {Gemm::packed, "packed"}, {Gemm::blas, "blas"}};

const char* gemm_name(Gemm g) { return base::enum_name(kGemmNames, g); }

Gemm parse_gemm(const std::string& name) { return base::parse_enum(kGemmNames, name, "gemm"); }

constexpr base::EnumName<CacheType> kCacheTypeNames[] = {{CacheType::f32, "fp32"}, {CacheType::bf16, "bf16"}};

const char* cache_type_name(CacheType t) { return base::enum_name(kCacheTypeNames, t); }

CacheType parse_cache_type(const std::string& name) { return base::parse_enum(kCacheTypeNames, name, "key/value cache type"); }

void check_linear_options(const LinearOptions& o) {
  if (o.quantize == Quantize::bf16 && !ops::bf16_is_native()) {
    throw io::Error("--quantize bf16: this CPU has no native bf16 dot products (AVX512-BF16 or AMX; oneDNN finds " +
                    ops::cpu_isa_name() + "); use int8 or none");
  }
}

void prepare_for_inference(RoFormer<float>& m, const LinearOptions& o, bool int8_checkpoint, bool release_arena) {
  check_linear_options(o);
  m.set_kv_cache(o.kv_cache);
  if (o.quantize == Quantize::int8 || (o.quantize == Quantize::automatic && int8_checkpoint)) {
    m.pack(ops::Precision::int8, release_arena);
  } else if (o.quantize == Quantize::bf16) {
    m.pack(ops::Precision::bf16, release_arena);
  } else if (o.gemm == Gemm::packed || (o.gemm == Gemm::automatic && ops::packed_f32_is_native())) {
    m.pack(ops::Precision::f32, release_arena);
  }
}

}  // namespace model
