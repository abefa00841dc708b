// Is librope's in-place prefill slower than an in-place pass over the same bytes, and is the
// alternation of q and k rows (rope_apply_qk walks token t's q row, then its k row) the reason?
// One thread, q and k [4096 tokens, 32 heads, 128] f32 each (64 MiB), table mode, best of 15:
// a vectorised in-place scale of q then k, the same scale in alternating 16 KiB rows, librope on q
// alone, on q then k (two calls), and on both in one rope_apply_qk. Then the same questions out of
// place, against the copy floor (non-temporal stores, as librope and the bench's floor use above
// 1 MiB): a copy of q then k, a copy in alternating rows, and rope_apply_qk out of place. `AVX2=1`
// caps librope's Highway dispatch at AVX2. The scale and copy loops are 256-bit AVX2 whatever librope
// runs (they are memory-bound at these sizes). -march=native no longer builds on Zen 5: Highway 1.0.3's
// hwy/targets.h rejects its baseline ("best baseline should be included in dynamic targets").
// Not part of the build (docs/perf.md, "librope on CPU"):
//   g++ -O3 -mavx2 -mfma -std=c++17 bench/rope_inplace.cc -Iinclude -Lbuild/release/src/rope -lrope -lhwy \
//       -Wl,-rpath,$PWD/build/release/src/rope -o build/rope_inplace && build/rope_inplace
#include <rope/rope.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>

#include <immintrin.h>

#include "hwy/targets.h"

namespace {

double best_ms(const std::function<void()>& f, int repetitions = 15) {
  double best = 1e30;
  f();  // warm: pages touched, plan tables built
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Auto-vectorised at -O3 -march=native; a factor other than 1 so no compiler drops the stores.
__attribute__((noinline)) void scale(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= 1.0001f;
}

// dst = src with non-temporal stores (dst 64-byte aligned, n a multiple of 8): the bench's copy floor.
__attribute__((noinline)) void stream_copy(const float* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  _mm_sfence();
}

}  // namespace

int main() {
  if (std::getenv("AVX2")) hwy::DisableTargets(HWY_AVX2 - 1);  // every target better than AVX2
  const int64_t T = 4096, H = 32, D = 128, row = H * D;
  const size_t n = static_cast<size_t>(T * row);
  float* q = static_cast<float*>(std::aligned_alloc(4096, n * sizeof(float)));
  float* k = static_cast<float*>(std::aligned_alloc(4096, n * sizeof(float)));
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (size_t i = 0; i < n; ++i) q[i] = normal(rng), k[i] = normal(rng);
  rope_config cfg;
  rope_config_init(&cfg, D);
  cfg.mode = ROPE_MODE_TABLE;
  cfg.table_positions = T;
  const rope::Plan plan(cfg);
  const rope_tensor tq = rope::bshd(q, ROPE_DTYPE_F32, 1, T, H, D), tk = rope::bshd(k, ROPE_DTYPE_F32, 1, T, H, D);
  const rope_positions pos = rope::offset_positions(0);
  const rope_exec one_thread{1, ROPE_BACKEND_AUTO, nullptr};
  std::printf("librope target %s, one thread, ms (best of 15)\n", rope_cpu_target());
  std::printf("scale q then k             %6.2f\n", best_ms([&] { scale(q, n), scale(k, n); }));
  std::printf("scale alternating q/k rows %6.2f\n", best_ms([&] {
                for (int64_t t = 0; t < T; ++t) scale(q + t * row, row), scale(k + t * row, row);
              }));
  std::printf("rope q alone               %6.2f\n",
              best_ms([&] { plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, pos, tq, nullptr, &one_thread); }));
  std::printf("rope q, then k             %6.2f\n", best_ms([&] {
                plan.apply(ROPE_FORWARD, ROPE_ROLE_QUERY, pos, tq, nullptr, &one_thread);
                plan.apply(ROPE_FORWARD, ROPE_ROLE_KEY, pos, tk, nullptr, &one_thread);
              }));
  std::printf("rope_apply_qk              %6.2f\n",
              best_ms([&] { plan.apply_qk(ROPE_FORWARD, pos, tq, tk, nullptr, nullptr, &one_thread); }));
  float* qo = static_cast<float*>(std::aligned_alloc(4096, n * sizeof(float)));
  float* ko = static_cast<float*>(std::aligned_alloc(4096, n * sizeof(float)));
  std::fill(qo, qo + n, 0.0f), std::fill(ko, ko + n, 0.0f);  // pages touched before timing
  const rope_tensor tqo = rope::bshd(qo, ROPE_DTYPE_F32, 1, T, H, D), tko = rope::bshd(ko, ROPE_DTYPE_F32, 1, T, H, D);
  std::printf("out of place:\n");
  std::printf("copy q then k (streaming)  %6.2f\n", best_ms([&] { stream_copy(q, qo, n), stream_copy(k, ko, n); }));
  std::printf("copy alternating rows      %6.2f\n", best_ms([&] {
                for (int64_t t = 0; t < T; ++t) stream_copy(q + t * row, qo + t * row, row), stream_copy(k + t * row, ko + t * row, row);
              }));
  std::printf("rope_apply_qk out of place %6.2f\n",
              best_ms([&] { plan.apply_qk(ROPE_FORWARD, pos, tq, tk, &tqo, &tko, &one_thread); }));
  std::free(q);
  std::free(k);
  std::free(qo);
  std::free(ko);
}
