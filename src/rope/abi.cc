// The struct generations of the C ABI: the size of each public struct as every released header laid
// it out. A generation adds fields at the end of structs, never elsewhere (docs/rope.md, "ABI").
#include "abi.h"

#include <cstddef>

#include "error.h"

namespace rope {

rope_status check_abi(int32_t abi) {
  if (abi >= 1 && abi <= ROPE_ABI_VERSION) return ROPE_OK;
  return fail(ROPE_ERR_UNSUPPORTED,
              "the caller was built against librope struct generation %d (ROPE_ABI_VERSION), but this "
              "library (%d.%d.%d) reads generations 1 to %d: link the librope its header came from",
              static_cast<int>(abi), ROPE_VERSION_MAJOR, ROPE_VERSION_MINOR, ROPE_VERSION_PATCH,
              ROPE_ABI_VERSION);
}

size_t positions_bytes(int32_t abi) {
  return abi >= 2 ? sizeof(rope_positions) : offsetof(rope_positions, index_type);
}

size_t exec_bytes(int32_t abi) { return abi >= 2 ? sizeof(rope_exec) : offsetof(rope_exec, stream); }

}  // namespace rope
