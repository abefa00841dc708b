// Scalar fp16/bf16 <-> fp32 conversions with round-to-nearest-even, shared by the reference backend
// and the SIMD tails. NaN stays NaN (quieted); the SIMD paths match these bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace rope {

// IEEE binary16 storage type. clang supports _Float16 on x86-64 only from version 15; older clang has
// the storage-only __fp16 with the same conversions (compiler-rt's __gnu_h2f_ieee / __gnu_f2h_ieee).
#if defined(__clang__) && __clang_major__ < 15
using half_storage = __fp16;
#else
using half_storage = _Float16;
#endif

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float f16_to_f32(uint16_t h) {
  half_storage v;
  std::memcpy(&v, &h, sizeof h);
  return static_cast<float>(v);
}

inline uint16_t f32_to_f16(float f) {
  const half_storage v = static_cast<half_storage>(f);
  uint16_t h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}

// Bytes per element of a rope_dtype (F32 0, F16 1, BF16 2, F64 3).
inline size_t dtype_size(int dtype) { return dtype == 3 ? 8 : dtype == 0 ? 4 : 2; }

}  // namespace rope
