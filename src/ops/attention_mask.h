// Which keys each query row of softmax attention sees (AttentionShape's causal mask, UniLM prefix
// limits and a (B, Tk) key padding mask), shared by attention_forward/backward (attention.cc) and the
// fused kernels (flash_attention.cc, flash_attention_bf16.cc). A row sees the keys of [0, lim) that the padding mask
// keeps; a row that sees none attends uniformly over all Tk keys, as Hugging Face's finfo.min mask
// gives. Internal to the ops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention.h"
#include "base/random.h"

namespace ops {

// Seed of the dropout mask of one (global batch row, head) probability block: element (t, j) of the
// block, query row t and key j of Tk, is kept iff base::Keep(seed, p) keeps t·Tk + j, whichever path
// (per block of rows or fused) applies it.
inline uint64_t dropout_block_seed(const AttentionShape& s, int64_t b, int64_t h) {
  return base::mix64(s.dropout_seed ^ base::mix64(static_cast<uint64_t>((s.dropout_row0 + b) * s.H + h)));
}

// Which keys row t of a batch sees: [0, lim) minus padded keys; none → uniform over all Tk.
struct RowKeys {
  int64_t lim;   // visible keys lie in [0, lim)
  bool uniform;  // no visible key at all
  int64_t extent(int64_t T) const { return uniform ? T : lim; }  // nonzero probabilities lie in [0, extent)
};

// Per batch: prefix counts of real keys (Tk + 1) and the end of the last real key.
struct KeyMask {
  KeyMask(const int64_t* mask, const AttentionShape& s)
      : T_(s.keys()), Tq_(s.T), q_start_(s.q_start), mask_(mask), row_limit_(s.row_limit) {
    const int64_t B = s.B, T = T_;
    if (!mask) return;
    prefix_.resize(B * (T + 1));
    end_.resize(B);
    for (int64_t b = 0; b < B; ++b) {
      int64_t* pre = prefix_.data() + b * (T + 1);
      pre[0] = 0;
      end_[b] = 0;
      for (int64_t j = 0; j < T; ++j) {
        pre[j + 1] = pre[j] + (mask[b * T + j] != 0);
        if (mask[b * T + j] != 0) end_[b] = j + 1;
      }
    }
  }
  RowKeys row(int64_t b, int64_t t, bool causal) const {
    int64_t lim = causal ? std::clamp<int64_t>(q_start_ + t + 1, 0, T_) : T_;
    if (row_limit_) lim = std::min(lim, std::clamp<int64_t>(row_limit_[b * Tq_ + t], 0, T_));
    if (lim == 0) return {0, true};  // no visible key: uniform, as HF's finfo.min mask gives
    if (!mask_) return {lim, false};
    lim = std::min(lim, end_[b]);
    return {lim, prefix_[b * (T_ + 1) + lim] == 0};
  }
  const int64_t* keys(int64_t b) const { return mask_ ? mask_ + b * T_ : nullptr; }
  // Real keys of batch b in [j0, j1).
  int64_t real_keys(int64_t b, int64_t j0, int64_t j1) const {
    if (!mask_) return j1 - j0;
    const int64_t* pre = prefix_.data() + b * (T_ + 1);
    return pre[j1] - pre[j0];
  }

