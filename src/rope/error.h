// Error reporting for the C ABI: each failing call records a message in a thread-local buffer
// that rope_last_error() returns. Internal code returns rope_status through rope::fail(...).
#pragma once

#include "rope/rope.h"

namespace rope {

// Records printf-style message for this thread and returns `status`.
rope_status fail(rope_status status, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Clears the message (called at the start of each public entry point).
void clear_error();

}  // namespace rope

// Propagates a non-OK status.
#define ROPE_TRY(expr)                        \
  do {                                        \
    const rope_status rope_try_s_ = (expr);   \
    if (rope_try_s_ != ROPE_OK) return rope_try_s_; \
  } while (0)
