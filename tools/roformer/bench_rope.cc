// `roformer bench rope`: librope speed on the shapes, with this machine's memory floor
// measured in the same run (Google Benchmark drives the timing; the fastest repetition counts).
//   prefill: q and k [4096 tokens, 32 heads, 128], positions 0..4095, batch 1
//   decode:  q and k [16 tokens, 32 heads, 128] at positions 4000..4015 (and q alone: decode_q)
// × forward/backward × interleaved/half × f32/bf16 × in/out of place × table/on the fly × 1/2 threads.
// Bytes = q and k read plus written. Floor: in-place scale (for in place) or streaming copy (out of
// place) over the same bytes and threads; the fraction printed is floor time / our time.
// --simd-target caps Highway's dispatch (librope's kernels and the floor alike), so an AVX-512 CPU
// can measure the AVX2 paths.
#include <benchmark/benchmark.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "bench_gbench.h"
#include "bench_util.h"
#include "commands.h"
#include "hwy/aligned_allocator.h"
#include "memory_floor.h"
#include "rope/convert.h"
#include "rope/rope.hpp"

namespace roformer {
namespace {

struct Shape {
  const char* name;
  int64_t tokens, start, heads, head_dim;
  bool q_only;  // one tensor instead of q and k
};

// 64-byte aligned, as framework tensors are (and as non-temporal stores need).
struct Buffer {
  hwy::AlignedFreeUniquePtr<uint8_t[]> data;
  size_t bytes = 0;
  uint8_t* get() const { return data.get(); }
  size_t size() const { return bytes; }
};

struct Buffers {
  Buffer q, k, q_out, k_out;
};

// `bytes` of N(0, 1) values in the dtype's own format: fp32 bit patterns read as bf16 pairs would put
// a random exponent in every other element (infinities, NaNs, denormals no real q or k holds).
Buffer normal_buffer(rope_dtype dtype, size_t bytes, std::mt19937_64& rng) {
  Buffer b{hwy::AllocateAligned<uint8_t>(bytes), bytes};
  std::normal_distribution<float> normal;
  const size_t es = rope::dtype_size(dtype);
  for (size_t i = 0; i + es <= bytes; i += es) {
    const float f = normal(rng);
    if (dtype == ROPE_DTYPE_F32) {
      std::memcpy(b.get() + i, &f, 4);
    } else {
      const uint16_t h = dtype == ROPE_DTYPE_BF16 ? rope::f32_to_bf16(f) : rope::f32_to_f16(f);
      std::memcpy(b.get() + i, &h, 2);
    }
  }
  return b;
}

struct Result {
  std::string shape, dtype, layout, direction, mode;
  bool in_place = false, floor = false;
  int threads = 0;
  double bytes = 0, seconds = 1e30;
};

std::string floor_key(const std::string& shape, const std::string& dtype, bool in_place, int threads) {
  return fmt::format("floor/{}/{}/{}/t{}", shape, dtype, in_place ? "inplace_scale" : "stream_copy", threads);
}

// The run's floor for a kernel result (same shape, dtype, place and threads).
const Result& floor_of(const std::map<std::string, Result>& results, const Result& r) {
  return results.at(floor_key(r.shape, r.dtype, r.in_place, r.threads));
}

// `bench rope --json`: the floors and every kernel result with its fraction of the floor.
nlohmann::json results_json(const std::map<std::string, Result>& results) {
  nlohmann::json out;
  out["cpu_target"] = rope_cpu_target();
  for (const auto& [name, r] : results) {
    const double ms = r.seconds * 1e3, gbps = r.bytes / r.seconds / 1e9;
    if (r.floor) {
      out["floor"].push_back({{"name", r.in_place ? "inplace_scale" : "stream_copy"}, {"case", r.shape},
                              {"dtype", r.dtype}, {"threads", r.threads}, {"bytes", r.bytes}, {"ms", ms}, {"gbps", gbps}});
      continue;
    }
    out["results"].push_back({{"name", name}, {"case", r.shape}, {"dtype", r.dtype}, {"layout", r.layout},
                              {"direction", r.direction}, {"inplace", r.in_place}, {"mode", r.mode},
                              {"threads", r.threads}, {"bytes", r.bytes}, {"ms", ms}, {"gbps", gbps},
                              {"floor_fraction", floor_of(results, r).seconds / r.seconds}});
  }
  return out;
}

// The human-readable tables, then librope's targets from the forward interleaved table-mode runs.
void print_report(const std::map<std::string, Result>& results, int repetitions) {
  fmt::print("librope RoPE benchmark (SIMD target {}; fastest of {} repetitions; floor measured in this run)\n\n",
             rope_cpu_target(), repetitions);
  fmt::print("{:<12}{:>6}{:>9}{:>12}{:>10}\n", "floor", "dtype", "threads", "ms", "GB/s");
  for (const auto& [name, r] : results) {
    if (!r.floor) continue;
    fmt::print("{:<12}{:>6}{:>9}{:>12.4f}{:>10.1f}   {} {}\n", r.shape, r.dtype, r.threads, r.seconds * 1e3,
               r.bytes / r.seconds / 1e9, r.in_place ? "in-place scale" : "copy", "");
  }
  fmt::print("\n{:<58}{:>12}{:>10}{:>10}\n", "benchmark (case/dtype/layout/dir/place/mode/threads)", "ms", "GB/s",
             "of floor");
  for (const auto& [name, r] : results) {
    if (r.floor) continue;
    fmt::print("{:<58}{:>12.4f}{:>10.1f}{:>9.0f}%\n", name, r.seconds * 1e3, r.bytes / r.seconds / 1e9,
               100.0 * floor_of(results, r).seconds / r.seconds);
  }
  // librope's targets, from the forward interleaved table-mode runs: fractions of the floor for
  // prefill (f32 85% with AVX2, 90% with AVX-512; bf16 75%), time over the floor for decode q+k.
  auto get = [&](const std::string& name) -> const Result* {
    auto it = results.find(name);
    return it == results.end() ? nullptr : &it->second;
  };
  const bool avx2 = std::string(rope_cpu_target()) == "AVX2";
  fmt::print("\ntargets (forward, interleaved, table mode unless noted; SIMD target {})\n", rope_cpu_target());
  auto line = [&](const std::string& what, const std::string& name, double want, bool times_floor = false) {
    const Result* r = get(name);
    if (r == nullptr) return;
    const double frac = floor_of(results, *r).seconds / r->seconds;
    if (times_floor) {
      fmt::print("  {:<52} {:>8.2f}x floor      target <= {:.1f}x   {}\n", what, 1 / frac, want,
                 1 / frac <= want ? "met" : "MISSED");
      return;
    }
    fmt::print("  {:<52} {:>8.0f}% of floor   target >= {:.0f}%   {}\n", what, 100 * frac, 100 * want,
               frac >= want ? "met" : "MISSED");
  };
  for (const char* dt : {"f32", "bf16"}) {
    const double want = std::string(dt) == "bf16" ? 0.75 : avx2 ? 0.85 : 0.9;
    for (const char* place : {"inplace", "outofplace"}) {
      for (int t : {1, 2}) {
        line(fmt::format("prefill {} {}, {} thread{}", dt, place == std::string("inplace") ? "in place" : "out of place", t,
                         t > 1 ? "s" : ""),
             fmt::format("prefill/{}/interleaved/fwd/{}/table/t{}", dt, place, t), want);
      }
    }
  }
  line("decode q+k f32 in place, 1 thread", "decode/f32/interleaved/fwd/inplace/table/t1", 1.3, true);
  line("decode q+k bf16 in place, 1 thread", "decode/bf16/interleaved/fwd/inplace/table/t1", 2.0, true);
  for (const char* t : {"t1", "t2"}) {
    const Result* a = get(fmt::format("prefill/f32/interleaved/fwd/inplace/on_the_fly/{}", t));
    const Result* b = get(fmt::format("prefill/f32/interleaved/fwd/inplace/table/{}", t));
    if (a && b) {
      const double ratio = a->seconds / b->seconds;
      fmt::print("  {:<52} {:>8.2f}x table   target <= 1.20x   {}\n", fmt::format("prefill on the fly vs table, {}", t),
                 ratio, ratio <= 1.2 ? "met" : "MISSED");
    }
  }
}

using AddBenchmark = std::function<void(const std::string&, Result, std::function<void(benchmark::State&)>)>;
using Plans = std::map<std::pair<int, int>, std::unique_ptr<rope::Plan>>;

// One (shape, dtype, threads, place): its memory floor, then librope in every layout, cos/sin mode
// and direction over the same buffers.
void register_case(const AddBenchmark& add, const Shape& s, rope_dtype dtype, Buffers& buf, Plans& plans, int threads,
                   bool in_place) {
  const double bytes = 2.0 * (buf.q.size() + (s.q_only ? 0 : buf.k.size()));  // read + write
  Result r;
  r.shape = s.name;
  r.dtype = dtype_name(dtype);
  r.in_place = in_place;
  r.floor = true;
  r.threads = threads;
  r.bytes = bytes;
  const size_t n = buf.q.size() / 4;
  const bool q_only = s.q_only;
  const size_t call_bytes = static_cast<size_t>(bytes);
  add(floor_key(s.name, r.dtype, in_place, threads), r, [&buf, n, in_place, threads, q_only, call_bytes](benchmark::State& st) {
    auto* q = reinterpret_cast<float*>(buf.q.get());
    auto* k = reinterpret_cast<float*>(buf.k.get());
    for (auto _ : st) {
      if (in_place) {
        floor_scale(q, n, 1.0f, threads);
        if (!q_only) floor_scale(k, n, 1.0f, threads);
      } else {
        floor_copy(q, reinterpret_cast<float*>(buf.q_out.get()), n, call_bytes, threads);
        if (!q_only) floor_copy(k, reinterpret_cast<float*>(buf.k_out.get()), n, call_bytes, threads);
      }
      benchmark::ClobberMemory();
    }
  });
  for (rope_layout layout : {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF}) {
    for (rope_cos_sin_mode mode : {ROPE_MODE_TABLE, ROPE_MODE_ON_THE_FLY}) {
      for (rope_direction dir : {ROPE_FORWARD, ROPE_BACKWARD}) {
        Result x = r;
        x.floor = false;
        x.layout = layout == ROPE_LAYOUT_HALF ? "half" : "interleaved";
        x.mode = mode == ROPE_MODE_TABLE ? "table" : "on_the_fly";
        x.direction = dir == ROPE_FORWARD ? "fwd" : "bwd";
        const std::string name = fmt::format("{}/{}/{}/{}/{}/{}/t{}", s.name, x.dtype, x.layout, x.direction,
                                             in_place ? "inplace" : "outofplace", x.mode, threads);
        const rope::Plan* plan = plans[{layout, mode}].get();
        add(name, x, [&buf, plan, s, dtype, dir, in_place, threads](benchmark::State& st) {
          const rope_tensor q = rope::bshd(buf.q.get(), dtype, 1, s.tokens, s.heads, s.head_dim);
          const rope_tensor k = rope::bshd(buf.k.get(), dtype, 1, s.tokens, s.heads, s.head_dim);
          const rope_tensor qo = rope::bshd(buf.q_out.get(), dtype, 1, s.tokens, s.heads, s.head_dim);
          const rope_tensor ko = rope::bshd(buf.k_out.get(), dtype, 1, s.tokens, s.heads, s.head_dim);
          const rope_positions pos = rope::offset_positions(s.start);
          const rope_exec exec{threads, ROPE_BACKEND_AUTO, nullptr};
          for (auto _ : st) {
            if (s.q_only) {
              plan->apply(dir, ROPE_ROLE_QUERY, pos, q, in_place ? nullptr : &qo, &exec);
            } else {
              plan->apply_qk(dir, pos, q, k, in_place ? nullptr : &qo, in_place ? nullptr : &ko, &exec);
            }
            benchmark::ClobberMemory();
          }
        });
      }
    }
  }
}

}  // namespace

int bench_rope(const BenchRopeOptions& options) {
  cap_simd_target(options.simd_target);
  const std::vector<Shape> shapes = options.quick
                                        ? std::vector<Shape>{{"prefill", 256, 0, 8, 128, false}, {"decode", 16, 4000, 8, 128, false}}
                                        : std::vector<Shape>{{"prefill", 4096, 0, 32, 128, false},
                                                             {"decode", 16, 4000, 32, 128, false},
                                                             {"decode_q", 16, 4000, 32, 128, true}};
  const double min_time = options.quick ? 0.01 : options.min_time;
  const int repetitions = options.quick ? 1 : options.repetitions;

  // Plans: (layout, mode).
  Plans plans;
  for (rope_layout layout : {ROPE_LAYOUT_INTERLEAVED, ROPE_LAYOUT_HALF}) {
    for (rope_cos_sin_mode mode : {ROPE_MODE_TABLE, ROPE_MODE_ON_THE_FLY}) {
      rope_config cfg = rope::default_config(128);
      cfg.layout = layout;
      cfg.mode = mode;
      cfg.table_positions = 4096 + 16;
      plans[{layout, mode}] = std::make_unique<rope::Plan>(cfg);
    }
  }
  // Buffers per (shape, dtype), random N(0, 1) contents.
  std::map<std::pair<std::string, int>, Buffers> buffers;
  std::mt19937_64 rng(4096);
  for (const Shape& s : shapes) {
    for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_BF16}) {
      const size_t bytes = s.tokens * s.heads * s.head_dim * rope::dtype_size(dtype);
      Buffers& b = buffers[{s.name, dtype}];
      for (Buffer* v : {&b.q, &b.k, &b.q_out, &b.k_out}) *v = normal_buffer(dtype, bytes, rng);
    }
  }

  std::map<std::string, Result> results;
  auto wanted = [&](const std::string& name) { return options.filter.empty() || name.find(options.filter) != std::string::npos; };
  const AddBenchmark add = [&](const std::string& name, Result r, std::function<void(benchmark::State&)> fn) {
    if (!wanted(name) && !r.floor) return;
    results[name] = r;
    benchmark::RegisterBenchmark(name.c_str(), fn)
        ->UseRealTime()
        ->MinTime(min_time)
        ->Repetitions(repetitions)
        ->Unit(benchmark::kMillisecond);
  };

  for (const Shape& s : shapes) {
    for (rope_dtype dtype : {ROPE_DTYPE_F32, ROPE_DTYPE_BF16}) {
      for (int threads : {1, 2}) {
        for (bool in_place : {true, false}) register_case(add, s, dtype, buffers[{s.name, dtype}], plans, threads, in_place);
      }
    }
  }

  // Repetitions of all benchmarks run in random order, so this machine's noise spreads evenly over
  // the floor and the kernels instead of biasing whichever ran in a bad moment.
  FastestRunReporter reporter(&results, [](Result& r) -> double& { return r.seconds; });
  run_benchmarks_interleaved(reporter);

  const nlohmann::json out = results_json(results);
  if (options.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  print_report(results, repetitions);
  return 0;
}

}  // namespace roformer
