// librope's decode case in a plain loop, for before/after comparisons of one kernel and for perf:
// q and k [16 tokens, 32 heads, 128] at positions from 4000, table mode, one thread, in place,
// forward and backward alternating (so the data stay bounded); prints the best mean of 20 batches.
// `AVX2=1` caps Highway's dispatch at AVX2. Optional arguments after the dtype: the number of calls,
// tokens and heads (`f32 200000 1 1`: one head of q and k, the cost of a call itself). Not part of
// the build (docs/perf.md, "librope on CPU", "bf16 rotation on AVX512-BF16"):
//   g++ -O2 -std=c++17 bench/rope_decode_loop.cc -Iinclude -Lbuild/release/src/rope -lrope -lhwy \
//       -Wl,-rpath,$PWD/build/release/src/rope -o build/rope_decode_loop && build/rope_decode_loop bf16
#include <rope/rope.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "hwy/targets.h"

int main(int argc, char** argv) {
  if (std::getenv("AVX2")) hwy::DisableTargets(HWY_AVX2 - 1);  // every target better than AVX2
  const bool bf16 = argc < 2 || std::strcmp(argv[1], "f32") != 0;
  const long calls = argc > 2 ? std::atol(argv[2]) : 200000;
  const int64_t T = argc > 3 ? std::atol(argv[3]) : 16, H = argc > 4 ? std::atol(argv[4]) : 32, D = 128;
  const size_t n = static_cast<size_t>(T * H * D), bytes = n * (bf16 ? 2 : 4);
  auto* q = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));
  auto* k = static_cast<uint16_t*>(std::aligned_alloc(64, bytes));
  std::mt19937 rng(1);
  for (size_t i = 0; i < bytes / 2; ++i) {  // bf16 in [0.5, 2) (f32: the same bits read in pairs)
    q[i] = static_cast<uint16_t>(0x3f00 + rng() % 256);
    k[i] = static_cast<uint16_t>(0x3f00 + rng() % 256);
  }
  rope_config cfg = rope::default_config(D);
  cfg.mode = ROPE_MODE_TABLE;
  cfg.table_positions = 8192;
  const rope::Plan plan(cfg);
  const rope_dtype dtype = bf16 ? ROPE_DTYPE_BF16 : ROPE_DTYPE_F32;
  const rope_tensor tq = rope::bshd(q, dtype, 1, T, H, D), tk = rope::bshd(k, dtype, 1, T, H, D);
  const rope_positions pos = rope::offset_positions(4000);
  const rope_exec one_thread{1, ROPE_BACKEND_AUTO, nullptr};
  double best = 1e30;
  for (int r = 0; r < 20; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls / 20; ++i) {
      plan.apply_qk(i % 2 ? ROPE_FORWARD : ROPE_BACKWARD, pos, tq, tk, nullptr, nullptr, &one_thread);
    }
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                              static_cast<double>(calls / 20));
  }
  std::printf("%s %s decode q+k [%lld, %lld, %lld] in place, one thread: %.3f us per call\n", rope_cpu_target(),
              bf16 ? "bf16" : "f32", static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(D), best);
  std::free(q);
  std::free(k);
}
