// Inference-only linear layers whose weights are packed once, at load, by oneDNN (libdnnl) into the
// blocked layout its matmul kernels read, instead of being re-packed by BLAS on every call (OpenBLAS
// spent 12.5% of a batch-1 RoFormer-base forward in sgemm_incopy). Two precisions:
//   f32  — the same product as linear_forward (linear.h), to fp32 rounding;
//   int8 — dynamic quantisation as ONNX Runtime's quantize_dynamic and CTranslate2 do it: weights s8,
//          symmetric, one scale per output channel (7 bits on CPUs without VNNI, int8_weight_levels);
//          activations u8, q = round(x / s + z), with one scale s and zero point z per call (from
//          the tensor's min and max, so 0 is exact); int32 accumulation; fp32 bias, epilogue, output.
//   bf16  — weights rounded to bfloat16 (nearest even) once, activations per call, fp32 accumulation,
//          bias, epilogue and output; only where the CPU has native bf16 dot products (bf16_is_native).
// The bias and, optionally, the activation that follows the layer (exact-erf GELU or ReLU) are fused
// into the GEMM's epilogue. Forward only: training keeps linear.h on the parameter arena.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ops {

enum class Precision { f32, bf16, int8 };
enum class Epilogue { none, gelu, relu };  // applied to x·Wᵀ + b

// "f32" / "bf16" / "int8"; parse_precision throws std::invalid_argument naming the accepted values.
const char* precision_name(Precision p);
Precision parse_precision(const std::string& name);

// The largest int8 weight level on this CPU: 127 where it has VNNI dot products (AVX-512 VNNI,
// AVX-VNNI); 63 where u8 × s8 pairs are summed into saturating 16 bits (AVX2, AVX-512 without VNNI).
int int8_weight_levels();

// Whether oneDNN packs fp32 weights for a kernel of its own on this CPU (brgemm, AVX-512): there it beats
// OpenBLAS at every RoFormer-base shape; elsewhere it falls back to a plain GEMM that does not
// (docs/perf.md, `roformer bench gemm`).
bool packed_f32_is_native();

// Whether this CPU multiplies bf16 natively (AVX512-BF16 dot products or AMX tiles), which
// Precision::bf16 needs: elsewhere oneDNN would emulate it, slower than fp32. The CPU's kernel family,
// as oneDNN reports it ("avx512_core_amx", "avx2", ...), names what it found in error messages.
bool bf16_is_native();
std::string cpu_isa_name();

// Symmetric per-row int8: for each row r of w (rows, cols), scale[r] = max|w[r]| / levels (1 for an
// all-zero row) and q[r][c] = round(w[r][c] / scale[r]). Returns false (q and scale unspecified) when
// w holds a NaN or an infinity. PackedLinear's weights and `roformer quantize`'s files.
bool quantize_rows(const float* w, int64_t rows, int64_t cols, int levels, int8_t* q, float* scale);

class PackedLinear {
 public:
  // weight (OC, IC) PyTorch layout, bias (OC) or null. Packs (and for int8 quantises) a copy: the
  // caller's arrays are not referenced afterwards. bf16 where !bf16_is_native() throws
  // std::invalid_argument naming the CPU's kernel family.
  PackedLinear(const float* weight, const float* bias, int64_t OC, int64_t IC, Precision precision,
               Epilogue epilogue = Epilogue::none);
  ~PackedLinear();
  PackedLinear(PackedLinear&&) noexcept;
  PackedLinear& operator=(PackedLinear&&) noexcept;

  // out (N, OC) = epilogue(inp (N, IC)·Wᵀ + b), written. Safe to call from several threads at once.
  void forward(float* out, const float* inp, int64_t N) const;
  // bf16 layers only (std::logic_error otherwise): the same product with the input or the output in
  // bf16, so that the layer that makes an operand writes it in bf16 and no pass re-reads it to round it.
  // inp16 (N, IC) is the input as round_to_bf16 (linear.h) rounds it: the results are forward's on the
  // fp32 input it came from. out16 (N, OC) is the fp32 output rounded to bf16 (nearest even) as it is
  // stored, except that values below 2^-126 may become zero (bf16 products read them as zero anyway).
  void forward(float* out, const uint16_t* inp16, int64_t N) const;
  void forward(uint16_t* out16, const float* inp, int64_t N) const;
  void forward(uint16_t* out16, const uint16_t* inp16, int64_t N) const;

  int64_t in_features() const;
  int64_t out_features() const;
  Precision precision() const;
  Epilogue epilogue() const;
  size_t packed_bytes() const;  // the packed weights (and int8 scales and bias)
  // oneDNN's implementation for a batch of N rows, e.g. "brg:avx512_core" or "gemm:jit".
  std::string implementation(int64_t N) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ops
