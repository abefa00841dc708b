// io::WeightStore accessors, dtype conversion and io::open_weights (see weights.h).
#include "weights.h"

#include <bit>
#include <cstring>
#include <filesystem>

#include "safetensors.h"
#include "sharded.h"
#include "torch_bin.h"

namespace io {

static_assert(std::endian::native == std::endian::little, "tensor bytes are little-endian");

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F64: case DType::I64: return 8;
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::I8: case DType::U8: case DType::BOOL: return 1;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::I16: return "I16";
    case DType::I8: return "I8";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);  // 127 - 15 = 112
  } else if (man == 0) {
    bits = sign;  // ±0
  } else {        // subnormal: man · 2^-24, exact in fp32
    const float v = static_cast<float>(man) * 0x1p-24f;
    bits = sign | std::bit_cast<uint32_t>(v);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

const Tensor& WeightStore::at(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(path_ + ": no tensor '" + name + "'");
  return it->second;
}

namespace {

void check_shape(const std::string& path, const std::string& name, const Tensor& t, const std::vector<int64_t>& shape) {
  if (!shape.empty() && t.shape != shape) {
    throw Error(path + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(shape));
  }
}

}  // namespace

std::vector<float> WeightStore::f32(const std::string& name, const std::vector<int64_t>& shape) const {
  const Tensor& t = at(name);
  check_shape(path_, name, t, shape);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::F32:
      if (t.bytes) std::memcpy(out.data(), t.data, t.bytes);
      break;
    case DType::F16:
    case DType::BF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::F16 ? f16_to_f32(v) : bf16_to_f32(v);
      }
      break;
    case DType::I8: {
      const auto scale = row_scales_.find(name);
      if (scale == row_scales_.end()) {
        throw Error(path_ + ": tensor '" + name + "' has dtype I8 without row scales ('" + name + kRowScaleSuffix +
                    "'), expected F32, F16 or BF16");
      }
      const int64_t cols = t.shape[1];
      for (size_t i = 0; i < out.size(); ++i) {
        float row_scale;
        std::memcpy(&row_scale, scale->second.data + 4 * (i / cols), 4);
        out[i] = static_cast<float>(static_cast<int8_t>(t.data[i])) * row_scale;
      }
      break;
    }
    default:
      throw Error(path_ + ": tensor '" + name + "' has dtype " + dtype_name(t.dtype) + ", expected F32, F16 or BF16");
  }
  return out;
}

std::vector<int64_t> WeightStore::i64(const std::string& name, const std::vector<int64_t>& shape) const {
  const Tensor& t = at(name);
  if (t.dtype != DType::I64) {
    throw Error(path_ + ": tensor '" + name + "' has dtype " + dtype_name(t.dtype) + ", expected I64");
  }
  check_shape(path_, name, t, shape);
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  if (t.bytes) std::memcpy(out.data(), t.data, t.bytes);
  return out;
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

void WeightStore::apply_names(Names names) {
  rename(names);
  const std::string suffix = kRowScaleSuffix;
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    const std::string& name = it->first;
    const bool scale_name = name.size() > suffix.size() && name.ends_with(suffix);
    const auto of = scale_name ? tensors_.find(name.substr(0, name.size() - suffix.size())) : tensors_.end();
    if (of == tensors_.end() || of->second.dtype != DType::I8) {
      ++it;
      continue;
    }
    const Tensor& q = of->second;
    if (q.shape.size() != 2 || it->second.dtype != DType::F32 || it->second.shape != std::vector<int64_t>{q.shape[0]}) {
      throw Error(path_ + ": tensor '" + name + "' must be F32 " + shape_str({q.shape.empty() ? 0 : q.shape[0]}) +
                  ", the row scales of the 2-D I8 tensor '" + of->first + "'");
    }
    row_scales_.emplace(of->first, it->second);
    it = tensors_.erase(it);
  }
}

void WeightStore::rename(Names names) {
  if (names == Names::kAsStored) return;
  std::map<std::string, Tensor> renamed;
  std::map<std::string, std::string> origin;  // new name → stored name
  for (auto& [name, t] : tensors_) {
    std::string n = name;
    auto replace_all = [&n](const std::string& from, const std::string& to) {
      for (size_t at = n.find(from); at != std::string::npos; at = n.find(from, at + to.size())) n.replace(at, from.size(), to);
    };
    if (n.find("beta") != std::string::npos) {
      replace_all("beta", "bias");
    } else if (n.find("gamma") != std::string::npos) {
      replace_all("gamma", "weight");
    }
    if (auto it = origin.find(n); it != origin.end()) {
      throw Error(path_ + ": tensors '" + it->second + "' and '" + name + "' both become '" + n +
                  "' under the legacy gamma/beta renaming");
    }
    origin.emplace(n, name);
    renamed.emplace(n, std::move(t));
  }
  tensors_ = std::move(renamed);
}

std::unique_ptr<WeightStore> open_weights(const std::string& model_dir, Names names) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) throw Error(model_dir + ": not a model directory");
  const std::string single = model_dir + "/model.safetensors", index = model_dir + "/model.safetensors.index.json",
                    bin = model_dir + "/pytorch_model.bin";
  if (fs::exists(single, ec)) return std::make_unique<SafeTensors>(single, names);
  if (fs::exists(index, ec)) return std::make_unique<ShardedWeights>(index, names);
  if (fs::exists(bin, ec)) return std::make_unique<TorchBin>(bin, names);
  if (fs::exists(bin + ".index.json", ec)) return std::make_unique<ShardedWeights>(bin + ".index.json", names);
  throw Error(model_dir + ": no weights: none of model.safetensors, model.safetensors.index.json, pytorch_model.bin, "
              "pytorch_model.bin.index.json");
}

}  // namespace io
