// The products of softmax attention with bf16 operands and fp32 accumulation (oneDNN matmul: brgemm
// with AVX512-BF16 dot products or AMX tiles), for AttentionShape::bf16_products: the forward's two
// and the backward's four. One object per thread and (batch, head): the head's keys and values are
// converted to bf16 once, then each block of query rows takes scores() and mix(), or in the backward
// value_grads() and query_key_grads(). Internal to the ops.
#pragma once

#include <cstdint>
#include <vector>

namespace ops {

class Bf16AttentionProducts {
 public:
  // k, v: head h of key 0 of one batch row, rows C apart; keys [0, Tk) are converted (D each).
  void load_head(const float* k, const float* v, int64_t Tk, int64_t C, int64_t D);
  // a (rows, E), row stride Tn, written = scale · q (rows, D; row stride C) · kᵀ over keys [0, E).
  void scores(float* a, int64_t Tn, const float* q, int64_t C, int64_t rows, int64_t E, float scale);
  // out (rows, D), row stride C, written = p (rows, E; row stride Tn) · v over keys [0, E).
  void mix(float* out, int64_t C, const float* p, int64_t Tn, int64_t rows, int64_t E);
  // dv (E, D), row stride C, += pᵀ·dout, and dp (rows, E), row stride Tn, written = dout·vᵀ, for
  // p (rows, E; row stride Tn) and dout (rows, D; row stride C).
  void value_grads(float* dv, float* dp, int64_t Tn, const float* p, const float* dout, int64_t C, int64_t rows,
                   int64_t E);
  // dq (rows, D) += scale · ds·k and dk (E, D) += scale · dsᵀ·q, both of row stride C, for ds (rows, E;
  // row stride Tn) and q (rows, D; row stride C). ds is rounded after the scale, as scores() rounds q.
  void query_key_grads(float* dq, float* dk, const float* ds, int64_t Tn, const float* q, int64_t C, int64_t rows,
                       int64_t E, float scale);

 private:
  int64_t D_ = 0;
  std::vector<uint16_t> k_, v_;  // (Tk, D) bf16 of the current head
  std::vector<uint16_t> q_, p_;  // (rows, D) and (rows, E) bf16 of the current block
  std::vector<uint16_t> dout_;   // (rows, D) bf16: the backward's output gradient block
};

}  // namespace ops
