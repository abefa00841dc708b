// The running program's own file, for what re-executes it (the command line's default environment)
// and what fingerprints it (the ranks' agreement check): /proc/self/exe, except where the program was
// started as the dynamic loader's argument (`ld.so PROGRAM ARGS...`, as scripts/device-bundle.sh's
// wrapper starts it, to run with its own glibc): there /proc/self/exe is the loader.
#pragma once

#include <sys/auxv.h>

#include <string>

namespace base {

// Whether the process began as the dynamic loader run with the program as its argument: the kernel
// then loaded no interpreter (AT_BASE 0; the program is dynamically linked, as every build is).
inline bool started_by_loader() { return getauxval(AT_BASE) == 0; }

// The program's file: /proc/self/exe, or under the loader the path the loader was given (AT_EXECFN,
// which glibc's loader sets to it, as argv[0]).
inline std::string program_file() {
  if (started_by_loader()) return reinterpret_cast<const char*>(getauxval(AT_EXECFN));
  return "/proc/self/exe";
}

}  // namespace base
