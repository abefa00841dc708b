// What the CPU kernels see of one row (token): its cos/sin in every shape a kernel reads, and its
// heads. Shared by the Highway kernels (rope_cpu-inl.h) and the AVX512-BF16 ones (bf16_avx512.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace rope {

// Per-token cos/sin, scale and direction folded in.
//   pc, ps: per pair (n_pairs): scalar tails, bf16 interleaved, f32/f16 half.
//   xcs:    (c0, s0, c1, s1, ...) (rot_dim) for f32/f16 interleaved, the complex-multiply form.
//   ec, es: even pairs then odd pairs (n_pairs), for bf16 half, whose u32 lanes hold 2 pairs.
struct TokenCosSin {
  std::vector<float> pc, ps, xcs, ec, es;
  void resize(size_t padded) {
    for (auto* v : {&pc, &ps, &ec, &es}) v->resize(padded);
    xcs.resize(2 * padded);
  }
};

// The heads of one row. They are rotated in blocks of `block` heads, each chunk's cos/sin loaded
// once per block: all heads when the call's data fits in cache (reuse wins), one at a time when it
// streams from DRAM (one sequential stream per tensor is what the prefetchers follow best). The
// portable bf16 kernels, bound by their rounding arithmetic rather than loads, walk heads one by one;
// the AVX512-BF16 ones pass the whole row under each tile of cos/sin held in registers.
struct Heads {
  const uint8_t* in;
  uint8_t* out;
  int64_t n, in_stride, out_stride;  // heads; strides in bytes
  int64_t block;
  bool stream;  // non-temporal stores for vector-aligned outputs
};

// Element `offset` of head i, as T (the kernels take per-head pointers in locals: their vector stores
// may alias anything, so a Heads field read after one would be reloaded).
template <typename T>
inline const T* InHead(const Heads& h, int64_t i, int32_t offset) {
  return reinterpret_cast<const T*>(h.in + i * h.in_stride) + offset;
}
template <typename T>
inline T* OutHead(const Heads& h, int64_t i, int32_t offset) {
  return reinterpret_cast<T*>(h.out + i * h.out_stride) + offset;
}

// bf16 kernels with AVX512-BF16's native round-to-nearest-even conversion (bf16_avx512.cc).
// Each rotates the first pairs of every head in whole vectors and returns how many pairs that was
// (the caller does the rest); 0 when the CPU lacks AVX512-BF16.
bool cpu_has_avx512_bf16();
int32_t rotate_interleaved_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs,
                                       const TokenCosSin& cs);
int32_t rotate_half_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs);

}  // namespace rope
