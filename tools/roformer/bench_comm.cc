// `roformer bench comm`, run under mpirun: the time of one gradient allreduce (fp32 sum over every
// rank, train::Communicator) by message size, for docs/distributed.md's scaling model. Each size runs
// for at least --min-time seconds after a warm-up; rank 0 prints the median, the algorithmic rate
// (bytes / time) and the bus rate (2(N−1)/N · bytes / time, what a ring allreduce moves per link).
#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"
#include "commands.h"
#include "train/comm.h"

namespace roformer {

int bench_comm(const BenchCommOptions& o) {
  // An empty range would print an empty table and succeed.
  if (o.min_bytes > o.max_bytes) {
    throw std::invalid_argument("--min-bytes " + std::to_string(o.min_bytes) + " is more than --max-bytes " +
                                std::to_string(o.max_bytes));
  }
  train::Communicator& comm = train::world();
  const int N = comm.size();
  nlohmann::json rows = nlohmann::json::array();
  if (comm.rank() == 0 && !o.json) {
    fmt::print("allreduce (fp32 sum) over {} processes ({})\n\n| bytes | median µs | algorithmic GB/s | bus GB/s |\n"
               "|---|---|---|---|\n", N, comm.name());
  }
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    std::vector<float> data(static_cast<size_t>(bytes / 4), 1.0f);
    const int64_t n = static_cast<int64_t>(data.size());
    for (int i = 0; i < 3; ++i) comm.allreduce_sum(data.data(), n);
    std::vector<double> times;
    const auto start = bench_clock::now();
    // Every rank runs the same number of repetitions: rank 0's clock decides, and tells the others.
    for (double go = 1; go > 0;) {
      const auto t0 = bench_clock::now();
      comm.allreduce_sum(data.data(), n);
      times.push_back(seconds_since(t0));
      go = comm.rank() == 0 && (seconds_since(start) < o.min_time || times.size() < 5) ? 1 : 0;
      comm.allreduce_sum(&go, 1);
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    const double algo = static_cast<double>(bytes) / t * 1e-9, bus = algo * 2.0 * (N - 1) / N;
    rows.push_back({{"bytes", bytes}, {"median_us", t * 1e6}, {"algorithmic_gb_s", algo}, {"bus_gb_s", bus},
                    {"repetitions", times.size()}});
    if (comm.rank() == 0 && !o.json) fmt::print("| {} | {:.1f} | {:.3f} | {:.3f} |\n", bytes, t * 1e6, algo, bus);
  }
  if (comm.rank() == 0 && o.json) {
    fmt::print("{}\n", nlohmann::json{{"tool", "roformer bench comm"}, {"processes", N}, {"sizes", rows}}.dump(2));
  }
  comm.finish();
  return 0;
}

}  // namespace roformer
