// Linear layer y = x·Wᵀ + b with PyTorch's weight layout W (out_features, in_features): on BLAS in
// the model's type, or for bf16 mixed-precision training on oneDNN's bf16 matmul.
// Forward writes; backward accumulates (dinp: or overwrites, with Grad::overwrite).
#pragma once

#include <cstdint>

#include "gradient.h"

namespace ops {

// out (N, OC) = inp (N, IC) · weightᵀ (OC, IC) + bias (OC); bias may be null.
template <typename T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t IC, int64_t OC);

// dinp (N, IC) += dout (N, OC) · weight (OC, IC) (= with dinp_mode overwrite); dweight (OC, IC) +=
// doutᵀ · inp; dbias (OC) += Σ_n dout. Any of dinp, dbias may be null (not needed).
template <typename T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int64_t N,
                     int64_t IC, int64_t OC, Grad dinp_mode = Grad::accumulate);

// bf16 mixed precision (training): the same three products with their operands rounded to bf16
// (nearest even) and fp32 accumulation; bias, outputs and gradients stay fp32. weight16 (OC, IC) is
// the caller's bf16 copy of the fp32 weight (made once per forward: model::RoFormer::set_precision);
// the inputs and output gradients are rounded here, per call. Where the CPU has no native bf16
// (bf16_is_native, packed_linear.h) they throw std::invalid_argument naming its kernel family.
void linear_forward_bf16(float* out, const float* inp, const uint16_t* weight16, const float* bias, int64_t N,
                         int64_t IC, int64_t OC);
void linear_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const uint16_t* weight16, int64_t N, int64_t IC, int64_t OC,
                          Grad dinp_mode = Grad::accumulate);
// The same with the input already rounded to bf16 (inp16, (N, IC)), for an activation that a model
// keeps only in bf16: the results are those of the fp32 input it was rounded from.
void linear_forward_bf16(float* out, const uint16_t* inp16, const uint16_t* weight16, const float* bias, int64_t N,
                         int64_t IC, int64_t OC);
void linear_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const uint16_t* inp16,
                          const uint16_t* weight16, int64_t N, int64_t IC, int64_t OC,
                          Grad dinp_mode = Grad::accumulate);

// The backward of this layer followed by an activation kept as its bf16 slope (activation.h's
// gelu_forward_bf16, relu_forward_bf16): dout = d ⊙ slope16 (d the activation's output gradient,
// (N, OC); slope16 (N, OC)), formed in the pass that rounds dout and sums dbias and never stored in
// fp32; then as linear_backward_bf16 on inp16.
void linear_backward_bf16_with_slope(float* dinp, float* dweight, float* dbias, const float* d,
                                     const uint16_t* slope16, const uint16_t* inp16, const uint16_t* weight16,
                                     int64_t N, int64_t IC, int64_t OC, Grad dinp_mode = Grad::accumulate);

// out (n) = x rounded to bf16 as the functions above round their operands (vmath.h's bf16_from_f32),
// in chunks spread over the OpenMP threads: the weight copies a model hands them.
void round_to_bf16(uint16_t* out, const float* x, int64_t n);

// What rounding to bf16 costs the gradients: the output gradients (dout) of every linear_backward_bf16
// call in this process, counted as they are rounded (monotonic totals; a run reports its own
// difference). The bf16 dot products treat values below the smallest normal, 2^-126, as zero: those
// are lost. For comparison, the values fp16 could not hold, below its smallest subnormal 2^-24,
// are counted too: what fp16 training needs loss scaling for, and bf16, with fp32's exponent range,
// does not.
struct GradientUnderflow {
  int64_t values = 0;        // every element rounded
  int64_t nonzero = 0;       // of them, not ±0
  int64_t below_bf16 = 0;    // nonzero with |x| < 2^-126: zero in the bf16 products
  int64_t below_fp16 = 0;    // nonzero with |x| < 2^-24: zero in fp16
};
GradientUnderflow bf16_gradient_underflow();
// The census is taken only while it is on, which it is not by default: counting reads every output
// gradient a second time (about 1% of a bf16 fine-tuning step), and only `roformer bench train`
// reports it.
void set_bf16_gradient_census(bool on);

}  // namespace ops
