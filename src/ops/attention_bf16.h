// The two products of softmax attention with bf16 operands and fp32 accumulation (oneDNN matmul:
// brgemm with AVX512-BF16 dot products or AMX tiles), for attention_forward's inference path
// (AttentionShape::bf16_products). One object per thread and (batch, head): the head's keys and values
// are converted to bf16 once, then each block of query rows takes scores() and mix(). Internal to the ops.
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

 private:
  int64_t D_ = 0;
  std::vector<uint16_t> k_, v_;  // (Tk, D) bf16 of the current head
  std::vector<uint16_t> q_, p_;  // (rows, D) and (rows, E) bf16 of the current block
};

}  // namespace ops
