// Output checks of the commands that write model directories and files (see output_path.h).
#include "io/output_path.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "io/safetensors.h"

namespace io {
namespace {

namespace fs = std::filesystem;

fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal() : r;
}

// Whether `inner` is `outer` or lies below it.
bool within(const fs::path& inner, const fs::path& outer) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // a trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

}  // namespace

void check_output_path(const std::string& option, const std::string& out, const std::vector<std::string>& inputs) {
  const fs::path o = resolved(out);
  for (const std::string& in : inputs) {
    if (in.empty()) continue;
    const fs::path i = resolved(in);
    if (i == o) throw Error(option + " " + out + ": is the input " + in + "; write the output elsewhere");
    if (within(i, o)) throw Error(option + " " + out + ": holds the input " + in + "; write the output elsewhere");
    std::error_code ec;
    if (within(o, i) && fs::is_regular_file(o, ec)) {
      throw Error(option + " " + out + ": is a file of the input " + in + "; write the output elsewhere");
    }
  }
}

void check_output_directory(const std::string& option, const std::string& out, const std::vector<std::string>& writes) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) throw Error(option + " " + out + ": exists and is not a directory");
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    const std::string name = entry.path().filename().string();
    if (std::find(writes.begin(), writes.end(), name) == writes.end()) {
      throw Error(option + " " + out + ": a directory that holds other things (" + name +
                  "); choose a new or empty directory");
    }
  }
  if (ec) throw Error(option + " " + out + ": cannot be read: " + ec.message());
}

}  // namespace io
