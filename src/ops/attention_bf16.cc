// Bf16AttentionProducts on oneDNN's matmul. Operands are rounded to bf16 (nearest even) by
// bf16_from_f32; the products accumulate and are written in fp32. Primitives are onednn_matmul's,
// kept per thread (a forward at one shape reuses two).
#include "attention_bf16.h"

#include "onednn.h"
#include "vmath.h"

namespace ops {

using dnnl::memory;
using dt = memory::data_type;

void Bf16AttentionProducts::load_head(const float* k, const float* v, int64_t Tk, int64_t C, int64_t D) {
  D_ = D;
  k_.resize(Tk * D);
  v_.resize(Tk * D);
  for (int64_t j = 0; j < Tk; ++j) {
    bf16_from_f32(k_.data() + j * D, k + j * C, D);
    bf16_from_f32(v_.data() + j * D, v + j * C, D);
  }
}

void Bf16AttentionProducts::scores(float* a, int64_t Tn, const float* q, int64_t C, int64_t rows, int64_t E,
                                   float scale) {
  const int64_t D = D_;
  q_.resize(rows * D);
  for (int64_t r = 0; r < rows; ++r) bf16_from_f32(q_.data() + r * D, q + r * C, D, scale);
  // kᵀ as oneDNN's (K, N) = (D, E) weights: the (E, D) row-major keys read column by column.
  const memory::desc src({rows, D}, dt::bf16, memory::dims{D, 1}), weights({D, E}, dt::bf16, memory::dims{1, D});
  const memory::desc dst({rows, E}, dt::f32, memory::dims{Tn, 1});
  onednn_matmul(src, q_.data(), weights, k_.data(), nullptr, dst, a, false);
}

void Bf16AttentionProducts::mix(float* out, int64_t C, const float* p, int64_t Tn, int64_t rows, int64_t E) {
  const int64_t D = D_;
  p_.resize(rows * E);
  for (int64_t r = 0; r < rows; ++r) bf16_from_f32(p_.data() + r * E, p + r * Tn, E);
  const memory::desc src({rows, E}, dt::bf16, memory::dims{E, 1}), weights({E, D}, dt::bf16, memory::dims{D, 1});
  const memory::desc dst({rows, D}, dt::f32, memory::dims{C, 1});
  onednn_matmul(src, p_.data(), weights, v_.data(), nullptr, dst, out, false);
}

}  // namespace ops
