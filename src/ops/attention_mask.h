// Which keys each query row of softmax attention sees (AttentionShape's causal mask, UniLM prefix
// limits and a (B, Tk) key padding mask), shared by attention_forward/backward (attention.cc) and the
// fused inference forward (flash_attention.cc). A row sees the keys of [0, lim) that the padding mask
// keeps; a row that sees none attends uniformly over all Tk keys, as Hugging Face's finfo.min mask
// gives. Internal to the ops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention.h"

namespace ops {

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

}  // namespace ops
