// A whole file, read-only, as one byte range: memory-mapped when it is a regular file (so loading a
// checkpoint costs no copy and pages come in as tensors are touched), read into memory otherwise
// (pipes, /dev/stdin, an empty file). read_file and read_json_object are the whole-file readers built
// on it for configuration files. Like every mmap reader, a mapped file must not be truncated by
// another process while it is open (the kernel would deliver SIGBUS).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace io {

class MappedFile {
 public:
  // Throws io::Error naming `path` ("cannot open", "read error", ...).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool mapped() const { return map_ != nullptr; }
  // A hint that [p, p + n) will not be read for a while: when it lies in the mapping, its whole pages
  // leave this process's resident set (madvise MADV_DONTNEED; the page cache keeps them, and a later
  // read faults them back in with the same bytes). No effect on a read copy or outside the mapping.
  void release(const uint8_t* p, size_t n) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* map_ = nullptr;         // the mmap region, when mapped
  std::vector<uint8_t> copy_;   // the file's bytes, when read
};

// The whole file as a string (through MappedFile, with its errors: "cannot open", "is a directory",
// "read error", each naming the path).
std::string read_file(const std::string& path);

// A JSON object from a file (config.json, tokenizer_config.json, ...); io::Error naming the file when
// it cannot be read, is not JSON or is not an object.
nlohmann::json read_json_object(const std::string& path);

}  // namespace io
