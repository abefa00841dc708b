// One block of attention's two products on one thread, as attention_forward runs them at RoFormer-base's
// 8 × 512 (64 query rows, head dim 64, 512 keys, rows of q, k, v 768 apart): oneDNN matmul with bf16
// operands and fp32 output (what AttentionShape::bf16_products uses) against OpenBLAS sgemm (the fp32
// path). Best of 200 calls, µs and GFLOP/s, and oneDNN's kernel names. The bf16 figures exclude the
// conversion of the operands. Not part of the build (docs/perf.md, "Inference: fp32, int8
// and bf16 against PyTorch and ONNX Runtime"):
//   g++ -O2 -std=c++17 bench/attention_bf16_gemm.cc -ldnnl -lopenblas -o build/attention_bf16_gemm
//   OMP_NUM_THREADS=1 build/attention_bf16_gemm
#include <cblas.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

namespace {

using dnnl::memory;
using dt = memory::data_type;

double best_us(const std::function<void()>& f, int repetitions = 200) {
  double best = 1e30;
  f();
  for (int r = 0; r < repetitions; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main() {
  const int64_t R = 64, D = 64, E = 512, C = 768;
  const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  std::vector<float> q(R * C, 0.1f), k(E * C, 0.2f), v(E * C, 0.3f), a(R * E), out(R * C);
  std::vector<uint16_t> qb(R * D, 0x3f80), kb(E * D, 0x3f80), vb(E * D, 0x3f80), pb(R * E, 0x3f80);  // bf16 1.0
  // Scores (R, E) = q (R, D) · kᵀ, the keys (E, D) row-major read as (D, E) weights; mix (R, D) = p · v.
  const memory::desc s1({R, D}, dt::bf16, memory::dims{D, 1}), w1({D, E}, dt::bf16, memory::dims{1, D});
  const memory::desc d1({R, E}, dt::f32, memory::dims{E, 1});
  const memory::desc s2({R, E}, dt::bf16, memory::dims{E, 1}), w2({E, D}, dt::bf16, memory::dims{D, 1});
  const memory::desc d2({R, D}, dt::f32, memory::dims{C, 1});
  const dnnl::matmul::primitive_desc pd1(dnnl::matmul::desc(s1, w1, d1), engine), pd2(dnnl::matmul::desc(s2, w2, d2), engine);
  const dnnl::matmul scores(pd1), mix(pd2);
  const memory S1(s1, engine, qb.data()), W1(w1, engine, kb.data()), D1(d1, engine, a.data());
  const memory S2(s2, engine, pb.data()), W2(w2, engine, vb.data()), D2(d2, engine, out.data());
  const double bf16_scores = best_us([&] {
    scores.execute(stream, {{DNNL_ARG_SRC, S1}, {DNNL_ARG_WEIGHTS, W1}, {DNNL_ARG_DST, D1}});
    stream.wait();
  });
  const double bf16_mix = best_us([&] {
    mix.execute(stream, {{DNNL_ARG_SRC, S2}, {DNNL_ARG_WEIGHTS, W2}, {DNNL_ARG_DST, D2}});
    stream.wait();
  });
  const double f32_scores = best_us([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, E, D, 0.125f, q.data(), C, k.data(), C, 0.f, a.data(), E);
  });
  const double f32_mix = best_us([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, D, E, 1.f, a.data(), E, v.data(), C, 0.f, out.data(), C);
  });
  const double kflop = 2.0 * R * D * E / 1e3;  // per product: kFLOP per µs is GFLOP/s
  std::printf("oneDNN kernels: scores %s, mix %s\n", pd1.impl_info_str(), pd2.impl_info_str());
  std::printf("q·kᵀ: bf16 %.1f µs (%.0f GFLOP/s), sgemm %.1f µs (%.0f)\n", bf16_scores, kflop / bf16_scores, f32_scores,
              kflop / f32_scores);
  std::printf("p·v:  bf16 %.1f µs (%.0f GFLOP/s), sgemm %.1f µs (%.0f)\n", bf16_mix, kflop / bf16_mix, f32_mix,
              kflop / f32_mix);
}
