// What the `roformer bench` commands that Google Benchmark times share: a reporter that keeps each
// benchmark's fastest repetition, and a cap on Highway's SIMD dispatch (--simd-target), so that an
// AVX-512 CPU can time the AVX2 paths too.
#pragma once

#include <benchmark/benchmark.h>
#include <strings.h>  // strcasecmp

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "hwy/targets.h"

namespace roformer {

// Keeps the fastest repetition of each benchmark: seconds(results->find(name)->second) becomes the
// least seconds per iteration of the runs of that name (names results does not hold are ignored).
template <class Results, class Seconds>
class FastestRunReporter : public benchmark::BenchmarkReporter {
 public:
  FastestRunReporter(Results* results, Seconds seconds) : results_(results), seconds_(seconds) {}
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration || run.iterations == 0) continue;
      auto it = results_->find(run.run_name.function_name);
      if (it == results_->end()) continue;
      double& s = seconds_(it->second);
      s = std::min(s, run.real_accumulated_time / static_cast<double>(run.iterations));
    }
  }

 private:
  Results* results_;
  Seconds seconds_;
};

// Disables every Highway target better than `name` (lower bits are better targets): the
// --simd-target option of the bench commands, empty for the CPU's best. Throws std::invalid_argument
// naming the option if the CPU does not support that target.
inline void cap_simd_target(const std::string& name) {
  if (name.empty()) return;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    if (strcasecmp(hwy::TargetName(target), name.c_str()) == 0) {
      hwy::DisableTargets(target - 1);
      return;
    }
  }
  throw std::invalid_argument("--simd-target " + name + ": not a Highway target this CPU supports");
}

// Runs the registered benchmarks with their repetitions in random order (so the machine's noise
// spreads evenly over them), reports to `reporter`, and clears them.
inline void run_benchmarks_interleaved(benchmark::BenchmarkReporter& reporter) {
  std::string interleave = "--benchmark_enable_random_interleaving=true";
  std::string program = "roformer";
  char* argv[] = {program.data(), interleave.data(), nullptr};
  int argc = 2;
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::ClearRegisteredBenchmarks();
}

}  // namespace roformer
