// base::Error: the one exception type for bad input of every layer (a malformed file, a bad config
// value, an unreadable vocabulary), with a message naming what was wrong and where. io::Error is the
// same type under io's name (io/weights.h), so a handler for either catches both.
#pragma once

#include <stdexcept>

namespace base {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace base
