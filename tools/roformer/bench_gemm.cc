// `roformer bench gemm`: the linear layers of RoFormer-base (hidden 768, ff 3072; q, k and v fused into
// one 768 → 2304 layer) at a batch-1 and a batch-8 row count, three ways side by side in one run:
// OpenBLAS sgemm on PyTorch-layout weights (ops::linear_forward, what training runs), oneDNN with fp32
// weights packed once (ops::PackedLinear f32), oneDNN dynamic int8 (PackedLinear int8, including the
// quantisation of its input) and, where the CPU multiplies bf16 natively, oneDNN bf16 (including the
// conversion of its input). Each case is the best of --repetitions timings of at least --min-time
// seconds; GFLOP/s count 2·M·N·K. The benchmark behind the choice of serve's `--gemm auto`.
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "base/random.h"
#include "bench_util.h"
#include "commands.h"
#include "ops/linear.h"
#include "ops/packed_linear.h"

namespace roformer {

int bench_gemm(const BenchGemmOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  fmt::print("linear layers y = x·Wᵀ + b, {} threads; GFLOP/s (int8: GOP/s), best of {}\n\n", omp_get_max_threads(),
             o.repetitions);
  const bool bf16 = ops::bf16_is_native();
  fmt::print("oneDNN kernel family: {}\n\n", ops::cpu_isa_name());
  fmt::print("| M × K → N | OpenBLAS f32 | oneDNN packed f32 (kernel) | oneDNN int8 (kernel) |{} packed / OpenBLAS | "
             "int8 / OpenBLAS |{}\n",
             bf16 ? " oneDNN bf16 (kernel) |" : "", bf16 ? " bf16 / OpenBLAS |" : "");
  fmt::print("|---|---|---|---|---|---|{}\n", bf16 ? "---|---|" : "");
  const int64_t shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};  // (K, N): qkv, out, ff in, ff out
  for (int64_t M : o.rows) {
    for (const auto& [K, N] : shapes) {
      std::vector<float> x(M * K), w(N * K), b(N), y(M * N);
      for (int64_t i = 0; i < M * K; ++i) x[i] = static_cast<float>(base::uniform01(1, i) - 0.5);
      for (int64_t i = 0; i < N * K; ++i) w[i] = static_cast<float>((base::uniform01(2, i) - 0.5) * 0.07);
      for (int64_t i = 0; i < N; ++i) b[i] = static_cast<float>(base::uniform01(3, i) - 0.5);
      const ops::PackedLinear f32(w.data(), b.data(), N, K, ops::Precision::f32);
      const ops::PackedLinear int8(w.data(), b.data(), N, K, ops::Precision::int8);
      const auto half = bf16 ? std::optional<ops::PackedLinear>(std::in_place, w.data(), b.data(), N, K, ops::Precision::bf16)
                             : std::nullopt;
      auto best_of = [&](auto&& run) {
        double best = INFINITY;
        run();  // warm-up (and oneDNN's primitive for this M)
        for (int r = 0; r < o.repetitions; ++r) {
          int64_t calls = 0;
          const auto t0 = bench_clock::now();
          do {
            run();
            ++calls;
          } while (seconds_since(t0) < o.min_time);
          best = std::min(best, seconds_since(t0) / calls);
        }
        return 2.0 * M * N * K / best * 1e-9;
      };
      const double blas = best_of([&] { ops::linear_forward(y.data(), x.data(), w.data(), b.data(), M, K, N); });
      const double packed = best_of([&] { f32.forward(y.data(), x.data(), M); });
      const double quantized = best_of([&] { int8.forward(y.data(), x.data(), M); });
      const double halved = half ? best_of([&] { half->forward(y.data(), x.data(), M); }) : 0.0;
      fmt::print("| {} × {} → {} | {:.1f} | {:.1f} ({}) | {:.1f} ({}) |", M, K, N, blas, packed, f32.implementation(M),
                 quantized, int8.implementation(M));
      if (half) fmt::print(" {:.1f} ({}) |", halved, half->implementation(M));
      fmt::print(" {:.2f}× | {:.2f}× |", packed / blas, quantized / blas);
      if (half) fmt::print(" {:.2f}× |", halved / blas);
      fmt::print("\n");
    }
  }
  fmt::print("\noneDNN packs fp32 for its own kernel here: {}\n", ops::packed_f32_is_native() ? "yes (--gemm auto = packed)"
                                                                                           : "no (--gemm auto = blas)");
  return 0;
}

}  // namespace roformer
