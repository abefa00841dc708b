// Read-only file mapping with a read fallback (see mapped_file.h).
#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "weights.h"

namespace io {

MappedFile::MappedFile(const std::string& path, size_t max_bytes, bool regular_only) {
  auto too_big = [&] {
    return Error(path + ": more than " + std::to_string(max_bytes) + " bytes, more than a file of its kind holds");
  };
  if (struct stat pre {}; regular_only && ::stat(path.c_str(), &pre) == 0 && !S_ISREG(pre.st_mode) && !S_ISDIR(pre.st_mode)) {
    throw Error(path + ": not a regular file (" +
                (S_ISFIFO(pre.st_mode) ? "a FIFO" : S_ISSOCK(pre.st_mode) ? "a socket" : "a device") + ")");
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": cannot open: is a directory");
  }
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    throw too_big();
  }
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p != MAP_FAILED) {
      ::close(fd);
      map_ = p;
      data_ = static_cast<const uint8_t*>(p);
      size_ = static_cast<size_t>(st.st_size);
      return;
    }
  }
  // Not mappable (a pipe, an empty file, a file system without mmap): read it.
  uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw Error(path + ": read error: " + std::strerror(e));
    }
    if (n == 0) break;
    if (static_cast<size_t>(n) > max_bytes - copy_.size()) {
      ::close(fd);
      throw too_big();
    }
    copy_.insert(copy_.end(), buf, buf + n);
  }
  ::close(fd);
  data_ = copy_.data();
  size_ = copy_.size();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      map_(std::exchange(o.map_, nullptr)),
      copy_(std::move(o.copy_)) {}

void MappedFile::release(const uint8_t* p, size_t n) const {
  if (map_ == nullptr || p < data_ || n > size_ || p - data_ > static_cast<ptrdiff_t>(size_ - n)) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;  // whole pages only:
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;            // neighbours stay
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

std::string read_file(const std::string& path, size_t max_bytes, bool regular_only) {
  const MappedFile f(path, max_bytes, regular_only);
  return std::string(reinterpret_cast<const char*>(f.data()), f.size());
}

std::string read_config_file(const std::string& path) { return read_file(path, kMaxConfigBytes, true); }

nlohmann::json read_json_object(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(read_config_file(path), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + ": not valid JSON");
  if (!j.is_object()) throw Error(path + ": expected a JSON object");
  return j;
}

}  // namespace io
