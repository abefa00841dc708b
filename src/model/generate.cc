// KV-cache decoding and sampling (see generate.h). Shapes: n new tokens, H hidden, E embedding,
// I intermediate, V vocabulary, P = max_position_embeddings, heads of D.
#include "generate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "base/memory.h"

namespace model {

namespace {

// f on each store of a self-attention cache: k and v, or k16 and v16 for a bf16 cache.
template <typename F>
void each_store(KVCache<float>& kv, F&& f) {
  if (kv.bf16) {
    f(kv.k16), f(kv.v16);
  } else {
    f(kv.k), f(kv.v);
  }
}

// A self-attention cache row is `runs` runs of capacity × width values: an fp32 cache one run of
// positions H wide, a bf16 cache (head-major, KVCache::bf16) one run per head of positions D wide.
struct CacheRow {
  int64_t runs, width;
};
CacheRow cache_row(const KVCache<float>& kv, const RoFormerConfig& c) {
  return kv.bf16 ? CacheRow{c.num_attention_heads, c.head_dim()} : CacheRow{1, c.hidden_size};
}

// Layer l's Bf16Handoff in a feed of N tokens: where the layers read bf16 (a model packed in bf16), each
// writes the next one's input in bf16 as well. One LayerActs serves every layer, so the next layer's x16
// is the buffer this layer's attention has read already.
Bf16Handoff layer_handoff(const RoFormer<float>& m, LayerActs<float>& a, int64_t l, int64_t N) {
  const RoFormerConfig& c = m.config();
  uint16_t* out16 = l + 1 < c.num_hidden_layers
                        ? bf16_input_buffer(a.attn.x16, m.p.layers[l + 1].attn.input_dense(), N * c.hidden_size)
                        : nullptr;
  // layer 0's input, the embeddings', is rounded where it is read
  return {out16, l > 0 && m.p.layers[l].attn.input_dense().reads_bf16()};
}

}  // namespace

// The decoder's state: the model's fixed pieces, the caches and the activations of one feed.
struct Generator::State {
  std::unique_ptr<LayerStatics<float>> statics;  // RoPE plan (dynamic NTK: at the capacity), FAVOR+
  std::vector<KVCache<float>> cache;         // L
  std::vector<KVCache<float>> cross;         // L: cross-attention keys and values, (batch, Tk, H) each
  std::vector<int64_t> cross_mask;           // (batch, Tk)
  std::vector<int64_t> cross_len;            // (batch) real keys of each row's memory, a prefix (empty: read the mask)
  std::vector<int64_t> memory_id;            // (batch) which set_row_memory call each row's memory came from
  int64_t memories = 0;                      // set_row_memory calls
  std::vector<int64_t> memory_row;           // (batch) the source whose keys and values each row holds
  std::vector<int64_t> segment;              // (batch, capacity) cumsum of token types (UniLM)
  std::vector<int64_t> row_limit;            // (batch, n) of the current feed
  EmbeddingActs<float> emb;
  LayerActs<float> layer;                    // shared by every layer
  MlmHeadActs<float> head;
  std::vector<float> x, last, logits;        // (batch·n, H), (batch, H), (batch, V)
};

Generator::Generator(const RoFormer<float>& m, int64_t capacity, int64_t batch)
    : m_(m), st_(std::make_unique<State>()), batch_(batch),
      capacity_(capacity > 0 ? capacity : m.config().max_position_embeddings) {
  const auto& c = m.config();
  if (!c.is_decoder) throw std::invalid_argument("generation needs a causal LM (is_decoder: true in config.json)");
  if (batch < 1) throw std::invalid_argument("generation needs a batch of at least one row");
  if (capacity_ > c.max_position_embeddings && c.position_encoding == PositionEncoding::learned) {
    throw std::invalid_argument("a context of " + std::to_string(capacity_) + " tokens exceeds the " +
                                std::to_string(c.max_position_embeddings) + " learned positions");
  }
  if (c.attention_type != AttentionType::softmax && batch != 1) {
    throw std::invalid_argument("linear attention decodes one row at a time");
  }
  check_cache_fits(batch);
  st_->statics = std::make_unique<LayerStatics<float>>(c);
  st_->statics->set_length(capacity_);  // dynamic NTK: fixed for the whole generation, so cached keys stay valid
  // Inference: a long prompt's feed runs its row-wise parts in passes of the model's inference rows.
  st_->emb.chunk_rows = st_->layer.attn.chunk_rows = st_->layer.cross.chunk_rows = st_->layer.ffn.chunk_rows =
      m.inference_rows();
  reset();
}

Generator::~Generator() = default;

// Keys and values of every layer, batch × capacity × H fp32 or bf16 values each: refused when they
// cannot fit in this machine's memory, instead of failing in the allocation.
void Generator::check_cache_fits(int64_t batch) const {
  const auto& c = m_.config();
  const double element = bf16_cache() ? 2.0 : 4.0;
  const double cache_bytes = 2.0 * element * static_cast<double>(c.num_hidden_layers) *
                             static_cast<double>(batch) * static_cast<double>(capacity_) * static_cast<double>(c.hidden_size);
  const double memory = base::machine_memory_bytes();
  if (memory > 0 && cache_bytes > memory) {
    throw std::length_error("a key/value cache of " + std::to_string(capacity_) + " tokens x " + std::to_string(batch) +
                            " rows needs " + std::to_string(static_cast<int64_t>(cache_bytes / 1073741824.0)) +
                            " GiB, more than this machine's memory (a smaller context: max_position_embeddings, "
                            "fewer tokens)");
  }
}

bool Generator::bf16_cache() const {
  return m_.kv_cache() == CacheType::bf16 && m_.config().attention_type == AttentionType::softmax;
}

void Generator::reserve(int64_t capacity) {
  if (capacity <= capacity_) return;
  const auto& c = m_.config();
  if (capacity > c.max_position_embeddings && c.position_encoding == PositionEncoding::learned) {
    throw std::invalid_argument("a context of " + std::to_string(capacity) + " tokens exceeds the " +
                                std::to_string(c.max_position_embeddings) + " learned positions");
  }
  const int64_t old = capacity_;
  capacity_ = capacity;
  try {
    check_cache_fits(batch_);
  } catch (...) {
    capacity_ = old;
    throw;
  }
  auto restride = [&](auto& v, int64_t runs, int64_t width) {  // (runs, old·width) → (runs, capacity·width)
    auto was = std::move(v);
    v.assign(runs * capacity * width, 0);
    for (int64_t b = 0; b < runs; ++b) std::copy_n(was.begin() + b * old * width, old * width, v.begin() + b * capacity * width);
  };
  for (auto& kv : st_->cache) {
    const CacheRow row = cache_row(kv, c);
    each_store(kv, [&](auto& x) { restride(x, batch_ * row.runs, row.width); });
    kv.capacity = capacity;
  }
  restride(st_->segment, batch_, 1);
}

void Generator::reset() {
  const auto& c = m_.config();
  pos_ = 0;
  row_pos_.clear();
  st_->cache.assign(c.num_hidden_layers, KVCache<float>{});
  for (auto& kv : st_->cache) {
    kv.B = batch_, kv.capacity = capacity_, kv.bf16 = bf16_cache();
    each_store(kv, [&](auto& x) { x.assign(batch_ * capacity_ * c.hidden_size, 0); });
    if (c.attention_type != AttentionType::softmax) kv.linear = ops::linear_attention_state<float>(linear_attention_shape(c, 1, 1, 0));
  }
  st_->segment.assign(batch_ * capacity_, 0);
}

void Generator::reorder(const std::vector<int64_t>& rows) {
  const int64_t R = static_cast<int64_t>(rows.size());  // the new batch
  if (R < 1) throw std::invalid_argument("reorder: at least one row");
  if (!row_pos_.empty()) throw std::logic_error("reorder: the rows decode at positions of their own (feed_rows)");
  for (int64_t r : rows) {
    if (r < 0 || r >= batch_) throw std::out_of_range("reorder: row " + std::to_string(r) + " of " + std::to_string(batch_));
  }
  const auto& c = m_.config();
  if (c.attention_type != AttentionType::softmax && R != 1) throw std::invalid_argument("linear attention decodes one row at a time");
  if (R > batch_) check_cache_fits(R);
  const int64_t H = c.hidden_size;
  auto gather = [&](auto& v, int64_t width) {  // row b of v (R, width) ← row rows[b] of v (batch, width)
    auto old = std::move(v);
    v.resize(R * width);
    for (int64_t b = 0; b < R; ++b) std::copy_n(old.begin() + rows[b] * width, width, v.begin() + b * width);
  };
  for (auto& kv : st_->cache) {
    each_store(kv, [&](auto& x) { gather(x, capacity_ * H); });
    kv.B = R;
  }
  gather(st_->segment, capacity_);
  batch_ = R;
  // Cross-attention rows: copied only where a row now continues another source's row.
  const int64_t Tk = st_->cross.empty() ? 0 : st_->cross[0].length;
  if (Tk == 0) return;
  const std::vector<int64_t> held = st_->memory_row;
  std::vector<int64_t> wanted(R);
  for (int64_t b = 0; b < R; ++b) wanted[b] = held[rows[b]];
  if (wanted == held) return;
  for (auto& kv : st_->cross) {
    gather(kv.k, Tk * H);
    gather(kv.v, Tk * H);
    kv.B = R;
  }
  gather(st_->cross_mask, Tk);
  if (!st_->cross_len.empty()) gather(st_->cross_len, 1);
  st_->memory_row = wanted;
}

void Generator::set_memory(const float* memory, const int64_t* mask, int64_t sources, int64_t Tk) {
  const auto& c = m_.config();
  if (!c.add_cross_attention) throw std::invalid_argument("set_memory: this decoder has no cross-attention");
  if (sources < 1 || Tk < 1 || batch_ % sources != 0) {
    throw std::invalid_argument("set_memory: the batch must be a whole number of rows per source");
  }
  const int64_t H = c.hidden_size, copies = batch_ / sources;
  st_->cross.assign(c.num_hidden_layers, KVCache<float>{});
  std::vector<float> k, v;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    cross_attention_memory(k, v, m_.p.layers[l].cross, st_->statics->cross_context(l, AttentionCall{}), memory, sources,
                           Tk);  // once per source
    KVCache<float>& kv = st_->cross[l];
    kv.B = batch_, kv.capacity = kv.length = Tk;
    kv.k.resize(batch_ * Tk * H);
    kv.v.resize(batch_ * Tk * H);
    for (int64_t b = 0; b < batch_; ++b) {  // shared by the source's rows
      std::copy_n(k.begin() + (b / copies) * Tk * H, Tk * H, kv.k.begin() + b * Tk * H);
      std::copy_n(v.begin() + (b / copies) * Tk * H, Tk * H, kv.v.begin() + b * Tk * H);
    }
  }
  st_->cross_mask.assign(batch_ * Tk, 1);
  st_->memory_row.resize(batch_);
  for (int64_t b = 0; b < batch_; ++b) {
    st_->memory_row[b] = b / copies;
    if (mask) std::copy_n(mask + (b / copies) * Tk, Tk, st_->cross_mask.begin() + b * Tk);
  }
  // Right-padded sources (every mask row ones, then zeros): each row reads its first keys alone, in
  // the decoding kernel feed_rows' rows use too; any other mask is applied as a mask.
  st_->cross_len.assign(batch_, Tk);
  for (int64_t b = 0; b < batch_ && mask; ++b) {
    const int64_t* row = st_->cross_mask.data() + b * Tk;
    const int64_t n = std::find(row, row + Tk, 0) - row;
    if (n == 0 || std::find(row + n, row + Tk, 1) != row + Tk) {
      st_->cross_len.clear();
      break;
    }
    st_->cross_len[b] = n;
  }
}

