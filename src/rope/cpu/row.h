// What the CPU kernels see of one row (token): its cos/sin in every shape a kernel reads, and its
// heads. Shared by the Highway kernels (rope_cpu-inl.h) and the AVX512-BF16 ones (bf16_avx512.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace rope {

// Per-token cos/sin, scale and direction folded in.
//   pc, ps: per pair (n_pairs): scalar tails, bf16 interleaved, f32/f16 half.
//   xc, xs: (c0, c0, c1, c1, ...) and (−s0, s0, −s1, s1, ...) (rot_dim) for f32/f16 interleaved,
//           the complex-multiply form.
//   ec, es: even pairs then odd pairs (n_pairs), for bf16 half, whose u32 lanes hold 2 pairs.
struct TokenCosSin {
  std::vector<float> pc, ps, xc, xs, ec, es;
  void resize(size_t padded) {
    for (auto* v : {&pc, &ps, &ec, &es}) v->resize(padded);
    xc.resize(2 * padded);
    xs.resize(2 * padded);
  }
};

// The heads of one row. The Highway kernels walk them one after the other, each head's vectors in
// order (one sequential stream per tensor), cos/sin read from L1; the AVX512-BF16 ones pass the
// heads under each tile of cos/sin held in registers.
struct Heads {
  const uint8_t* in;
  uint8_t* out;
  int64_t n, in_stride, out_stride;  // heads; strides in bytes
  bool stream_row;  // the call streams from DRAM (ApplyJob's from_dram): f32/f16 use 256-bit vectors
  bool stream;      // non-temporal stores for vector-aligned outputs
  // Whether the loops prefetch 4 KiB ahead: rows streamed from DRAM, in place, or out of place too
  // where the kernel asks (bf16); the measurements are at rope_cpu-inl.h's WithPrefetchIfStreamed.
  bool prefetch(bool out_of_place_too) const { return stream_row && (out_of_place_too || in == out); }
};

// The heads from element `offset` of the first, one after the other: pointers stepped by a head
// (an add, no multiplication) and held in locals, since the kernels' vector stores may alias
// anything they read from memory (a Heads field read after a store is reloaded).
//   for (HeadWalk<T> w(heads, offset); w.n > 0; w.next()) { ... w.in ... w.out ... }
template <typename T>
struct HeadWalk {
  const T* in;
  T* out;
  int64_t in_step, out_step;  // elements
  int64_t n;                  // heads left, this one included
  HeadWalk(const Heads& heads, int32_t offset)
      : in(reinterpret_cast<const T*>(heads.in) + offset),
        out(reinterpret_cast<T*>(heads.out) + offset),
        in_step(heads.in_stride / static_cast<int64_t>(sizeof(T))),
        out_step(heads.out_stride / static_cast<int64_t>(sizeof(T))),
        n(heads.n) {}
  void next() { in += in_step, out += out_step, --n; }
};

// Makes the vector variable `raw` (an x86 type, __m128 ... __m512i) a register value. GCC folds a
// load into each instruction that uses it, and a rotation uses x twice (the shuffle and the FMA; for
// bf16 the shift and the mask), so every vector was loaded twice: on Zen 5, which loads two 512-bit
// vectors a cycle, an L2-resident f32 decode took 3.9 µs instead of 3.2 (docs/perf.md,
// "librope on CPU"). The empty asm stops it. A macro: a function taking vectors by value would need
// each kernel's target attributes.
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ROPE_IN_REGISTER(raw) asm("" : "+v"(raw))
#else
#define ROPE_IN_REGISTER(raw) (void)(raw)
#endif

// bf16 kernels with AVX512-BF16's native round-to-nearest-even conversion (bf16_avx512.cc).
// Each rotates the first pairs of every head in whole vectors and returns how many pairs that was
// (the caller does the rest); 0 when the CPU lacks AVX512-BF16.
bool cpu_has_avx512_bf16();
int32_t rotate_interleaved_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs,
                                       const TokenCosSin& cs);
int32_t rotate_half_bf16_avx512(const Heads& heads, int32_t offset, int32_t n_pairs, const TokenCosSin& cs);

}  // namespace rope
