// `roformer bench attention`: time per token of one attention layer against the sequence length.
// By default forward + backward of softmax attention (O(T²) time, its (H, T, T) probabilities kept)
// and of linear attention with RoPE (elu+1 and FAVOR+, O(T)), to show where linear attention starts to
// win (paper §3.3). --softmax-only times softmax attention alone as inference and training run it at
// length, forward with nothing kept and forward + backward from two statistics per row (memory linear
// in T), causal or full, fp32 or bf16 products: the rows bench/peers/attention_sdpa.py prints for
// PyTorch's scaled_dot_product_attention. --decode ROWS times decoding steps instead: ROWS queries, each
// over the keys of its own cache row, as a server's slots or a beam decode them, over an fp32 and a
// bf16 key/value cache (head-major, as the model keeps it). --fused times the fp32 inference forward two
// ways side by side, the per-block products (oneDNN or OpenBLAS sgemm) and softmax
// (attention_forward_blocks, what attention_forward ran before) against the fused flash_attention_forward
// (what it runs now), at each batch size, length and thread count (Google Benchmark, the repetitions in
// random order, the fastest kept; --simd-target caps the fused kernel's dispatch); with --precision bf16,
// the bf16-product inference forward the same two ways, the per-block oneDNN bf16 matmuls and softmax
// against the fused flash_attention_forward_bf16 (AVX512-BF16 only; its products on AMX tiles where
// the CPU has AMX-BF16 and ROFORMER_AMX_ATTENTION=1, named in the table's heading).
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_gbench.h"
#include "bench_util.h"
#include "base/memory.h"
#include "base/random.h"
#include "commands.h"
#include "ops/attention.h"
#include "ops/flash_attention.h"
#include "ops/linear_attention.h"
#include "ops/packed_linear.h"
#include "ops/vmath.h"
#include "rope/rope.hpp"

