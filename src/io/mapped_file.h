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
  // Throws io::Error naming `path` ("cannot open", "read error", ...). max_bytes: a file (or stream)
  // longer than this is an error ("more than N bytes") before it is read whole, so /dev/zero or a huge
  // file given for a small one cannot exhaust memory. regular_only: a FIFO, device or socket is an
  // error (checked before opening it: opening a FIFO would wait for a writer).
  explicit MappedFile(const std::string& path, size_t max_bytes = SIZE_MAX, bool regular_only = false);
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
// "read error", "more than N bytes", each naming the path).
std::string read_file(const std::string& path, size_t max_bytes = SIZE_MAX, bool regular_only = false);

// The most a configuration file (config.json, tokenizer_config.json, an index, our tokenizer.json)
// may hold: they are kilobytes; a bigger one is the wrong file.
constexpr size_t kMaxConfigBytes = size_t{64} << 20;

// A configuration file's text: a regular file of at most kMaxConfigBytes (read_file's errors).
std::string read_config_file(const std::string& path);

// A JSON object from a configuration file (read_config_file); io::Error naming the file when it
// cannot be read, is too big, is not JSON or is not an object.
nlohmann::json read_json_object(const std::string& path);

}  // namespace io
