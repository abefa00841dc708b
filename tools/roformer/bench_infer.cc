// `roformer bench infer`: inference throughput of a Hugging Face RoFormer model directory (the peer,
// bench/peers/roformer_infer_hf.py, times the same directory in PyTorch + transformers). The batch is
// B × T deterministic ids, (i·7919 + 13) mod V, all real tokens, token type 0; the peer builds the same
// one, and both report a checksum of the output so the comparison is of the same computation.
// Reports load time, latency (median, min), tokens/s, GFLOP/s and peak RSS, as text or JSON; --simd-target
// caps our Highway kernels' dispatch (attention, norms, RoPE), to measure the AVX2 path on an AVX-512 CPU.
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "bench_gbench.h"
#include "bench_util.h"
#include "commands.h"
#include "infer/pipeline.h"
#include "ops/vmath.h"

namespace roformer {
namespace {

// --seq within the model's positions and --head mlm on a model that has one: thrown, so that they
// read as every command's errors do ("roformer: error: ...").
void check_model_fits(const BenchInferOptions& o, const model::RoFormer<float>& m) {
  const int64_t positions = m.config().max_position_embeddings;
  if (o.seq > positions) {
    throw std::invalid_argument(fmt::format("--seq {} exceeds max_position_embeddings {} of {}: use --seq {} or less",
                                            o.seq, positions, o.model, positions));
  }
  if (o.head == "mlm" && !m.has_mlm_head()) {
    throw std::invalid_argument(o.model + " has no MLM head (cls.predictions.*): use --head none");
  }
}

}  // namespace

int bench_infer(const BenchInferOptions& o) {
  cap_simd_target(o.simd_target);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  const auto t_load = bench_clock::now();
  infer::LoadOptions load_options;
  load_options.tokenizer = false;
  load_options.mlm_head = o.head == "mlm";
  static_cast<model::LinearOptions&>(load_options) = o.linears;
  load_options.release_packed_arena = true;  // as the inference commands load
  auto pipeline = infer::Pipeline::load(o.model, load_options);
  const double load_s = seconds_since(t_load);
  const double rss_after_load = peak_rss_mib();
  model::RoFormer<float>& m = pipeline->model();
  m.set_keep(o.keep == "all" ? model::Keep::all : model::Keep::outputs);
  const model::RoFormerConfig& c = m.config();
  const int64_t B = o.batch, T = o.seq, N = B * T;
  const std::string linears = linears_name(m);
  check_model_fits(o, m);
  std::vector<int64_t> ids(N);
  for (int64_t i = 0; i < N; ++i) ids[i] = (i * 7919 + 13) % c.vocab_size;
  const model::Inputs in{.ids = ids.data(), .B = B, .T = T};

  for (int64_t r = 0; r < o.warmup; ++r) m.forward(in);
  std::vector<double> times;
  const auto t0 = bench_clock::now();
  while (static_cast<int64_t>(times.size()) < o.min_reps || seconds_since(t0) < o.min_time) {
    const auto ts = bench_clock::now();
    m.forward(in);
    times.push_back(seconds_since(ts));
  }
  const double peak = peak_rss_mib();

  // Checksum of the output the peer also computes: the last hidden state (or the logits with --head mlm).
  const int64_t width = o.head == "mlm" ? c.vocab_size : c.hidden_size;
  const float* out = o.head == "mlm" ? m.logits() : m.hidden_state(c.num_hidden_layers);
  double sum = 0, abs_sum = 0;
  for (int64_t i = 0; i < N * width; ++i) sum += out[i], abs_sum += std::fabs(out[i]);
  std::vector<double> probe;  // 8 values spread over the tensor
  for (int64_t k = 0; k < 8; ++k) probe.push_back(out[(N * width - 1) * k / 7]);

  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], best = sorted.front();
  const int64_t H = c.hidden_size, L = c.num_hidden_layers, I = c.intermediate_size, E = c.embedding_size;
  double matmul_params = L * (4.0 * H * H + 2.0 * H * I) + (E != H ? E * H : 0.0);
  if (o.head == "mlm") matmul_params += c.rms_norm() ? H * c.vocab_size : H * E + E * c.vocab_size;
  const double flops_per_token = 2 * matmul_params + 4.0 * L * T * H;  // + QKᵀ and PV
  const double tokens_per_s = N / median;
  const char* target = ops::vmath_target();  // what --simd-target left our kernels
  const nlohmann::json run = {{"model", o.model},
                              {"head", o.head},
                              {"keep", o.keep},
                              {"linears", linears},
                              {"threads", omp_get_max_threads()},
                              {"simd_target", target},
                              {"batch", B},
                              {"seq", T},
                              {"hidden", H},
                              {"layers", L},
                              {"vocab", c.vocab_size},
                              {"load_s", load_s},
                              {"reps", times.size()},
                              {"latency_ms_median", median * 1e3},
                              {"latency_ms_min", best * 1e3},
                              {"tokens_per_s", tokens_per_s},
                              {"gflops", tokens_per_s * flops_per_token * 1e-9},
                              {"rss_after_load_mib", rss_after_load},
                              {"peak_rss_mib", peak},
                              {"checksum", {{"mean", sum / (N * width)}, {"mean_abs", abs_sum / (N * width)}, {"probe", probe}}}};
  if (o.json) {
    fmt::print("{}\n", nlohmann::json{{"tool", "roformer bench infer"}, {"runs", {run}}}.dump(2));
  } else {
    fmt::print("{} B={} T={} threads={} {} ({}, {}): {:.2f} ms median, {:.2f} ms min over {} runs, {:.0f} tok/s, "
               "{:.1f} GFLOP/s, load {:.2f} s, peak RSS {:.0f} MiB\n",
               o.model, B, T, omp_get_max_threads(), target, o.keep, linears, median * 1e3, best * 1e3, times.size(), tokens_per_s,
               tokens_per_s * flops_per_token * 1e-9, load_s, peak);
  }
  return 0;
}

}  // namespace roformer
