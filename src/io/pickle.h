// Internal to src/io: a restricted unpickler for PyTorch state dicts (torch.save's data.pkl, and the
// pickles of the legacy pre-1.6 format). It never executes or imports anything: it interprets only
// the opcodes a tensor state dict needs (protocols 2-5: PROTO, FRAME, MARK, EMPTY_DICT/LIST/TUPLE,
// TUPLE*, BINUNICODE*, BININT*, LONG1, BINFLOAT, NONE, NEWTRUE/NEWFALSE, BINPUT/BINGET/MEMOIZE,
// GLOBAL/STACK_GLOBAL, BINPERSID, REDUCE, BUILD, SETITEM(S), APPEND(S), STOP) and resolves only the
// globals torch.load(weights_only=True) allows for them: collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter / _rebuild_parameter_with_state, torch.Size
// and the typed storage classes (torch.FloatStorage, HalfStorage, BFloat16Storage, LongStorage, ...).
// Anything else is an io::Error naming the origin, the opcode or global, and the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/weights.h"

namespace io::pickle {

// A storage a persistent id ('storage', torch.XStorage, key, location, numel[, view_metadata]) names.
struct Storage {
  std::string key;
  DType dtype;
  int64_t numel;
};

// A tensor as _rebuild_tensor_v2(storage, storage_offset, size, stride, ...) describes it.
struct TensorRef {
  size_t storage;  // index into StateDict::storages
  int64_t offset;
  std::vector<int64_t> size, stride;
};

struct StateDict {
  std::vector<Storage> storages;                          // distinct keys, in first-use order
  std::vector<std::pair<std::string, TensorRef>> tensors;  // in pickle order; names are unique
};

// Unpickles the pickle at the start of [data, data + size) as a dict (or OrderedDict) of name →
// tensor; `*consumed` gets the bytes up to and including STOP. `origin` prefixes every error.
StateDict load_state_dict(const uint8_t* data, size_t size, const std::string& origin, size_t* consumed = nullptr);

// Legacy-format helpers: a list of strings (the storage keys), and the sys_info dict's
// "little_endian" flag (false when absent or not a bool).
std::vector<std::string> load_string_list(const uint8_t* data, size_t size, const std::string& origin,
                                          size_t* consumed);
bool load_sys_info_little_endian(const uint8_t* data, size_t size, const std::string& origin, size_t* consumed);

}  // namespace io::pickle
