// A peer benchmark, not part of the product build: oneDNN's matmul primitive on the shapes RoFormer-base
// inference runs, to compare oneDNN builds (Debian's 2.x against PyPI's 3.x) by GFLOP/s. It uses no engine
// code and builds against oneDNN 2.x or 3.x (the primitive_desc and int8 scale APIs differ; see
// DNNL_VERSION_MAJOR below).
//
// Cases (dst f32 everywhere):
//   linear  src (M, K) · weights (K, N) + bias (1, N) f32, the weights reordered once into the primitive's
//           preferred layout (format_tag::any), as ops::PackedLinear does; (K, N) ∈ {(768, 768),
//           (768, 3072), (3072, 768)}, M ∈ {128, 512, 2048, 4096}; f32, bf16 (src, weights bf16) and int8
//           (src u8, weights s8, a per-output-column weight scale: v2 set_output_scales with the values
//           fixed, as the engine does it; v3 set_scales_mask(DNNL_ARG_WEIGHTS) with the values a runtime
//           DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS operand, v3's only way).
//   attn    (64 × 64)·(64 × T) and (64 × T)·(T × 64), T ∈ {512, 2048}, plain row-major weights, no bias,
//           f32 and bf16, as the attention's per-block products.
// Each case: one call to warm up, then the best of --reps repetitions, each calling the primitive (and
// waiting on the stream) until --min-time seconds have passed; printed as
//   case <name> <GFLOP/s> <implementation> check=ok|FAIL(<error>)
// where the check compares the first and last rows of dst with an fp64 reference.
// Threads: oneDNN's own (OMP_NUM_THREADS for OpenMP builds; the process's CPU affinity for TBB builds).
// ISA limit: ONEDNN_MAX_CPU_ISA (3.x) / DNNL_MAX_CPU_ISA (2.x).
//
// Build and run (bench/peers/onednn_versions.sh does this for every build it finds, interleaved):
//   g++ -O2 -std=c++17 bench/peers/onednn_matmul.cc -o /tmp/onednn_matmul -ldnnl
//   OMP_NUM_THREADS=1 /tmp/onednn_matmul [--min-time 0.2] [--reps 3] [--only SUBSTRING]
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using dt = memory::data_type;
using tag = memory::format_tag;

struct Case {
  std::string name;
  int64_t M, K, N;
  dt src_type, wei_type;
  bool packed;  // weights in the primitive's preferred layout (else plain row-major)
  bool bias;
  bool scaled;  // int8: per-column weight scale
};

const char* type_name(dt t) {
  switch (t) {
    case dt::f32: return "f32";
    case dt::bf16: return "bf16";
    case dt::u8: return "int8";
    default: return "?";
  }
}

// A memory of desc filled with values in [lo, hi]: written as f32 (or bytes for the int8 types) and
// reordered into desc's type and layout by oneDNN itself; values gets the row-major f32 values written.
memory filled(const dnnl::engine& engine, dnnl::stream& stream, const memory::desc& desc, const memory::dims& dims,
              dt type, float lo, float hi, std::mt19937& rng, std::vector<float>& values) {
  const bool bytes = type == dt::u8 || type == dt::s8;
  const memory::desc plain(dims, bytes ? type : dt::f32, tag::ab);
  memory source(plain, engine);
  const int64_t n = dims[0] * dims[1];
  std::uniform_real_distribution<float> dist(lo, hi);
  values.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    float x = dist(rng);
    if (bytes) x = std::floor(x);
    values[i] = x;
    if (type == dt::u8) static_cast<uint8_t*>(source.get_data_handle())[i] = static_cast<uint8_t>(x);
    else if (type == dt::s8) static_cast<int8_t*>(source.get_data_handle())[i] = static_cast<int8_t>(x);
    else static_cast<float*>(source.get_data_handle())[i] = x;
  }
  memory out(desc, engine);
  dnnl::reorder(source, out).execute(stream, source, out);
  stream.wait();
  return out;
}

struct Result {
  double gflops;
  std::string impl;
  double error;  // the worst |dst - reference| / Σ|terms| over the first and last rows
};

