// A validating reader and a writer for the safetensors format: 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. Every
// malformed file is rejected with io::Error naming the file and the problem; nothing is read outside
// the file. The whole file is read into memory (memory-mapping comes with the loaders).
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace io {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

struct Tensor {
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;  // inside the owning SafeTensors
  size_t bytes;
  int64_t numel() const;
};

class SafeTensors {
 public:
  // Reads and validates `path`; throws io::Error.
  explicit SafeTensors(const std::string& path);

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor `name`; throws io::Error if it is missing.
  const Tensor& at(const std::string& name) const;
  // `name` as fp32 values, checking dtype F32 and, if given, the expected shape.
  std::vector<float> f32(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  // `name` as int64 values (dtype I64).
  std::vector<int64_t> i64(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const std::string& path() const { return path_; }
  // The string-to-string "__metadata__" map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  const Tensor& checked(const std::string& name, DType dtype, const std::vector<int64_t>& shape) const;
  std::string path_;
  std::vector<uint8_t> file_;
  std::map<std::string, Tensor> tensors_;
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
