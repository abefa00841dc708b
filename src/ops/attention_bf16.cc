// Bf16AttentionProducts on oneDNN's matmul. Operands are rounded to bf16 (nearest even) by
// bf16_from_f32; the products accumulate and are written in fp32. Primitives are onednn_matmul's,
// kept per thread (a forward at one shape reuses two).
#include "attention_bf16.h"

#include "onednn.h"
#include "vmath.h"

namespace ops {

using dnnl::memory;
using dt = memory::data_type;

namespace {

// rows rows of n values, `stride` apart in x, rounded (after the scale) into out (rows, n), grown to fit.
const uint16_t* packed_rows(std::vector<uint16_t>& out, const float* x, int64_t stride, int64_t rows, int64_t n,
                            float scale = 1.0f) {
  if (static_cast<int64_t>(out.size()) < rows * n) out.resize(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) bf16_from_f32(out.data() + r * n, x + r * stride, n, scale);
  return out.data();
}

}  // namespace

void Bf16AttentionProducts::load_head(const float* k, const float* v, int64_t Tk, int64_t C, int64_t D) {
  D_ = D;
  packed_rows(k_, k, C, Tk, D);
  packed_rows(v_, v, C, Tk, D);
}

void Bf16AttentionProducts::scores(float* a, int64_t Tn, const float* q, int64_t C, int64_t rows, int64_t E,
                                   float scale) {
  const int64_t D = D_;
  const uint16_t* q16 = packed_rows(q_, q, C, rows, D, scale);
  // kᵀ as oneDNN's (K, N) = (D, E) weights: the (E, D) row-major keys read column by column.
  const memory::desc src({rows, D}, dt::bf16, memory::dims{D, 1}), weights({D, E}, dt::bf16, memory::dims{1, D});
  const memory::desc dst({rows, E}, dt::f32, memory::dims{Tn, 1});
  onednn_matmul(src, q16, weights, k_.data(), nullptr, dst, a, false);
}

void Bf16AttentionProducts::mix(float* out, int64_t C, const float* p, int64_t Tn, int64_t rows, int64_t E) {
  const int64_t D = D_;
  const uint16_t* p16 = packed_rows(p_, p, Tn, rows, E);
  const memory::desc src({rows, E}, dt::bf16, memory::dims{E, 1}), weights({E, D}, dt::bf16, memory::dims{D, 1});
  const memory::desc dst({rows, D}, dt::f32, memory::dims{C, 1});
  onednn_matmul(src, p16, weights, v_.data(), nullptr, dst, out, false);
}

void Bf16AttentionProducts::value_grads(float* dv, float* dp, int64_t Tn, const float* p, const float* dout, int64_t C,
                                        int64_t rows, int64_t E) {
  const int64_t D = D_;
  const uint16_t* p16 = packed_rows(p_, p, Tn, rows, E);
  const uint16_t* dy = packed_rows(dout_, dout, C, rows, D);
  const memory::desc dy_desc({rows, D}, dt::bf16, memory::dims{D, 1});
  // pᵀ (E, rows): p read column by column.
  onednn_matmul(memory::desc({E, rows}, dt::bf16, memory::dims{1, E}), p16, dy_desc, dy, nullptr,
                memory::desc({E, D}, dt::f32, memory::dims{C, 1}), dv, true);
  // vᵀ (D, E): the (E, D) row-major values read column by column.
  onednn_matmul(dy_desc, dy, memory::desc({D, E}, dt::bf16, memory::dims{1, D}), v_.data(), nullptr,
                memory::desc({rows, E}, dt::f32, memory::dims{Tn, 1}), dp, false);
}

void Bf16AttentionProducts::query_key_grads(float* dq, float* dk, const float* ds, int64_t Tn, const float* q,
                                            int64_t C, int64_t rows, int64_t E, float scale) {
  const int64_t D = D_;
  const uint16_t* ds16 = packed_rows(p_, ds, Tn, rows, E, scale);
  const uint16_t* q16 = packed_rows(q_, q, C, rows, D);
  onednn_matmul(memory::desc({rows, E}, dt::bf16, memory::dims{E, 1}), ds16,
                memory::desc({E, D}, dt::bf16, memory::dims{D, 1}), k_.data(), nullptr,
                memory::desc({rows, D}, dt::f32, memory::dims{C, 1}), dq, true);
  onednn_matmul(memory::desc({E, rows}, dt::bf16, memory::dims{1, E}), ds16,
                memory::desc({rows, D}, dt::bf16, memory::dims{D, 1}), q16, nullptr,
                memory::desc({E, D}, dt::f32, memory::dims{C, 1}), dk, true);
}

}  // namespace ops
