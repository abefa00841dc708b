// A validating reader and a writer for the safetensors format: 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. Every
// malformed file is rejected with io::Error naming the file and the problem; nothing is read outside
// the file. The file is memory-mapped (io::MappedFile): tensors are views into the mapping.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "io/weights.h"

namespace io {

class SafeTensors : public WeightStore {
 public:
  // Maps and validates `path`; throws io::Error. `names`: see io::Names.
  explicit SafeTensors(const std::string& path, Names names = Names::kAsStored);

  // contains, at, f32 (F32, or F16/BF16 widened), i64, tensors, names, path: see io::WeightStore.
  // The string-to-string "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  void release(const Tensor& t) const override { file_.release(t.data, t.bytes); }

 private:
  MappedFile file_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: raw little-endian row-major bytes, numel(shape) · size(dtype) of them.
struct TensorView {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};

// A safetensors file image of `tensors` (in the given order) with string metadata, as the
// `safetensors` library writes it (header padded with spaces to a multiple of 8). The caller
// writes it with io::write_file_atomic. Throws io::Error on duplicate or reserved names.
std::string safetensors_bytes(const std::vector<TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace io
