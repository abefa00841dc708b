// The struct generations of the C ABI (include/rope/rope.h, ROPE_ABI_VERSION): how many bytes of
// each public struct a caller compiled with generation `abi` has, so that an entry point reads and
// writes only those and gives the rest their defaults (all-zero for every field added so far).
#pragma once

#include <cstddef>
#include <cstring>

#include "rope/rope.h"

namespace rope {

// ROPE_OK for 1 <= abi <= ROPE_ABI_VERSION; else ROPE_ERR_UNSUPPORTED naming both generations.
rope_status check_abi(int32_t abi);

// Bytes of each struct in generation `abi` (which check_abi accepted).
size_t positions_bytes(int32_t abi);
size_t exec_bytes(int32_t abi);
// rope_config and rope_tensor have one layout in every generation so far.
constexpr size_t config_bytes(int32_t) { return sizeof(rope_config); }

// The caller's struct of `bytes` bytes as this library's struct, its newer fields zero.
template <class T>
T read_struct(const T& caller, size_t bytes) {
  T value{};
  std::memcpy(&value, &caller, bytes);
  return value;
}

}  // namespace rope
