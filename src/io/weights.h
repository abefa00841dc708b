// The common view of a checkpoint's weights, whatever file format they came in: io::WeightStore maps
// tensor names to read-only io::Tensor views (dtype, shape, row-major little-endian bytes) and converts
// them to fp32. Implemented by io::SafeTensors (one file), io::TorchBin (pytorch_model.bin) and
// io::ShardedWeights (an index.json over shards of either). io::open_weights(dir) picks the file a
// Hugging Face model folder holds. Every problem is an io::Error naming the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"

namespace io {

// io's name for base::Error (every layer's bad-input exception; base/error.h).
using Error = base::Error;

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

size_t dtype_size(DType d);
const char* dtype_name(DType d);  // the safetensors spelling: "F32", "BF16", ...
std::string shape_str(const std::vector<int64_t>& shape);

// A tensor as stored: numel() · dtype_size(dtype) == bytes, row-major, little-endian. `data` points
// into the owning store (a memory-mapped file or a buffer of it) and lives as long as the store.
struct Tensor {
  DType dtype;
  std::vector<int64_t> shape;
  const uint8_t* data;
  size_t bytes;
  int64_t numel() const;
};

// How a store names its tensors: as stored, or with Hugging Face's legacy renames applied
// (_load_state_dict_into_model: a name containing "beta" gets beta → bias, otherwise "gamma" →
// weight), which old BERT-style checkpoints need. A rename that collides with a stored name is an error.
enum class Names { kAsStored, kHfLegacyRenamed };

class WeightStore {
 public:
  virtual ~WeightStore() = default;

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // The tensor `name`; throws io::Error if it is missing.
  const Tensor& at(const std::string& name) const;
  // `name` as fp32 values: F32 is copied, F16 and BF16 are widened exactly, and an int8 tensor with a
  // row scale (below) is dequantised; other dtypes, or a shape other than `shape` (when given), throw
  // io::Error.
  std::vector<float> f32(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  // Int8 tensors as `roformer quantize` writes them: an I8 matrix W (rows, cols) stored with an F32
  // tensor named W's name + kRowScaleSuffix, shape (rows), such that W[r][c] ≈ q[r][c] · scale[r].
  // The scales are not tensors of the store (names() and tensors() do not list them).
  static constexpr const char* kRowScaleSuffix = "_row_scale";
  bool has_int8_tensors() const { return !row_scales_.empty(); }
  // `name` as int64 values (dtype I64).
  std::vector<int64_t> i64(const std::string& name, const std::vector<int64_t>& shape = {}) const;
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  // A hint that the caller is done with tensor t (one of this store's): a memory-mapped store drops
  // its pages from the process's resident set, so that copying a checkpoint into a model does not
  // hold the file and the copy in memory at once. The bytes stay readable (the page cache keeps
  // them). Stores that are not mapped ignore it.
  virtual void release(const Tensor& t) const { (void)t; }
  std::vector<std::string> names() const;  // sorted
  // The file the tensors came from (for a sharded checkpoint, its index), for error messages.
  const std::string& path() const { return path_; }

 protected:
  WeightStore() = default;
  explicit WeightStore(std::string path) : path_(std::move(path)) {}
  WeightStore(const WeightStore&) = delete;  // tensors point into the store
  WeightStore& operator=(const WeightStore&) = delete;
  // Renames tensors_ per `names`, then takes the row scales of int8 tensors out of tensors_ (every
  // store's constructor ends with it).
  void apply_names(Names names);
  std::string path_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, Tensor> row_scales_;  // int8 tensor name → its (rows) F32 scales

 private:
  void rename(Names names);
};

// fp16 / bf16 bits → fp32 (exact, including subnormals, infinities and NaN payloads).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);

// The weights of a Hugging Face model folder, from the first of model.safetensors,
// model.safetensors.index.json, pytorch_model.bin, pytorch_model.bin.index.json that exists (the
// order of transformers' from_pretrained), with legacy names renamed (`names`).
// Throws io::Error naming the folder and the files looked for when none exists.
std::unique_ptr<WeightStore> open_weights(const std::string& model_dir, Names names = Names::kHfLegacyRenamed);

}  // namespace io
