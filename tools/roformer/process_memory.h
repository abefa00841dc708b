// Peak resident memory of this process for the benchmarks: VmHWM from /proc/self/status, the high
// water mark of this address space. Not getrusage's ru_maxrss, which Linux carries across execve, so
// a process started by a big one (a Python peer that imported torch) would report its parent's peak.
#pragma once

#include <fstream>
#include <string>

namespace roformer {

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
