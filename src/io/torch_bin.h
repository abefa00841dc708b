// PyTorch checkpoints (pytorch_model.bin) as an io::WeightStore, loaded without running Python:
// - the zip format of torch.save (PyTorch ≥ 1.6): <prefix>/data.pkl, <prefix>/data/<key> storage
//   records, <prefix>/version, optionally <prefix>/byteorder. The zip is read with minizip (over the
//   memory-mapped file); stored members, which torch.save always writes, are used in place, compressed
//   ones are inflated into memory. CRCs are checked.
// - the legacy format (torch.save(..., _use_new_zipfile_serialization=False), PyTorch < 1.6): magic
//   number, protocol and sys_info pickles, the state dict pickle, the storage key list, then each
//   storage as an int64 element count and its bytes.
// data.pkl goes through io::pickle's restricted unpickler (no code runs; only tensor state dict
// opcodes and globals). Tensors with any strides and storage offsets are supported: a contiguous view
// points into the file, others are gathered into a row-major copy; tensors sharing a storage (tied
// weights) share its bytes. Every problem is an io::Error naming the file and, where it applies, the
// member, the opcode or global, the storage or the tensor.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/mapped_file.h"
#include "io/weights.h"

namespace io {
namespace pickle {
struct StateDict;
}

class TorchBin : public WeightStore {
 public:
  // Maps and validates `path`; throws io::Error. `names`: see io::Names.
  explicit TorchBin(const std::string& path, Names names = Names::kAsStored);

  bool legacy_format() const { return legacy_; }
  // Tensors stored uncompressed in a mapped file leave the resident set; copies stay.
  void release(const Tensor& t) const override { file_.release(t.data, t.bytes); }

 private:
  void load_zip();
  void load_legacy();
  // Adds the tensors of a parsed state dict; storage i's bytes are storages[i] (size checked here).
  void add_tensors(const pickle::StateDict& sd, const std::vector<std::pair<const uint8_t*, size_t>>& storages,
                   const std::string& origin);

  MappedFile file_;
  bool legacy_ = false;
  std::vector<std::vector<uint8_t>> owned_;  // inflated members and gathered non-contiguous tensors
};

}  // namespace io
