// Shared by the libFuzzer targets in fuzz/ (docs/reliability.md). Header-only; the library gets
// nothing added for fuzzing: readers that take a path get the input as
//  - a memfd (MemFile): a regular file at /proc/self/fd/N, so io::MappedFile memory-maps it exactly
//    as it maps a checkpoint on disk (the production path);
//  - an anonymous pipe (PipeFile): not mappable, so io::MappedFile reads it into a heap buffer, where
//    AddressSanitizer sees every byte past the end (a read past the end of a mapping would land in
//    the zero-filled rest of the page and go unnoticed). The build defines _GLIBCXX_SANITIZE_VECTOR,
//    so reads between a vector's size and its capacity are caught too.
// A finding is an abort() with a "FUZZ FINDING:" line; libFuzzer then saves the input as crash-*.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>

namespace fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// FUZZ_VERBOSE=1 in the environment: each target prints what every input gave (accepted, or the
// documented error's message), for triage and for checking that the seeds do what they should.
inline bool verbose() {
  static const bool v = [] {
    const char* e = std::getenv("FUZZ_VERBOSE");
    return e != nullptr && *e != '\0' && *e != '0';
  }();
  return v;
}
inline void note(const std::string& what) {
  if (verbose()) std::fprintf(stderr, "fuzz: %s\n", what.c_str());
}

// An exception the API does not document: a finding (its dynamic type and message are printed).
[[noreturn]] inline void undocumented(const char* where, const std::exception& e) {
  finding(std::string(where) + ": undocumented exception " + typeid(e).name() + ": " + e.what());
}

#define FUZZ_CHECK(cond, msg)                                                                          \
  do {                                                                                                 \
    if (!(cond)) ::fuzz::finding(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": check `" + \
                                 #cond + "` failed: " + std::string(msg));                             \
  } while (0)

// FNV-1a over bytes, to compare what two parses of the same input produced.
inline uint64_t fnv1a(const void* p, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// The input as a regular in-memory file, reused across runs (one per process).
class MemFile {
 public:
  MemFile() {
    fd_ = static_cast<int>(::memfd_create("fuzz-input", MFD_CLOEXEC));
    if (fd_ < 0) finding(std::string("memfd_create: ") + std::strerror(errno));
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  // Replaces the file's content with [data, data + size) and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) finding(std::string("ftruncate: ") + std::strerror(errno));
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) finding(std::string("pwrite: ") + std::strerror(errno));
      done += static_cast<size_t>(n);
    }
    return path_;
  }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

// The input behind an anonymous pipe whose write end is already closed: opening /proc/self/fd/N
// gives a reader that sees the bytes, then end of file (a pipe, unlike a named FIFO, does not wait
// for a writer on open).
class PipeFile {
 public:
  PipeFile() = default;
  ~PipeFile() {
    if (rd_ >= 0) ::close(rd_);
  }
  PipeFile(const PipeFile&) = delete;
  PipeFile& operator=(const PipeFile&) = delete;

  // False (and nothing to read) when the input does not fit in the pipe's buffer (at most 1 MiB for
  // an unprivileged process); the caller then skips this variant.
  bool open(const uint8_t* data, size_t size) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) finding(std::string("pipe2: ") + std::strerror(errno));
    const int cap = ::fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    if (cap < 0 || static_cast<size_t>(cap) < size) {
      ::close(p[0]);
      ::close(p[1]);
      return false;
    }
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(p[1], data + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(p[0]);
        ::close(p[1]);
        return false;
      }
      done += static_cast<size_t>(n);
    }
    ::close(p[1]);
    rd_ = p[0];
    path_ = "/proc/self/fd/" + std::to_string(rd_);
    return true;
  }
  const std::string& path() const { return path_; }

 private:
  int rd_ = -1;
  std::string path_;
};

}  // namespace fuzz
