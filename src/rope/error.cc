// Thread-local error messages and status names for the C ABI.
#include "error.h"

#include <cstdarg>
#include <cstdio>

namespace rope {
namespace {
thread_local char g_message[512] = "";
}

rope_status fail(rope_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(g_message, sizeof g_message, format, args);
  va_end(args);
  return status;
}

void clear_error() { g_message[0] = '\0'; }

}  // namespace rope

extern "C" const char* rope_last_error(void) { return rope::g_message; }

extern "C" const char* rope_status_string(rope_status status) {
  switch (status) {
    case ROPE_OK: return "ok";
    case ROPE_ERR_NULL_POINTER: return "null pointer";
    case ROPE_ERR_INVALID_ARGUMENT: return "invalid argument";
    case ROPE_ERR_BAD_SHAPE: return "bad shape";
    case ROPE_ERR_BAD_STRIDE: return "bad stride";
    case ROPE_ERR_BAD_POSITION: return "bad position";
    case ROPE_ERR_OVERLAP: return "overlapping buffers";
    case ROPE_ERR_OUT_OF_MEMORY: return "out of memory";
    case ROPE_ERR_UNSUPPORTED: return "unsupported";
    case ROPE_ERR_DEVICE: return "device error";
  }
  return "unknown status";
}

#define ROPE_STR_(x) #x
#define ROPE_STR(x) ROPE_STR_(x)
extern "C" const char* rope_version(void) {
  return ROPE_STR(ROPE_VERSION_MAJOR) "." ROPE_STR(ROPE_VERSION_MINOR) "." ROPE_STR(ROPE_VERSION_PATCH);
}
