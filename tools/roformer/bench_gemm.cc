// `roformer bench gemm`, two tables side by side in one run. Each case is the best of --repetitions
// timings of at least --min-time seconds; GFLOP/s count 2·M·N·K.
// 1. The linear layers of RoFormer-base (hidden 768, ff 3072; q, k and v fused into one 768 → 2304
//    layer) at a batch-1 and a batch-8 row count: OpenBLAS sgemm on PyTorch-layout weights
//    (ops::linear_forward, what training runs), oneDNN with fp32 weights packed once (ops::PackedLinear f32), oneDNN dynamic
//    int8 (PackedLinear int8, including the quantisation of its input) and, where the CPU multiplies
//    bf16 natively, oneDNN bf16 (including the conversion of its input). The benchmark behind the
//    choice of serve's `--gemm auto`.
// 2. Training's products (a fine-tuning batch of 960 tokens of a 256-wide model with ff 1024:
//    forward, input gradient, weight gradient) and attention's six per-head products, strided as
//    attention runs them: OpenBLAS's cblas_sgemm (ops::gemm) against oneDNN's dnnl_sgemm (the
//    `gemm:jit` kernels its fp32 matmul runs). The benchmark behind keeping OpenBLAS for the linear
//    layers' training products and running attention's larger blocks on oneDNN (docs/perf.md, "The
//    fine-tuning step" and the inference section's "How it works").
#include <dnnl.h>
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "base/memory.h"
#include "base/random.h"
#include "bench_util.h"
#include "commands.h"
#include "ops/blas.h"
#include "ops/linear.h"
#include "ops/packed_linear.h"

namespace roformer {

namespace {

// Best GFLOP/s of run() over o.repetitions timings of at least o.min_time seconds (after a warm-up).
template <class Run>
double best_gflops(const BenchGemmOptions& o, double flops, const Run& run) {
  double best = INFINITY;
  run();
  for (int r = 0; r < o.repetitions; ++r) {
    int64_t calls = 0;
    const auto t0 = bench_clock::now();
    do {
      run();
      ++calls;
    } while (seconds_since(t0) < o.min_time);
    best = std::min(best, seconds_since(t0) / calls);
  }
  return flops / best * 1e-9;
}

void bench_training_products(const BenchGemmOptions& o) {
  // Row-major C (M, N) = A·B (+ C when accumulating), A and B transposed when ta / tb; lda, ldb, ldc 0:
  // dense. Attention's products are one block as attention_forward/backward run them at RoFormer-base's
  // shapes: 64 query rows, head dim 64, 512 keys, q, k, v and their gradients in rows 768 apart.
  struct Product {
    const char* name;
    bool ta, tb;
    int64_t M, N, K;
    int64_t lda = 0, ldb = 0, ldc = 0;
    bool accumulate = false;
  };
  const int64_t T = 960;  // 32 rows of about 30 tokens
  const Product products[] = {
      {"forward, 256 → 256", false, true, T, 256, 256},      {"forward, 256 → 1024", false, true, T, 1024, 256},
      {"forward, 1024 → 256", false, true, T, 256, 1024},    {"input gradient, 256 ← 256", false, false, T, 256, 256},
      {"input gradient, 256 ← 1024", false, false, T, 256, 1024}, {"weight gradient, 256 × 256", true, false, 256, 256, T},
      {"weight gradient, 1024 × 256", true, false, 1024, 256, T},
      {"attention q·kᵀ (scores)", false, true, 64, 512, 64, 768, 768, 512},
      {"attention p·v", false, false, 64, 64, 512, 512, 768, 768},
      {"attention pᵀ·dout (dv)", true, false, 512, 64, 64, 512, 768, 768, true},
      {"attention dout·vᵀ (dp)", false, true, 64, 512, 64, 768, 768, 512},
      {"attention ds·k (dq)", false, false, 64, 64, 512, 512, 768, 768, true},
      {"attention dsᵀ·q (dk)", true, false, 512, 64, 64, 512, 768, 768, true},
      {"attention q·kᵀ, 64 keys", false, true, 64, 64, 64, 768, 768, 64},
  };
  fmt::print("\nTraining's and attention's products: OpenBLAS's cblas_sgemm (ops::gemm) against oneDNN's dnnl_sgemm, "
             "GFLOP/s\n\n| product | M × N × K | OpenBLAS | oneDNN | oneDNN / OpenBLAS |\n|---|---|---|---|---|\n");
  for (const Product& p : products) {
    const int64_t lda = p.lda ? p.lda : (p.ta ? p.M : p.K), ldb = p.ldb ? p.ldb : (p.tb ? p.K : p.N);
    const int64_t ldc = p.ldc ? p.ldc : p.N;
    std::vector<float> a((p.ta ? p.K : p.M) * lda), b((p.tb ? p.N : p.K) * ldb), c(p.M * ldc, 0.0f);
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(base::uniform01(4, i) - 0.5);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(base::uniform01(5, i) - 0.5);
    const double flops = 2.0 * p.M * p.N * p.K;
    const float beta = p.accumulate ? 1.0f : 0.0f;
    const double blas = best_gflops(o, flops, [&] {
      ops::gemm(p.ta, p.tb, p.M, p.N, p.K, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(), ldc);
    });
    const double onednn = best_gflops(o, flops, [&] {
      dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.M, p.N, p.K, 1.0f, a.data(), lda, b.data(), ldb, beta, c.data(),
                 ldc);
    });
    fmt::print("| {} | {} × {} × {} | {:.1f} | {:.1f} | {:.2f}× |\n", p.name, p.M, p.N, p.K, blas, onednn, onednn / blas);
  }
}

}  // namespace

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
    for (const auto& shape : shapes) {
      const int64_t K = shape[0], N = shape[1];  // not a structured binding: clang < 16 cannot capture one
      // x, y and the int8 and packed copies: about four times the activations.
      base::check_fits_in_memory(4.0 * sizeof(float) * static_cast<double>(M) * static_cast<double>(K + N),
                                 "--rows " + std::to_string(M));
      std::vector<float> x(M * K), w(N * K), b(N), y(M * N);
      for (int64_t i = 0; i < M * K; ++i) x[i] = static_cast<float>(base::uniform01(1, i) - 0.5);
      for (int64_t i = 0; i < N * K; ++i) w[i] = static_cast<float>((base::uniform01(2, i) - 0.5) * 0.07);
      for (int64_t i = 0; i < N; ++i) b[i] = static_cast<float>(base::uniform01(3, i) - 0.5);
      const ops::PackedLinear f32(w.data(), b.data(), N, K, ops::Precision::f32);
      const ops::PackedLinear int8(w.data(), b.data(), N, K, ops::Precision::int8);
      const auto half = bf16 ? std::optional<ops::PackedLinear>(std::in_place, w.data(), b.data(), N, K, ops::Precision::bf16)
                             : std::nullopt;
      auto best_of = [&](auto&& run) { return best_gflops(o, 2.0 * M * N * K, run); };
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
  bench_training_products(o);
  return 0;
}

}  // namespace roformer
