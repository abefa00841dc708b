// How long libgomp's idle workers spin before they sleep, and what waking them costs, on this machine:
// 2,000 parallel regions of 50 µs of work on 2 threads, each followed by a serial gap of the given
// length on the calling thread. Where the gap outlasts GOMP_SPINCOUNT turns, the worker sleeps and the
// next region waits for it to wake (the iteration time exceeds 50 µs + gap; `perf stat -e
// context-switches` counts the sleeps). Not part of the build (docs/perf.md, "Fewer sleeping workers"):
//   g++ -O2 -fopenmp bench/omp_gap.cc -o build/omp_gap
//   for g in 2 5 10 20 40; do GOMP_SPINCOUNT=1000 perf stat -e context-switches build/omp_gap $g; done
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const double gap_us = argc > 1 ? std::atof(argv[1]) : 10.0;
  volatile double sink = 0;
  auto busy = [&](double us) {
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() < us) sink = sink + 1;
  };
  constexpr int kRegions = 2000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kRegions; ++i) {
#pragma omp parallel num_threads(2)
    busy(50);
    busy(gap_us);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("gap %.0f us: %.1f us per iteration (%.0f without waits)\n", gap_us, s / kRegions * 1e6, 50 + gap_us);
}
