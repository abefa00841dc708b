// What the `roformer bench` commands share: wall-clock seconds, and the peak resident memory of this
// process (VmHWM from /proc/self/status, the high water mark of this address space; not getrusage's
// ru_maxrss, which Linux carries across execve, so a process started by a big one, such as a Python
// peer that imported torch, would report its parent's peak).
#pragma once

#include <chrono>
#include <fstream>
#include <string>

namespace roformer {

using bench_clock = std::chrono::steady_clock;

inline double seconds_since(bench_clock::time_point t0) {
  return std::chrono::duration<double>(bench_clock::now() - t0).count();
}

inline double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  double kib = 0;
  while (status >> key) {
    if (key == "VmHWM:") {
      status >> kib;
      break;
    }
    status.ignore(1 << 20, '\n');
  }
  return kib / 1024.0;
}

}  // namespace roformer