void Generator::set_row_memory(const std::vector<int64_t>& rows, const float* memory, int64_t Tk) {
  const auto& c = m_.config();
  State& s = *st_;
  if (!c.add_cross_attention) throw std::invalid_argument("set_row_memory: this decoder has no cross-attention");
  if (rows.empty() || Tk < 1 || !memory) throw std::invalid_argument("set_row_memory: rows and a memory of at least one token");
  for (int64_t r : rows) {
    if (r < 0 || r >= batch_) throw std::out_of_range("set_row_memory: row " + std::to_string(r) + " of " + std::to_string(batch_));
  }
  if (row_pos_.empty()) row_pos_.assign(batch_, pos_);
  const int64_t H = c.hidden_size, L = c.num_hidden_layers;
  if (s.cross.empty()) s.cross.assign(L, KVCache<float>{});
  if (s.cross_len.size() != static_cast<size_t>(batch_)) s.cross_len.assign(batch_, 0);
  if (s.memory_id.size() != static_cast<size_t>(batch_)) s.memory_id.assign(batch_, -1);
  const int64_t old_cap = s.cross[0].capacity;
  if (Tk > old_cap || s.cross[0].B != batch_) {  // every row's memory moves to the longer stride
    for (auto& kv : s.cross) {
      std::vector<float> k(batch_ * Tk * H, 0.0f), v(batch_ * Tk * H, 0.0f);
      for (int64_t b = 0; b < batch_ && kv.B == batch_; ++b) {
        std::copy_n(kv.k.begin() + b * old_cap * H, s.cross_len[b] * H, k.begin() + b * Tk * H);
        std::copy_n(kv.v.begin() + b * old_cap * H, s.cross_len[b] * H, v.begin() + b * Tk * H);
      }
      kv.k = std::move(k), kv.v = std::move(v);
      kv.B = batch_, kv.capacity = kv.length = Tk;
    }
    s.cross_mask.clear();  // the lengths say which keys are real
  }
  const int64_t cap = s.cross[0].capacity;
  std::vector<float> k, v;
  for (int64_t l = 0; l < L; ++l) {  // once per source
    cross_attention_memory(k, v, m_.p.layers[l].cross, s.statics->cross_context(l, AttentionCall{}), memory, 1, Tk);
    for (int64_t r : rows) {
      std::copy_n(k.begin(), Tk * H, s.cross[l].k.begin() + r * cap * H);
      std::copy_n(v.begin(), Tk * H, s.cross[l].v.begin() + r * cap * H);
    }
  }
  for (int64_t r : rows) s.cross_len[r] = Tk, s.memory_id[r] = s.memories;
  ++s.memories;
}

