// --threads for every command: the CLI11 check of base's thread bound, and the same bound on
// OMP_NUM_THREADS, which OpenMP reads by itself (main checks it before any parallel region).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <sstream>
#include <string>

#include "base/threads.h"

namespace roformer {

// The validator for a --threads option: 0 (all cores) to base::kMaxThreads.
inline CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        long long n = 0;
        std::size_t used = 0;
        try {
          n = std::stoll(value, &used);
        } catch (const std::exception&) {
          return "'" + value + "' is not a thread count";
        }
        if (used != value.size()) return "'" + value + "' is not a thread count";
        return base::thread_count_problem(n);
      },
      "0 (all cores) to " + std::to_string(base::kMaxThreads), "THREADS");
}

// "" when OMP_NUM_THREADS is unset or every count in it (a comma-separated list) is in range; else the
// error line.
inline std::string omp_num_threads_problem() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  if (env == nullptr) return "";
  std::stringstream list(env);
  std::string item;
  while (std::getline(list, item, ',')) {
    std::string copy = item;
    const std::string problem = thread_count()(copy);
    if (!problem.empty()) return std::string("OMP_NUM_THREADS=") + env + ": " + problem;
  }
  return "";
}

}  // namespace roformer
