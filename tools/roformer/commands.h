// Subcommands of the roformer command line; each returns the process exit status.
#pragma once

#include <string>

namespace roformer {

struct RopeCheckOptions {
  int samples = 2000;   // positions sampled per band
  bool json = false;
};
int rope_check(const RopeCheckOptions& options);

struct BenchRopeOptions {
  bool json = false;
  double min_time = 0.2;   // seconds per benchmark
  int repetitions = 3;     // the fastest repetition is reported
  std::string filter;      // substring of the benchmark name
  bool quick = false;      // tiny shapes, for smoke tests
};
int bench_rope(const BenchRopeOptions& options);

}  // namespace roformer