void Generator::copy_rows(const std::vector<int64_t>& rows, const std::vector<int64_t>& from) {
  State& s = *st_;
  if (rows.size() != from.size()) throw std::invalid_argument("copy_rows: one source row for each row");
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= batch_ || from[i] < 0 || from[i] >= batch_) {
      throw std::out_of_range("copy_rows: rows of " + std::to_string(batch_));
    }
  }
  if (row_pos_.empty()) row_pos_.assign(batch_, pos_);
  const int64_t H = m_.config().hidden_size;
  // Every source row's state before any is written (rows and from may overlap): the first
  // length_of(row) positions of each of its runs.
  auto copy = [&](auto& x, int64_t stride, CacheRow shape, auto length_of) {
    std::vector<std::remove_reference_t<decltype(x)>> saved(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      if (from[i] == rows[i]) continue;
      const int64_t n = length_of(from[i]) * shape.width;
      for (int64_t run = 0; run < shape.runs; ++run) {
        const auto at = x.begin() + ((from[i] * shape.runs + run) * stride) * shape.width;
        saved[i].insert(saved[i].end(), at, at + n);
      }
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      if (from[i] == rows[i]) continue;
      const int64_t n = static_cast<int64_t>(saved[i].size()) / shape.runs;
      for (int64_t run = 0; run < shape.runs; ++run) {
        std::copy_n(saved[i].begin() + run * n, n, x.begin() + ((rows[i] * shape.runs + run) * stride) * shape.width);
      }
    }
  };
  for (auto& kv : s.cache) {
    each_store(kv, [&](auto& x) { copy(x, capacity_, cache_row(kv, m_.config()), [&](int64_t r) { return row_pos_[r]; }); });
  }
  std::vector<char> other_memory(rows.size(), 0);  // a row that continues another source's row
  bool any = false;
  for (size_t i = 0; i < rows.size() && !s.memory_id.empty(); ++i) {
    other_memory[i] = s.memory_id[rows[i]] != s.memory_id[from[i]];
    any = any || other_memory[i];
  }
  if (any) {
    std::vector<int64_t> to, src;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (other_memory[i]) to.push_back(rows[i]), src.push_back(from[i]);
    }
    for (auto& kv : s.cross) {
      for (std::vector<float>* x : {&kv.k, &kv.v}) {
        std::vector<std::vector<float>> saved(to.size());
        for (size_t i = 0; i < to.size(); ++i) {
          const auto at = x->begin() + src[i] * kv.capacity * H;
          saved[i].assign(at, at + s.cross_len[src[i]] * H);
        }
        for (size_t i = 0; i < to.size(); ++i) std::copy(saved[i].begin(), saved[i].end(), x->begin() + to[i] * kv.capacity * H);
      }
    }
  }
  std::vector<int64_t> pos(rows.size()), len(rows.size()), id(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    pos[i] = row_pos_[from[i]];
    if (!s.cross_len.empty()) len[i] = s.cross_len[from[i]];
    if (!s.memory_id.empty()) id[i] = s.memory_id[from[i]];
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    row_pos_[rows[i]] = pos[i];
    if (!s.cross_len.empty()) s.cross_len[rows[i]] = len[i];
    if (!s.memory_id.empty()) s.memory_id[rows[i]] = id[i];
  }
}

