// Vectorised fp32 elementary functions behind the fp32 fast paths of the ops (GELU, attention
// softmax), with runtime dispatch to the best SIMD target (see vmath-inl.h for the methods and
// error bounds). Exposed for tests and for ops that need them on arrays. Serial: callers split
// large arrays across threads themselves.
#pragma once

#include <cstdint>

namespace ops {

// out[i] = e^x[i]: ≤ 2 ulp, gradual underflow to +0 below −103.97, +inf above 88.72, NaN → NaN.
// out may equal x.
void exp_f32(float* out, const float* x, int64_t n);

// out[i] = erf(x[i]): ≈ 1e-7 absolute; ±1 for |x| ≥ 4, NaN → NaN. out may equal x.
void erf_f32(float* out, const float* x, int64_t n);

// out[i] = erfc(x[i]) = 1 − erf(x[i]): ≈ 1.2e-7 absolute, computed without cancellation for
// x ≥ 0.875 (relative error ≤ 5e-6 up to 2, ≤ 1.5e-4 up to 4; 0 beyond 4). NaN → NaN.
void erfc_f32(float* out, const float* x, int64_t n);

// The smallest and largest of x[0, n) into lo and hi (+inf and −inf for n = 0); false when some x is
// NaN or infinite (lo and hi are then unspecified). The int8 layers' activation range.
bool finite_range_f32(const float* x, int64_t n, float* lo, float* hi);

// q[i] = clamp(round(x[i]·inv_scale + zero_point), 0, 255), to nearest even, the product and the sum
// each rounded to fp32: the int8 layers' u8 activations (x finite).
void quantize_u8_f32(const float* x, int64_t n, float inv_scale, float zero_point, uint8_t* q);

// out[i] = the bfloat16 bits of x[i]·scale: the product rounded to fp32, then to nearest even; NaN →
// a quiet NaN of the same sign, ±inf → ±inf, a subnormal product → ±0 (AVX512-BF16's vcvtneps2bf16,
// which runs it where the CPU has it; the bf16 dot products treat subnormal inputs as zero anyway).
// The operands of the bf16 products (attention.h, linear.h).
void bf16_from_f32(uint16_t* out, const float* x, int64_t n, float scale = 1.0f);

// out[i] = x[i]·s[i], s given as bfloat16 bits (widened to fp32 exactly), the product rounded to fp32.
// out may equal x. bf16 training's activation slopes (activation.h).
void mul_bf16_f32(float* out, const float* x, const uint16_t* s16, int64_t n);

// out[i] = x[i], given as bfloat16 bits, widened to fp32 exactly: a bf16 key/value cache's rows read
// by attention_forward (model/blocks.h's KVCache).
void f32_from_bf16(float* out, const uint16_t* x, int64_t n);

// Counts over x[0, n): counts[0] the nonzero values, counts[1 + j] those nonzero with |x| < below[j]
// (j = 0, 1), added to what counts holds. NaN counts as nonzero and below nothing. bf16 training's
// gradient census (linear.h's GradientUnderflow).
void count_small_f32(const float* x, int64_t n, const float below[2], int64_t counts[3]);

// The coefficients of one AdamW step (train/optim.h), each rounded to fp32 once per step.
struct AdamWStep {
  float decay;                      // 1 − lr·weight_decay (1 for parameters without decay)
  float beta1, one_minus_beta1;     // first moment
  float beta2, one_minus_beta2;     // second moment
  float step_size;                  // lr / (1 − β1^t)
  float sqrt_bias_correction2;      // √(1 − β2^t)
  float eps;
};

// One AdamW step over n elements, in fp32 as torch.optim.AdamW computes it:
//   m ← β1·m + (1 − β1)·g;  v ← β2·v + (1 − β2)·g·g;  p ← p·decay − step_size·(m / (√v / √bc2 + eps)).
// Every operation rounds to fp32 (no fused multiply-add), so every SIMD target gives the same bits.
void adamw_step_f32(float* p, float* m, float* v, const float* g, int64_t n, const AdamWStep& s);

// Name of the SIMD target the dispatch picked (e.g. "AVX3"), for logs and tests.
const char* vmath_target();

}  // namespace ops