Result run(const dnnl::engine& engine, dnnl::stream& stream, const Case& c, double min_time, int reps) {
  std::mt19937 rng(42);
  const bool int8 = c.src_type == dt::u8;
  const memory::desc src_md({c.M, c.K}, c.src_type, tag::ab);
  const memory::desc wei_any({c.K, c.N}, c.wei_type, c.packed ? tag::any : tag::ab);
  const memory::desc bias_md({1, c.N}, dt::f32, tag::ab);
  const memory::desc dst_md({c.M, c.N}, dt::f32, tag::ab);
  std::vector<float> scales(c.N);
  for (auto& s : scales) s = 1.0f / 64 + std::uniform_real_distribution<float>(0, 1.0f / 256)(rng);

  dnnl::primitive_attr attr;
#if DNNL_VERSION_MAJOR >= 3
  if (c.scaled) attr.set_scales_mask(DNNL_ARG_WEIGHTS, 1 << 1);
  const auto pd = c.bias ? dnnl::matmul::primitive_desc(engine, src_md, wei_any, bias_md, dst_md, attr)
                         : dnnl::matmul::primitive_desc(engine, src_md, wei_any, dst_md, attr);
#else
  if (c.scaled) attr.set_output_scales(1 << 1, scales);
  const auto desc = c.bias ? dnnl::matmul::desc(src_md, wei_any, bias_md, dst_md)
                           : dnnl::matmul::desc(src_md, wei_any, dst_md);
  const auto pd = dnnl::matmul::primitive_desc(desc, attr, engine);
#endif
  const dnnl::matmul matmul(pd);

  // u8 src below 128: without VNNI (AVX2) oneDNN sums u8·s8 pairs in saturating int16 (vpmaddubsw).
  const float lo = int8 ? 0 : -1, hi = int8 ? 127.99f : 1;
  std::vector<float> x, w, b;
  memory src = filled(engine, stream, src_md, {c.M, c.K}, c.src_type, lo, hi, rng, x);
  memory wei = filled(engine, stream, pd.weights_desc(), {c.K, c.N}, c.wei_type, int8 ? -128 : -1,
                      int8 ? 127.99f : 1, rng, w);
  memory bias = filled(engine, stream, bias_md, {1, c.N}, dt::f32, -1, 1, rng, b);
  memory dst(dst_md, engine);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
  if (c.bias) args.emplace(DNNL_ARG_BIAS, bias);
#if DNNL_VERSION_MAJOR >= 3
  if (c.scaled) {
    memory scale_mem(memory::desc({c.N}, dt::f32, tag::a), engine);
    std::memcpy(scale_mem.get_data_handle(), scales.data(), scales.size() * sizeof(float));
    args.emplace(DNNL_ARG_ATTR_SCALES | DNNL_ARG_WEIGHTS, scale_mem);
  }
#endif

  using clock = std::chrono::steady_clock;
  matmul.execute(stream, args);
  stream.wait();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = clock::now();
    int64_t calls = 0;
    double elapsed = 0;
    do {
      matmul.execute(stream, args);
      stream.wait();
      ++calls;
      elapsed = std::chrono::duration<double>(clock::now() - start).count();
    } while (elapsed < min_time);
    best = std::min(best, elapsed / calls);
  }
  // The check: fp64 reference from the values written (bf16 operands were rounded from them, so their
  // error is about 2^-9 of Σ|terms|). int8: v2's output scale multiplies (product + bias), v3's weight
  // scale the product alone.
  const float* y = static_cast<const float*>(dst.get_data_handle());
  double error = 0;
  for (int64_t m : {int64_t(0), c.M - 1}) {
    for (int64_t n = 0; n < c.N; ++n) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < c.K; ++k) {
        const double t = double(x[m * c.K + k]) * w[k * c.N + n];
        sum += t, magnitude += std::fabs(t);
      }
      const double s = c.scaled ? scales[n] : 1.0, bn = c.bias ? b[n] : 0.0;
#if DNNL_VERSION_MAJOR >= 3
      const double want = sum * s + bn;
#else
      const double want = (sum + bn) * s;
#endif
      error = std::max(error, std::fabs(y[m * c.N + n] - want) / (magnitude * s + std::fabs(bn) + 1e-30));
    }
  }
  const double flops = 2.0 * c.M * c.K * c.N;
  return {flops / best * 1e-9, pd.impl_info_str(), error};
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const int64_t kn[3][2] = {{768, 768}, {768, 3072}, {3072, 768}};
  for (dt type : {dt::f32, dt::bf16, dt::u8}) {
    for (const auto& s : kn) {
      for (int64_t M : {128, 512, 2048, 4096}) {
        const bool int8 = type == dt::u8;
        out.push_back({std::string("linear_") + type_name(type) + "_K" + std::to_string(s[0]) + "_N" +
                           std::to_string(s[1]) + "_M" + std::to_string(M),
                       M, s[0], s[1], type, int8 ? dt::s8 : type, true, true, int8});
      }
    }
  }
  for (dt type : {dt::f32, dt::bf16}) {
    for (int64_t T : {512, 2048}) {
      out.push_back({std::string("attn_") + type_name(type) + "_64x64.64xT_T" + std::to_string(T), 64, 64, T, type,
                     type, false, false, false});
      out.push_back({std::string("attn_") + type_name(type) + "_64xT.Tx64_T" + std::to_string(T), 64, T, 64, type,
                     type, false, false, false});
    }
  }
  return out;
}

int threads_now() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  double min_time = 0.2;
  int reps = 3;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--min-time" && i + 1 < argc) min_time = std::atof(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--min-time SECONDS] [--reps N] [--only SUBSTRING]\n", argv[0]);
      return 2;
    }
  }
  const dnnl_version_t* v = dnnl_version();
  std::printf("onednn_headers %d.%d.%d\n", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, DNNL_VERSION_PATCH);
  std::printf("onednn_library %d.%d.%d %s cpu_runtime=%u\n", v->major, v->minor, v->patch, v->hash, v->cpu_runtime);
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    dnnl::stream stream(engine);
    for (const Case& c : cases()) {
      if (!only.empty() && c.name.find(only) == std::string::npos) continue;
      try {
        const Result r = run(engine, stream, c, min_time, reps);
        const double tolerance = c.src_type == dt::bf16 ? 1e-2 : 1e-5;
        std::printf("case %s %.1f %s check=%s(%.1e)\n", c.name.c_str(), r.gflops, r.impl.c_str(),
                    r.error <= tolerance ? "ok" : "FAIL", r.error);
      } catch (const dnnl::error& e) {
        std::printf("case %s nan error:%s\n", c.name.c_str(), e.what());
      }
      std::fflush(stdout);
    }
  } catch (const dnnl::error& e) {
    std::printf("engine_error status=%d %s\n", static_cast<int>(e.status), e.what());
    return 1;
  }
  std::printf("process_threads %d\n", threads_now());
  return 0;
}