 private:
  int64_t T_, Tq_, q_start_;  // keys, queries, key position of query 0
  const int64_t* mask_;
  const int64_t* row_limit_;
  std::vector<int64_t> prefix_, end_;
};

// The fused kernels' vectors of query rows [v0, v1) (of `vectors`, extent[v] the largest key limit of
// vector v's rows) that see some key of the tile starting at key j0 < the block's largest limit.
inline void tile_vectors(const int64_t* extent, int64_t vectors, int64_t j0, int64_t& v0, int64_t& v1) {
  v0 = 0, v1 = vectors;
  while (extent[v0] <= j0) ++v0;
  while (extent[v1 - 1] <= j0) --v1;
}

// The fused backwards' rows of one block: rows [r0, r0 + rows) of pair bh (of B·H), in R slots. Each
// slot's key limit (lim: −1 where the row sees no key, or past the block) and the forward's row
// statistics (B, H, T, 2) m and 1/l (0 where it sees none); extent[i / lanes] the largest limit over
// each vector of `lanes` slots (zeroed first). Returns the largest limit of all (0: no tile to visit).
inline int64_t backward_block_rows(const KeyMask& mask, const AttentionShape& s, const float* stats, int64_t bh,
                                   int64_t r0, int64_t rows, int64_t R, int64_t lanes, int32_t* lim, float* m,
                                   float* inv, int64_t* extent) {
  const int64_t b = bh / s.H;
  int64_t E = 0;
  std::fill(extent, extent + (R + lanes - 1) / lanes, 0);
  for (int64_t i = 0; i < R; ++i) {
    int64_t l = -1;
    float mi = 0, invi = 0;
    if (i < rows) {
      const RowKeys rk = mask.row(b, r0 + i, s.causal);
      if (!rk.uniform) {
        l = rk.lim;
        const float* st = stats + (bh * s.T + r0 + i) * 2;
        mi = st[0], invi = st[1];
      }
    }
    lim[i] = static_cast<int32_t>(l), m[i] = mi, inv[i] = invi;
    E = std::max(E, l);
    extent[i / lanes] = std::max(extent[i / lanes], l);
  }
  return E;
}

// Attention dropout as the fused kernels apply it to one (batch, head) block: element (t, j) kept iff
// keep(t·Tk + j), kept probabilities times `scale` = 1/(1 − p). Null `keep`: no dropout.
struct BlockDropout {
  const base::Keep* keep = nullptr;
  uint64_t Tk = 0;
  float scale = 1;
  float factor(int64_t t, int64_t j) const {  // what probability (t, j) is multiplied by
    return !keep || (*keep)(static_cast<uint64_t>(t) * Tk + static_cast<uint64_t>(j)) ? scale : 0.0f;
  }
};

// Pair bh's dropout mask into a fused kernel's work area w (its members keep, a base::Keep, and drop,
// pointing at it; drop.keep null where s has no dropout).
template <class Work>
void set_block_dropout(Work& w, const AttentionShape& s, int64_t bh) {
  w.drop = {};
  if (s.dropout_p <= 0) return;
  w.keep = base::Keep(dropout_block_seed(s, bh / s.H, bh % s.H), s.dropout_p);
  w.drop = {&w.keep, static_cast<uint64_t>(s.keys()), static_cast<float>(1.0 / (1.0 - s.dropout_p))};
}

// The output of a row t that sees no key under dropout: it attends uniformly over all Tk keys, so
// out (D) = Σ_j v_j · factor(t, j) / Tk (without dropout the fused kernels keep the head's mean).
inline void dropped_uniform_row(float* out, const float* vh, int64_t Tk, int64_t D, int64_t C, const BlockDropout& drop,
                                int64_t t) {
  std::fill(out, out + D, 0.0f);
  for (int64_t j = 0; j < Tk; ++j) {
    const float f = drop.factor(t, j);
    for (int64_t x = 0; f != 0 && x < D; ++x) out[x] += f * vh[j * C + x];
  }
  const float inv = 1.0f / static_cast<float>(Tk);
  for (int64_t x = 0; x < D; ++x) out[x] *= inv;
}

// Gradients of a row t that sees no key, as the fused backwards give them (in fp32, the way the
// per-block path does: the mask made the scores equal, but their gradient still reaches q and k): it
// attends uniformly over all Tk keys (p = 1/Tk, then dropout). g, o, q: the row's dO, output and query
// (D); kh, vh: its head's keys and values (rows C apart); dq (D) += its query's gradient; dK, dV (Tk
// rows, ld apart) += its share of the head's key and value gradients; row: D floats of scratch.
inline void uniform_row_grads(const float* g, const float* o, const float* q, float* dq, const float* kh,
                              const float* vh, int64_t Tk, int64_t D, int64_t C, float scale, float* dK, float* dV,
                              int64_t ld, float* row, const BlockDropout& drop, int64_t t) {
  const float p = 1.0f / static_cast<float>(Tk);
  double delta = 0;
  for (int64_t x = 0; x < D; ++x) delta += static_cast<double>(g[x]) * o[x];
  std::fill(row, row + D, 0.0f);
  for (int64_t j = 0; j < Tk; ++j) {
    const float f = drop.factor(t, j);
    double dp = 0;
    for (int64_t x = 0; f != 0 && x < D; ++x) dp += static_cast<double>(g[x]) * vh[j * C + x];
    const float ds = static_cast<float>(p * (dp * f - delta) * scale);
    float *dKj = dK + j * ld, *dVj = dV + j * ld;
    for (int64_t x = 0; x < D; ++x) {
      dVj[x] += p * f * g[x];
      dKj[x] += ds * q[x];
      row[x] += ds * kh[j * C + x];
    }
  }
  for (int64_t x = 0; x < D; ++x) dq[x] += row[x];
}

}  // namespace ops
