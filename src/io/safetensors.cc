// safetensors reader and writer (see safetensors.h).
#include "safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "strict_json.h"

namespace io {
namespace {

const std::map<std::string, DType>& dtype_names() {
  static const std::map<std::string, DType> names = {
      {"F64", DType::F64}, {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}, {"I64", DType::I64},
      {"I32", DType::I32}, {"I16", DType::I16}, {"I8", DType::I8},   {"U8", DType::U8},     {"BOOL", DType::BOOL}};
  return names;
}

bool parse_dtype(const std::string& s, DType* d) {
  const auto& names = dtype_names();
  auto it = names.find(s);
  if (it == names.end()) return false;
  *d = it->second;
  return true;
}

}  // namespace

SafeTensors::SafeTensors(const std::string& path, Names names) : WeightStore(path), file_(path) {
  auto fail = [&](const std::string& what) { return Error(path + ": " + what); };
  const uint8_t* bytes = file_.data();
  const size_t size = file_.size();
  if (size < 8) throw fail("truncated: " + std::to_string(size) + " bytes, no header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian
  if (header_len > size - 8) {
    throw fail("header length " + std::to_string(header_len) + " exceeds the file (" + std::to_string(size) +
               " bytes)");
  }
  const nlohmann::json header = detail::parse_json_strict(bytes + 8, bytes + 8 + header_len, path, "header");
  if (!header.is_object()) throw fail("header is not a JSON object");
  const uint8_t* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) throw fail("__metadata__ value '" + key + "' is not a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "': ";
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets")) {
      throw fail(where + "needs dtype, shape and data_offsets");
    }
    Tensor t{};
    if (!info["dtype"].is_string() || !parse_dtype(info["dtype"].get<std::string>(), &t.dtype)) {
      throw fail(where + "unknown dtype " + info["dtype"].dump());
    }
    const auto& shape = info["shape"];
    const auto& offsets = info["data_offsets"];
    if (!shape.is_array() || !offsets.is_array() || offsets.size() != 2) throw fail(where + "bad shape or data_offsets");
    uint64_t numel = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned()) throw fail(where + "shape entries must be non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 48) / dim) throw fail(where + "shape is too large");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
      throw fail(where + "data_offsets must be non-negative integers");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      throw fail(where + "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] outside the data section (" + std::to_string(data_size) + " bytes)");
    }
    if (end - begin != numel * dtype_size(t.dtype)) {
      throw fail(where + "shape " + shape_str(t.shape) + " needs " + std::to_string(numel * dtype_size(t.dtype)) +
                 " bytes but data_offsets give " + std::to_string(end - begin));
    }
    t.data = data + begin;
    t.bytes = end - begin;
    if (t.bytes) ranges.emplace_back(begin, end);
    tensors_.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) throw fail("tensors overlap in the data section");
  }
  apply_names(names);
}

std::string safetensors_bytes(const std::vector<TensorView>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) throw Error("safetensors: duplicate or reserved name " + t.name);
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    const size_t bytes = static_cast<size_t>(numel) * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out.reserve(8 + text.size() + offset);
  out += text;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    out.append(static_cast<const char*>(t.data), static_cast<size_t>(numel) * dtype_size(t.dtype));
  }
  return out;
}

}  // namespace io
