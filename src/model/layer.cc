// The RoFormer layer stack (see layer.h): the per-model attention state, UniLM's row limits and one
// layer's forward and backward, with the shapes of what each writes.
#include "layer.h"

#include <algorithm>

namespace model {

template <typename T>
LayerStatics<T>::LayerStatics(const RoFormerConfig& c) : c_(&c) {
  if (c.position_encoding == PositionEncoding::rope) {
    const rope_config rc = rope_settings(c);
    rope_ = std::make_unique<rope::Plan>(rc);
    rope_dynamic_ = rc.scaling.type == ROPE_SCALING_DYNAMIC_NTK;
  }
  if (c.attention_type == AttentionType::performer) {
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) favor_.push_back(performer_features<T>(c, l));
  }
}

template <typename T>
void LayerStatics<T>::set_length(int64_t length) {
  if (!rope_dynamic_ || length == rope_length_) return;
  rope_->set_seq_len(length);
  rope_length_ = length;
}

template <typename T>
AttentionContext<T> LayerStatics<T>::self_context(int64_t layer, const AttentionCall& call) const {
  AttentionContext<T> ctx;
  ctx.config = c_;
  ctx.rope = rope_.get();
  ctx.favor = favor_.empty() ? nullptr : favor_[layer].data();
  ctx.layer = layer;
  ctx.causal = c_->is_decoder && !c_->unilm_mask();
  ctx.key_mask = call.key_mask;
  ctx.row_limit = call.row_limit;
  ctx.dropout = call.dropout;
  ctx.saved = call.saved;
  ctx.bf16_products = call.bf16_products;
  return ctx;
}

template <typename T>
AttentionContext<T> LayerStatics<T>::cross_context(int64_t layer, const AttentionCall& call) const {
  AttentionContext<T> ctx;
  ctx.config = c_;
  ctx.rope = c_->rotate_cross_attention ? rope_.get() : nullptr;
  ctx.layer = c_->num_hidden_layers + layer;  // dropout sites no self-attention uses
  ctx.key_mask = call.memory_mask;
  ctx.dropout = call.dropout;
  ctx.saved = call.saved;
  ctx.bf16_products = call.bf16_products;
  return ctx;
}

void unilm_row_limits(int64_t* limit, int64_t* segment, int64_t stride, const int64_t* types, int64_t B, int64_t S,
                      int64_t start) {
  for (int64_t b = 0; b < B; ++b) {
    int64_t* seg = segment + b * stride;  // (start + S) segments of row b
    for (int64_t t = 0; t < S; ++t) {
      const int64_t before = start + t > 0 ? seg[start + t - 1] : 0;
      seg[start + t] = before + (types && types[b * S + t] != 0);
    }
    for (int64_t t = 0; t < S; ++t) {  // segments are non-decreasing: the keys at or below are a prefix
      limit[b * S + t] = std::upper_bound(seg, seg + start + S, seg[start + t]) - seg;
    }
  }
}

template <typename T>
void layer_forward(T* out, LayerActs<T>& a, const LayerParams<T>& p, const AttentionContext<T>& self,
                   const AttentionContext<T>& cross, const T* x, int64_t B, int64_t S, int64_t start,
                   KVCache<T>* cache, const CrossMemory<T>& memory, const Bf16Handoff& bf16) {
  const RoFormerConfig& c = *self.config;
  const int64_t N = B * S, H = c.hidden_size;
  grow_to(a.mid, N * H);
  // The feed-forward's input in bf16 (null: fp32 only), written by the sub-layer before it.
  uint16_t* ffn_in16 = bf16_input_buffer(a.ffn.x16, p.ffn.in, N * H);
  self_attention_forward(a.mid.data(), a.attn, p.attn, self, x, B, S, start, cache,
                         {c.add_cross_attention ? nullptr : ffn_in16, bf16.x16_written});  // mid (N, H)
  const T* ffn_in = a.mid.data();
  if (c.add_cross_attention) {  // crossed (N, H): queries from mid over the memory's keys and values
    grow_to(a.crossed, N * H);
    cross_attention_forward(a.crossed.data(), a.cross, p.cross, cross, a.mid.data(), memory.states, B, S, memory.Tk,
                            memory.cache, ffn_in16);
    ffn_in = a.crossed.data();
  }
  feed_forward_forward(c, out, a.ffn, p.ffn, ffn_in, N, self.layer, self.dropout,
                       {bf16.out16, ffn_in16 != nullptr});  // out (N, H)
}

template <typename T>
void layer_backward(T* dx, T* d_mid, T* dmemory, const LayerParams<T>& g, const T* dout, const LayerActs<T>& a,
                    const LayerParams<T>& p, const AttentionContext<T>& self, const AttentionContext<T>& cross,
                    const T* x, const CrossMemory<T>& memory, int64_t B, int64_t S, Scratch<T>& s) {
  const RoFormerConfig& c = *self.config;
  const int64_t N = B * S;
  if (c.add_cross_attention) {  // dout → d(crossed) in dx → d(mid) in d_mid
    feed_forward_backward(c, dx, g.ffn, dout, a.ffn, p.ffn, a.crossed.data(), N, self.layer, self.dropout, s);
    cross_attention_backward(d_mid, dmemory, g.cross, dx, a.cross, p.cross, cross, a.mid.data(), memory.states, B, S,
                             memory.Tk, s);
  } else {  // dout → d(mid) in d_mid
    feed_forward_backward(c, d_mid, g.ffn, dout, a.ffn, p.ffn, a.mid.data(), N, self.layer, self.dropout, s);
  }
  self_attention_backward(dx, g.attn, d_mid, a.attn, p.attn, self, x, B, S, s);  // dx (N, H)
}

template class LayerStatics<float>;
template class LayerStatics<double>;

#define ROFORMER_LAYER(T)                                                                                           \
  template void layer_forward<T>(T*, LayerActs<T>&, const LayerParams<T>&, const AttentionContext<T>&,             \
                                 const AttentionContext<T>&, const T*, int64_t, int64_t, int64_t, KVCache<T>*,      \
                                 const CrossMemory<T>&, const Bf16Handoff&);                                        \
  template void layer_backward<T>(T*, T*, T*, const LayerParams<T>&, const T*, const LayerActs<T>&,               \
                                  const LayerParams<T>&, const AttentionContext<T>&, const AttentionContext<T>&,   \
                                  const T*, const CrossMemory<T>&, int64_t, int64_t, Scratch<T>&);
ROFORMER_LAYER(float)
ROFORMER_LAYER(double)

}  // namespace model
