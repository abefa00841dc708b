// The bound on OpenMP thread counts, wherever one comes from (--threads, OMP_NUM_THREADS, a run's saved
// options, Python's set_threads): asked for tens of thousands of threads, the OpenMP runtime fails to
// start them and crashes inside its first parallel region instead of reporting anything. Also the size
// below which a loop is not worth a parallel region.
#pragma once

#include <string>

#include "base/error.h"

namespace base {

inline constexpr int kMaxThreads = 1024;

// Below this many elements an elementwise loop stays on the calling thread: opening a parallel region
// costs more than the work it would share.
inline constexpr long long kParallelMinElements = 1 << 15;

// "" when 0 <= threads <= kMaxThreads (0: OpenMP's default, all cores), else what is wrong, in words.
inline std::string thread_count_problem(long long threads) {
  if (threads < 0) return std::to_string(threads) + " threads: the count cannot be negative (0: all cores)";
  if (threads > kMaxThreads) {
    return std::to_string(threads) + " threads: at most " + std::to_string(kMaxThreads) + " (0: all cores)";
  }
  return "";
}

// Throws base::Error "<what>: <problem>" unless the count is in range.
inline void check_thread_count(long long threads, const std::string& what) {
  const std::string problem = thread_count_problem(threads);
  if (!problem.empty()) throw Error(what + ": " + problem);
}

}  // namespace base
