// Sizes that imply memory are checked against the machine before anything is allocated, so that a
// huge option or config value is refused with the option's name instead of ending in std::bad_alloc
// (or the kernel's OOM killer) after minutes of work.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>

#include "base/error.h"

namespace base {

// This machine's physical memory in bytes (0 when the system does not say).
inline double machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

// Throws base::Error "<what> needs N GiB, more than this machine's M GiB" when bytes exceed the memory.
inline void check_fits_in_memory(double bytes, const std::string& what) {
  const double memory = machine_memory_bytes();
  if (memory <= 0 || bytes <= memory) return;
  auto gib = [](double b) { return std::to_string(static_cast<int64_t>(b / 1073741824.0 + 0.5)); };
  throw Error(what + " needs " + gib(bytes) + " GiB, more than this machine's " + gib(memory) + " GiB");
}

}  // namespace base
