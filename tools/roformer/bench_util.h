// What the `roformer bench` commands share: librope dtype names, a model's linear layers by name,
// wall-clock seconds, and the peak
// resident memory of this process (VmHWM from /proc/self/status, the high water mark of this address
// space; not getrusage's ru_maxrss, which Linux carries across execve, so a process started by a big
// one, such as a Python peer that imported torch, would report its parent's peak).
#pragma once

#include <chrono>
#include <fstream>
#include <string>

#include <fmt/core.h>

#include "model/roformer.h"
#include "rope/rope.h"

namespace roformer {

// A librope dtype as the benchmark and check reports name it.
inline const char* dtype_name(rope_dtype d) {
  return d == ROPE_DTYPE_F32 ? "f32" : d == ROPE_DTYPE_F16 ? "f16" : d == ROPE_DTYPE_BF16 ? "bf16" : "f64";
}

using bench_clock = std::chrono::steady_clock;

inline double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

// The value of `key` (in kB) in a /proc file of "Key:  value kB" lines, in MiB; 0 when absent.
inline double proc_field_mib(const char* path, const std::string& key) {
  std::ifstream status(path);
  std::string name;
  double kib = 0;
  while (status >> name) {
    if (name == key) {
      status >> kib;
      break;
    }
    status.ignore(1 << 20, '\n');
  }
  return kib / 1024.0;
}

inline double peak_rss_mib() { return proc_field_mib("/proc/self/status", "VmHWM:"); }

// The process's memory now on transparent huge pages (training asks for them: tools/roformer/main.cc).
inline double huge_pages_mib() { return proc_field_mib("/proc/self/smaps_rollup", "AnonHugePages:"); }

// How a model's linear layers run, as the reports name it: "f32 (OpenBLAS)", "int8 (oneDNN)", ...
inline std::string linears_name(const model::RoFormer<float>& m) {
  if (!m.packed()) return "f32 (OpenBLAS)";
  if (m.packed_precision() == ops::Precision::f32) return "f32 packed (oneDNN)";
  return fmt::format("{} (oneDNN)", ops::precision_name(m.packed_precision()));
}

}  // namespace roformer