namespace roformer {
namespace {

// Registers `call` with Google Benchmark under `key` for --repetitions repetitions of --min-time each,
// on `threads` OpenMP threads (0: as set); run_benchmarks_interleaved then leaves its fastest seconds
// per call in seconds[key].
void register_timed(std::map<std::string, double>& seconds, const std::string& key, const BenchAttentionOptions& o,
                    int threads, benchmark::TimeUnit unit, std::function<void()> call) {
  seconds[key] = INFINITY;
  benchmark::RegisterBenchmark(key.c_str(), [threads, call = std::move(call)](benchmark::State& st) {
    if (threads > 0) omp_set_num_threads(threads);
    for (auto _ : st) {
      call();
      benchmark::ClobberMemory();
    }
  })->UseRealTime()->MinTime(o.min_time)->Repetitions(o.repetitions)->Unit(unit);
}

// --fused: milliseconds per call of each kernel, and the ratio.
int bench_attention_fused(const BenchAttentionOptions& o) {
  cap_simd_target(o.simd_target);
  const int64_t H = o.heads, D = o.head_dim, C = H * D;
  const bool causal = o.mask == "causal", bf16 = o.precision == "bf16";
  if (bf16) {
    ops::AttentionShape probe{1, 1, 1, 1, false};
    probe.saved = ops::AttentionSaved::none, probe.bf16_products = true;
    if (!ops::flash_attention_bf16_applies(probe)) {
      throw std::invalid_argument("--fused --precision bf16: the fused bf16 kernel needs AVX512-BF16 (" +
                                  ops::cpu_isa_name() + ")");
    }
  }
  struct Inputs {
    std::vector<float> q, k, v, out;
  };
  std::map<std::string, double> seconds;
  std::vector<std::unique_ptr<Inputs>> inputs;
  auto name = [](const char* kernel, int64_t B, int64_t T, int threads) {
    return fmt::format("{}/B{}/T{}/t{}", kernel, B, T, threads);
  };
  for (int64_t B : o.batches) {
    for (int64_t T : o.lengths) {
      const int64_t n = B * T * C, nk = B * (o.past + T) * C;
      base::check_fits_in_memory(sizeof(float) * (2.0 * static_cast<double>(n) + 2.0 * static_cast<double>(nk)),
                                 fmt::format("--batches {} with --lengths {}", B, T));
      auto& in = *inputs.emplace_back(std::make_unique<Inputs>());
      in.q.resize(n), in.k.resize(nk), in.v.resize(nk), in.out.resize(n);
      for (int64_t i = 0; i < nk; ++i) {
        if (i < n) in.q[i] = static_cast<float>(base::uniform01(1, i) - 0.5);
        in.k[i] = static_cast<float>(base::uniform01(2, i) - 0.5);
        in.v[i] = static_cast<float>(base::uniform01(3, i) - 0.5);
      }
      ops::AttentionShape s{B, T, H, D, causal};
      s.saved = ops::AttentionSaved::none;
      s.bf16_products = bf16;
      s.Tk = o.past + T, s.q_start = o.past;
      for (int threads : o.thread_counts) {
        for (const bool fused : {false, true}) {
          register_timed(seconds, name(fused ? "fused" : "blocks", B, T, threads), o, threads, benchmark::kMillisecond,
                         [&in, s, fused, bf16] {
                           if (fused && bf16) {
                             ops::flash_attention_forward_bf16(in.out.data(), in.q.data(), in.k.data(), in.v.data(),
                                                               nullptr, s);
                           } else if (fused) {
                             ops::flash_attention_forward(in.out.data(), in.q.data(), in.k.data(), in.v.data(),
                                                          nullptr, s);
                           } else {
                             ops::attention_forward_blocks(in.out.data(), in.q.data(), in.k.data(), in.v.data(),
                                                           nullptr, s);
                           }
                         });
        }
      }
    }
  }
  FastestRunReporter reporter(&seconds, [](double& x) -> double& { return x; });
  run_benchmarks_interleaved(reporter);
  fmt::print("softmax attention's {} inference forward, {} heads of {}, {}{}, SIMD target {}: milliseconds per "
             "call, fastest of {}\n\n| batch | tokens | threads | per-block (attention_forward_blocks{}) "
             "| fused ({}) | speed-up |\n|---|---|---|---|---|---|\n",
             bf16 ? "bf16-product" : "fp32", H, D, causal ? "causal" : "full",
             o.past ? fmt::format(" after {} cached keys", o.past) : "",
             bf16 ? (ops::flash_attention_amx_enabled() ? "AMX-BF16 (ROFORMER_AMX_ATTENTION=1)" : "AVX512-BF16")
                  : ops::vmath_target(),
             o.repetitions, bf16 ? ", oneDNN bf16" : "",
             bf16 ? "flash_attention_forward_bf16" : "flash_attention_forward");
  for (int64_t B : o.batches) {
    for (int64_t T : o.lengths) {
      for (int threads : o.thread_counts) {
        const double tiled = seconds.at(name("blocks", B, T, threads));
        const double fused = seconds.at(name("fused", B, T, threads));
        fmt::print("| {} | {} | {} | {:.3f} | {:.3f} | {:.2f}× |\n", B, T, threads, tiled * 1e3, fused * 1e3,
                   tiled / fused);
      }
    }
  }
  return 0;
}

// --decode: one layer's decoding step (B rows, one query each over T keys of its own cache row) in µs,
// over an fp32 cache and over the same keys and values in bf16 (Google Benchmark, interleaved).
int bench_decode(const BenchAttentionOptions& o) {
  cap_simd_target(o.simd_target);
  const int64_t B = o.decode_rows, H = o.heads, D = o.head_dim, C = H * D;
  const int64_t capacity = *std::max_element(o.lengths.begin(), o.lengths.end());
  base::check_fits_in_memory(3.0 * sizeof(float) * static_cast<double>(B) * static_cast<double>(capacity) * static_cast<double>(C),
                             "--decode " + std::to_string(B) + " with --lengths up to " + std::to_string(capacity));
  std::vector<float> k(B * capacity * C), v(B * capacity * C), q(B * C), out(B * C);
  for (int64_t i = 0; i < B * capacity * C; ++i) {
    k[i] = static_cast<float>(base::uniform01(2, i) - 0.5);
    v[i] = static_cast<float>(base::uniform01(3, i) - 0.5);
  }
  for (int64_t i = 0; i < B * C; ++i) q[i] = static_cast<float>(base::uniform01(1, i) - 0.5);
  // The bf16 cache head-major, (rows, H, capacity, D), as model::KVCache keeps one.
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t < capacity; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t from = (r * capacity + t) * C + h * D, to = ((r * H + h) * capacity + t) * D;
        ops::bf16_from_f32(k16.data() + to, k.data() + from, D);
        ops::bf16_from_f32(v16.data() + to, v.data() + from, D);
      }
    }
  }
  std::map<std::string, double> seconds;
  auto name = [](const char* cache, int64_t T) { return fmt::format("{}/T{}", cache, T); };
  std::vector<std::vector<int64_t>> keys;  // each length's (B) key counts, which the shapes point to
  for (int64_t T : o.lengths) {
    const ops::DecodeAttentionShape s{B, H, D, keys.emplace_back(B, T).data(), nullptr, capacity};
    ops::DecodeAttentionShape heads = s;
    heads.heads_major = true;
    register_timed(seconds, name("fp32", T), o, 0, benchmark::kMicrosecond,
                   [&, s] { ops::attention_decode_forward<float>(out.data(), q.data(), k.data(), v.data(), s); });
    register_timed(seconds, name("bf16", T), o, 0, benchmark::kMicrosecond,
                   [&, heads] { ops::attention_decode_forward(out.data(), q.data(), k16.data(), v16.data(), heads); });
  }
  FastestRunReporter reporter(&seconds, [](double& x) -> double& { return x; });
  run_benchmarks_interleaved(reporter);
  fmt::print("a decoding step of one attention layer: {} rows, {} heads of {}, {} threads, SIMD target {}: "
             "microseconds per step, fastest of {}\n\n| keys per row | fp32 cache | bf16 cache | fp32 / bf16 |\n"
             "|---|---|---|---|\n",
             B, H, D, omp_get_max_threads(), ops::vmath_target(), o.repetitions);
  for (int64_t T : o.lengths) {
    const double f32 = seconds.at(name("fp32", T)), b16 = seconds.at(name("bf16", T));
    fmt::print("| {} | {:.1f} | {:.1f} | {:.2f}× |\n", T, f32 * 1e6, b16 * 1e6, f32 / b16);
  }
  return 0;
}

}  // namespace