const std::vector<float>& Generator::feed(const std::vector<int64_t>& ids, const std::vector<int64_t>& types) {
  const auto& c = m_.config();
  State& s = *st_;
  const int64_t B = batch_, n = static_cast<int64_t>(ids.size()) / B, H = c.hidden_size, N = B * n;
  if (static_cast<int64_t>(ids.size()) != N || (!types.empty() && types.size() != ids.size())) {
    throw std::invalid_argument("feed: ids (and types) must be (batch, n)");
  }
  if (n == 0) return s.logits;
  if (!row_pos_.empty()) throw std::logic_error("feed: the rows decode at positions of their own (feed_rows)");
  if (c.add_cross_attention && s.cross.empty()) throw std::logic_error("feed: a decoder with cross-attention needs set_memory");
  if (pos_ + n > capacity_) {
    throw std::length_error("context of " + std::to_string(pos_ + n) + " tokens exceeds the generator's capacity " +
                            std::to_string(capacity_));
  }
  s.x.resize(N * H);
  embeddings_forward(c, s.x.data(), s.emb, m_.p.emb, ids.data(), types.empty() ? nullptr : types.data(), B, n, pos_,
                     Dropout{});
  AttentionCall call;
  call.saved = ops::AttentionSaved::none;  // decoding has no backward
  // Right-padded memories: each row reads its first cross_len keys (set_memory); else the mask.
  call.memory_mask = s.cross_mask.empty() || !s.cross_len.empty() ? nullptr : s.cross_mask.data();
  // Decoding keeps fp32 attention products for every model, also where the forward pass of a bf16 or
  // int8 model takes them in bf16 (RoFormer::attention_call), so that cached decoding gives the same
  // numbers on every CPU.
  call.bf16_products = false;
  if (c.unilm_mask()) {  // the new tokens' segments extend each row's
    s.row_limit.resize(N);
    unilm_row_limits(s.row_limit.data(), s.segment.data(), capacity_, types.empty() ? nullptr : types.data(), B, n,
                     pos_);
    call.row_limit = s.row_limit.data();
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {  // x (N, H) in place, over the caches
    const CrossMemory<float> memory{nullptr, s.cross.empty() ? 0 : s.cross[l].length,
                                    s.cross.empty() ? nullptr : &s.cross[l]};
    if (!s.cross.empty() && !s.cross_len.empty()) s.cross[l].lengths = s.cross_len.data();
    layer_forward(s.x.data(), s.layer, m_.p.layers[l], s.statics->self_context(l, call),
                  s.statics->cross_context(l, call), s.x.data(), B, n, pos_, &s.cache[l], memory,
                  layer_handoff(m_, s.layer, l, N));
    if (!s.cross.empty()) s.cross[l].lengths = nullptr;
  }
  pos_ += n;
  s.last.resize(B * H);  // (B, H) each row's last token
  for (int64_t b = 0; b < B; ++b) std::copy_n(s.x.data() + ((b + 1) * n - 1) * H, H, s.last.data() + b * H);
  s.logits.resize(B * c.vocab_size);
  mlm_head_forward(c, s.logits.data(), s.head, m_.p.head, s.last.data(), B);
  return s.logits;
}

int64_t Generator::position(int64_t row) const {
  if (row < 0 || row >= batch_) throw std::out_of_range("position: row " + std::to_string(row) + " of " + std::to_string(batch_));
  return row_pos_.empty() ? pos_ : row_pos_[row];
}

void Generator::release(int64_t row) {
  if (row < 0 || row >= batch_) throw std::out_of_range("release: row " + std::to_string(row) + " of " + std::to_string(batch_));
  if (row_pos_.empty()) row_pos_.assign(batch_, pos_);
  row_pos_[row] = 0;  // its cached keys are overwritten before they are read again
  if (!st_->cross_len.empty() && !st_->memory_id.empty()) st_->cross_len[row] = 0, st_->memory_id[row] = -1;
}

const std::vector<float>& Generator::feed_rows(const std::vector<int64_t>& rows, const std::vector<int64_t>& ids) {
  if (rows.empty() || ids.empty() || ids.size() % rows.size() != 0) {
    throw std::invalid_argument("feed_rows: ids must be (rows, n), n >= 1");
  }
  return feed_rows(rows, ids, std::vector<int64_t>(rows.size(), static_cast<int64_t>(ids.size() / rows.size())));
}

const std::vector<float>& Generator::feed_rows(const std::vector<int64_t>& rows, const std::vector<int64_t>& ids,
                                               const std::vector<int64_t>& counts) {
  const auto& c = m_.config();
  State& s = *st_;
  const int64_t R = static_cast<int64_t>(rows.size()), H = c.hidden_size;
  if (R < 1 || counts.size() != rows.size()) throw std::invalid_argument("feed_rows: a token count for each row");
  std::vector<int64_t> offset(R + 1, 0);  // row r's tokens are ids[offset[r], offset[r + 1])
  for (int64_t r = 0; r < R; ++r) {
    if (counts[r] < 1) throw std::invalid_argument("feed_rows: every row takes at least one token");
    offset[r + 1] = offset[r] + counts[r];
  }
  const int64_t N = offset[R];
  if (static_cast<int64_t>(ids.size()) != N) throw std::invalid_argument("feed_rows: ids must hold the rows' counts of tokens");
  const bool uniform = std::all_of(counts.begin(), counts.end(), [&](int64_t n) { return n == counts[0]; });
  if (c.attention_type != AttentionType::softmax || c.unilm_mask()) {
    throw std::invalid_argument("feed_rows: step-level batching is for softmax attention without UniLM's mask");
  }
  if (!uniform && c.add_cross_attention) throw std::invalid_argument("feed_rows: rows of different counts need self-attention only");
  if (row_pos_.empty()) row_pos_.assign(batch_, pos_);
  std::vector<char> seen(batch_, 0);
  for (int64_t i = 0; i < R; ++i) {
    const int64_t r = rows[i];
    if (r < 0 || r >= batch_ || seen[r]) throw std::out_of_range("feed_rows: row " + std::to_string(r) + " is not a distinct row of " + std::to_string(batch_));
    seen[r] = 1;
    if (c.add_cross_attention && (s.cross_len.size() != static_cast<size_t>(batch_) || s.cross_len[r] == 0)) {
      throw std::logic_error("feed_rows: row " + std::to_string(r) + " has no memory (set_row_memory)");
    }
    if (row_pos_[r] + counts[i] > capacity_) {
      throw std::length_error("context of " + std::to_string(row_pos_[r] + counts[i]) + " tokens exceeds the generator's capacity " +
                              std::to_string(capacity_));
    }
  }
  s.x.resize(N * H);
  for (int64_t r = 0; r < R; ++r) {  // each row's tokens at its own positions
    embeddings_forward(c, s.x.data() + offset[r] * H, s.emb, m_.p.emb, ids.data() + offset[r], nullptr, 1, counts[r],
                       row_pos_[rows[r]], Dropout{});
  }
  // Rows of one count: (R, n) as they are. Rows of different counts: one call row of their N tokens,
  // which self-attention splits at KVCache::starts.
  const int64_t B = uniform ? R : 1, T = uniform ? counts[0] : N;
  AttentionCall call;
  call.saved = ops::AttentionSaved::none;
  call.bf16_products = false;  // as feed: fp32 attention products on every CPU
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    KVCache<float>& kv = s.cache[l];
    kv.rows = rows.data(), kv.positions = row_pos_.data();
    if (!uniform) kv.starts = offset.data(), kv.count_rows = R;
    CrossMemory<float> memory{};
    if (c.add_cross_attention) {  // each row over its own memory's keys
      KVCache<float>& cross = s.cross[l];
      cross.rows = rows.data(), cross.lengths = s.cross_len.data();
      memory = {nullptr, cross.capacity, &cross};
    }
    layer_forward(s.x.data(), s.layer, m_.p.layers[l], s.statics->self_context(l, call), s.statics->cross_context(l, call),
                  s.x.data(), B, T, 0, &kv, memory, layer_handoff(m_, s.layer, l, N));
    kv.rows = nullptr, kv.positions = nullptr, kv.starts = nullptr, kv.count_rows = 0;
    if (c.add_cross_attention) s.cross[l].rows = nullptr, s.cross[l].lengths = nullptr;
  }
  for (int64_t i = 0; i < R; ++i) row_pos_[rows[i]] += counts[i];
  s.last.resize(R * H);
  for (int64_t r = 0; r < R; ++r) std::copy_n(s.x.data() + (offset[r + 1] - 1) * H, H, s.last.data() + r * H);
  s.logits.resize(R * c.vocab_size);
  mlm_head_forward(c, s.logits.data(), s.head, m_.p.head, s.last.data(), R);
  return s.logits;
}

}  // namespace model
