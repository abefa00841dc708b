// Atomic file replacement (see atomic_file.h).
#include "atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "io/safetensors.h"  // io::Error

namespace io {
namespace {

std::string sys_error(const std::string& path, const std::string& what) {
  return path + ": " + what + ": " + std::strerror(errno);
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Writes all of `bytes` to fd (false on an error; errno says which).
bool write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  // A device, FIFO or socket (/dev/null, /dev/stdout, a pipe) is written in place: a temporary renamed
  // over it would replace the device with a regular file (for root, /dev/null itself), and elsewhere
  // the temporary cannot be created beside it.
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    const int out = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (out < 0) throw Error(sys_error(path, "cannot open for writing"));
    if (!write_all(out, bytes)) {
      const std::string msg = sys_error(path, "write failed");
      ::close(out);
      throw Error(msg);
    }
    if (::close(out) != 0) throw Error(sys_error(path, "close failed"));
    return;
  }
  // A unique sibling name: pid + a process-wide counter + the clock, opened with O_EXCL so two writers
  // (threads or processes) never share a temporary. open() applies the umask, which mkstemp would not.
  static std::atomic<uint64_t> counter{0};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
          std::to_string(static_cast<uint64_t>(now) % 1000000);
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100)) throw Error(sys_error(path, "cannot create " + tmp));
  }
  auto fail = [&](const std::string& what) {
    const std::string msg = sys_error(path, what);
    ::close(fd);
    ::unlink(tmp.c_str());
    return Error(msg);
  };
  if (!write_all(fd, bytes)) throw fail("write to " + tmp + " failed");
  if (::fsync(fd) != 0) throw fail("fsync of " + tmp + " failed");
  if (::close(fd) != 0) {
    const std::string msg = sys_error(path, "close of " + tmp + " failed");
    ::unlink(tmp.c_str());
    throw Error(msg);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string msg = sys_error(path, "rename from " + tmp + " failed");
    ::unlink(tmp.c_str());
    throw Error(msg);
  }
  // Persist the directory entry (best effort: some file systems refuse fsync on a directory, and the
  // new contents are already in place, so a failure here is not worth failing the write for).
  const int dfd = ::open(directory_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace io