int bench_attention(const BenchAttentionOptions& o) {
  if (o.fused) return bench_attention_fused(o);
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (o.decode_rows > 0) return bench_decode(o);
  const int64_t H = o.heads, D = o.head_dim, C = H * D;
  const bool causal = o.mask == "causal", bf16 = o.precision == "bf16";
  if (bf16 && !ops::bf16_is_native()) {
    throw std::invalid_argument("--precision bf16: this CPU has no native bf16 dot products (" + ops::cpu_isa_name() + ")");
  }
  const std::string what = fmt::format("{} heads of {}, {}{}, {} threads: microseconds per token", H, D,
                                       causal ? "causal" : "full", bf16 ? ", bf16 products" : "", omp_get_max_threads());
  if (o.softmax_only) {
    fmt::print("one softmax attention layer with RoPE, {}\n\n| tokens | forward | forward + backward |\n|---|---|---|\n",
               what);
  } else {
    fmt::print("one attention layer, forward + backward, {}\n\n", what);
    fmt::print("| tokens | softmax + RoPE | linear (elu+1) + RoPE | performer ({} features) + RoPE |\n|---|---|---|---|\n",
               o.performer_features);
  }
  const rope::Plan plan(rope::default_config(static_cast<int32_t>(D)));
  std::vector<std::string> skipped;  // lengths whose softmax was not run, and why
  std::vector<float> W(o.performer_features * D);
  ops::favor_projection(W.data(), o.performer_features, D, 7);
  for (int64_t T : o.lengths) {
    base::check_fits_in_memory(8.0 * sizeof(float) * static_cast<double>(T) * static_cast<double>(C),
                               "--lengths " + std::to_string(T) + " with --heads " + std::to_string(H) + " and --head-dim " +
                                   std::to_string(D));
    std::vector<float> q(T * C), k(T * C), v(T * C), out(T * C), dq(T * C), dk(T * C), dv(T * C), g(T * C);
    for (int64_t i = 0; i < T * C; ++i) {
      q[i] = static_cast<float>(base::uniform01(1, i) - 0.5);
      k[i] = static_cast<float>(base::uniform01(2, i) - 0.5);
      v[i] = static_cast<float>(base::uniform01(3, i) - 0.5);
      g[i] = static_cast<float>(base::uniform01(4, i) - 0.5);
    }
    auto best_of = [&](auto&& run) {
      double best = INFINITY;
      for (int r = 0; r < o.repetitions; ++r) {
        const auto t0 = bench_clock::now();
        run();
        best = std::min(best, seconds_since(t0));
      }
      return best / T * 1e6;
    };
    // Softmax attention with RoPE: q and k rotated, the forward, and with a backward, the gradients
    // rotated back; `saved` as AttentionShape::saved (none: forward only).
    auto softmax_layer = [&](ops::AttentionSaved saved, std::vector<float>& buffer) {
      ops::AttentionShape s{1, T, H, D, causal};
      s.bf16_products = bf16;
      s.saved = saved;
      buffer.resize(ops::attention_saved_size(s));
      float* kept = saved == ops::AttentionSaved::none ? nullptr : buffer.data();
      plan.apply_qk(ROPE_FORWARD, rope::offset_positions(0), rope::bshd(q.data(), ROPE_DTYPE_F32, 1, T, H, D),
                    rope::bshd(k.data(), ROPE_DTYPE_F32, 1, T, H, D));
      ops::attention_forward(out.data(), kept, q.data(), k.data(), v.data(), nullptr, s);
      if (!kept) return;
      ops::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), kept, q.data(), k.data(), v.data(), nullptr, s,
                              out.data());
      plan.apply_qk(ROPE_BACKWARD, rope::offset_positions(0), rope::bshd(dq.data(), ROPE_DTYPE_F32, 1, T, H, D),
                    rope::bshd(dk.data(), ROPE_DTYPE_F32, 1, T, H, D));
    };
    if (o.softmax_only) {
      std::vector<float> stats;
      softmax_layer(ops::AttentionSaved::row_stats, stats);  // untimed, as the peer's warm-up call
      const double forward = best_of([&] { softmax_layer(ops::AttentionSaved::none, stats); });
      const double both = best_of([&] { softmax_layer(ops::AttentionSaved::row_stats, stats); });
      fmt::print("| {} | {:.2f} | {:.2f} |\n", T, forward, both);
      std::fflush(stdout);
      continue;
    }
    const double softmax_gb = static_cast<double>(H) * T * T * sizeof(float) / 1e9;  // the (H, T, T) probabilities
    std::string softmax = "skipped¹";
    if (softmax_gb > o.max_softmax_gb) {
      skipped.push_back(fmt::format("{} tokens: {:.3g} GB", T, softmax_gb));
    } else {
      std::vector<float> att;
      softmax = fmt::format("{:.2f}", best_of([&] { softmax_layer(ops::AttentionSaved::probabilities, att); }));
    }
    auto linear = [&](ops::FeatureMap map) {
      ops::LinearAttentionShape s{1, T, H, D, D, causal};
      s.feature_map = map;
      s.favor_features = map == ops::FeatureMap::favor ? o.performer_features : 0;
      std::vector<float> saved(ops::linear_attention_saved_size(s));
      const float* w = map == ops::FeatureMap::favor ? W.data() : nullptr;
      return fmt::format("{:.2f}", best_of([&] {
        ops::linear_attention_forward(out.data(), saved.data(), q.data(), k.data(), v.data(), w, s);
        ops::linear_attention_backward(dq.data(), dk.data(), dv.data(), g.data(), saved.data(), q.data(), k.data(),
                                       v.data(), w, s);
      }));
    };
    const std::string elu = linear(ops::FeatureMap::elu_plus_one), favor = linear(ops::FeatureMap::favor);
    fmt::print("| {} | {} | {} | {} |\n", T, softmax, elu, favor);
    std::fflush(stdout);
  }
  if (!skipped.empty()) {
    fmt::print("\n¹ softmax attention not run where its (heads, T, T) probabilities need more than --max-softmax-gb {} "
               "({}); linear attention needs no such matrix\n",
               o.max_softmax_gb, fmt::join(skipped, ", "));
  }
  return 0;
}

}  // namespace roformer
