// base::Error: the one exception type for bad input of every layer (a malformed file, a bad config
// value, an unreadable vocabulary), with a message naming what was wrong and where. io::Error is the
// same type under io's name (io/weights.h), so a handler for either catches both.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace base {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input at a line of a file: "ORIGIN:LINE: WHAT".
[[noreturn]] inline void fail_at(const std::string& origin, int64_t line, const std::string& what) {
  throw Error(origin + ":" + std::to_string(line) + ": " + what);
}

}  // namespace base
