// Instruction counts per call, for docs/perf.md's roofline arguments (issue 17): one case of
// `roformer bench rope` (q and k, [tokens, 32 heads, 128], table mode, forward, one thread, 64-byte
// aligned buffers) or its memory floor, each in a function callgrind can collect alone:
//   rope_apply_qk  librope, via the C API (`rope <prefill|decode> <f32|bf16> <interleaved|half> <in|out>`)
//   floor_scale    the bench's in-place floor, an AVX2 load-multiply-store loop (`floor prefill|decode f32 in`)
//   floor_copy     the bench's copy floor, AVX2 loads and non-temporal stores for calls over 1 MiB,
//                  as roformer's floor_copy (`floor prefill|decode f32 out`)
// Valgrind has no AVX-512, so under it Highway picks AVX2; `AVX2=1` caps the dispatch when timing
// natively. The last argument is the number of calls (default 1 for prefill, 64 for decode); the
// timing printed is meaningless under valgrind. Not part of the build:
//   g++ -O2 -std=c++17 bench/rope_callgrind.cc -Iinclude -Lbuild/release/src/rope -lrope -lhwy \
//       -Wl,-rpath,$PWD/build/release/src/rope -o build/rope_callgrind
//   valgrind --tool=callgrind --toggle-collect=rope_apply_qk --callgrind-out-file=/tmp/cg.out \
//       build/rope_callgrind rope prefill f32 interleaved in && callgrind_annotate /tmp/cg.out | head
//   valgrind --tool=callgrind --toggle-collect=floor_scale ... build/rope_callgrind floor prefill f32 in
#include <immintrin.h>
#include <rope/rope.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "hwy/targets.h"

// Out of line and unmangled so --toggle-collect can name them. The same work as tools/roformer's
// memory_floor.cc at its AVX2 target: one 8-float vector per iteration.
// The factor is an argument (1, from a volatile): with a constant 1 GCC drops the whole loop.
extern "C" __attribute__((noinline, target("avx2,fma"))) void floor_scale(float* x, size_t n, float factor) {
  const __m256 a = _mm256_set1_ps(factor);
  for (size_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), a));
}

extern "C" __attribute__((noinline, target("avx2,fma"))) void floor_copy(const float* src, float* dst, size_t n,
                                                                          bool stream) {
  if (stream) {  // dst is 64-byte aligned here
    for (size_t i = 0; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    _mm_sfence();
  } else {
    for (size_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
  }
}

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s rope|floor prefill|decode f32|bf16 interleaved|half in|out [calls]\n", argv[0]);
    return 2;
  }
  if (std::getenv("AVX2")) hwy::DisableTargets(HWY_AVX2 - 1);  // every target better than AVX2
  const bool floor = std::strcmp(argv[1], "floor") == 0;
  const bool prefill = std::strcmp(argv[2], "prefill") == 0;
  const bool bf16 = std::strcmp(argv[3], "bf16") == 0;
  const bool half = std::strcmp(argv[4], "half") == 0;
  const bool in_place = std::strcmp(argv[5], "in") == 0;
  const long calls = argc > 6 ? std::atol(argv[6]) : (prefill ? 1 : 64);
  const int64_t T = prefill ? 4096 : 16, H = 32, D = 128, start = prefill ? 0 : 4000;
  const size_t n = static_cast<size_t>(T * H * D), bytes = n * (bf16 ? 2 : 4);
  void* buf[4];
  for (void*& p : buf) p = std::aligned_alloc(64, bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (void* p : buf) {  // N(0, 1) fp32 values (read as bf16 pairs too: finite either way)
    for (size_t i = 0; i < bytes / 4; ++i) static_cast<float*>(p)[i] = normal(rng);
  }
  rope_config cfg = rope::default_config(D);
  cfg.layout = half ? ROPE_LAYOUT_HALF : ROPE_LAYOUT_INTERLEAVED;
  cfg.mode = ROPE_MODE_TABLE;
  cfg.table_positions = 4096 + 16;
  const rope::Plan plan(cfg);
  const rope_dtype dtype = bf16 ? ROPE_DTYPE_BF16 : ROPE_DTYPE_F32;
  const rope_tensor q = rope::bshd(buf[0], dtype, 1, T, H, D), k = rope::bshd(buf[1], dtype, 1, T, H, D);
  const rope_tensor qo = rope::bshd(buf[2], dtype, 1, T, H, D), ko = rope::bshd(buf[3], dtype, 1, T, H, D);
  const rope_positions pos = rope::offset_positions(start);
  const rope_exec one_thread{1, ROPE_BACKEND_AUTO, nullptr};
  const size_t floats = bytes / 4;
  const bool stream = 4 * bytes > (size_t{1} << 20);  // the bench's rule: read + written, q and k
  volatile float one = 1.0f;
  const auto t0 = std::chrono::steady_clock::now();
  for (long c = 0; c < calls; ++c) {
    if (!floor) {
      plan.apply_qk(ROPE_FORWARD, pos, q, k, in_place ? nullptr : &qo, in_place ? nullptr : &ko, &one_thread);
    } else if (in_place) {
      floor_scale(static_cast<float*>(buf[0]), floats, one);
      floor_scale(static_cast<float*>(buf[1]), floats, one);
    } else {
      floor_copy(static_cast<const float*>(buf[0]), static_cast<float*>(buf[2]), floats, stream);
      floor_copy(static_cast<const float*>(buf[1]), static_cast<float*>(buf[3]), floats, stream);
    }
  }
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
  std::printf("%s %s %s %s %s %s-place: %ld calls, %.2f us per call, %zu AVX2 vectors per call\n",
              floor ? "floor" : "rope", rope_cpu_target(), argv[2], argv[3], argv[4], argv[5], calls, us,
              2 * bytes / 32);
  for (void* p : buf) std::free(p);
}
