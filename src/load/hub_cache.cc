// Model ids resolved offline in the Hugging Face cache (see hub_cache.h).
#include "load/hub_cache.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/weights.h"

namespace load {
namespace {

namespace fs = std::filesystem;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// huggingface_hub's os.path.expanduser: a leading "~" is $HOME.
std::string expand_user(const std::string& path) {
  if (path.empty() || path[0] != '~' || (path.size() > 1 && path[1] != '/')) return path;
  return env("HOME") + path.substr(1);
}

// huggingface_hub's validate_repo_id: [org/]name of letters, digits, '-', '_', '.', no "--" or "..",
// not starting or ending with '-' or '.', at most 96 characters.
bool is_repo_id(const std::string& id) {
  if (id.empty() || id.size() > 96 || id.find("--") != std::string::npos || id.find("..") != std::string::npos) {
    return false;
  }
  const size_t slash = id.find('/');
  if (slash != std::string::npos && id.find('/', slash + 1) != std::string::npos) return false;
  auto part_ok = [](const std::string& p) {
    if (p.empty() || p.front() == '-' || p.front() == '.' || p.back() == '-' || p.back() == '.') return false;
    for (unsigned char c : p) {
      if (!(std::isalnum(c) || c == '-' || c == '_' || c == '.')) return false;
    }
    return true;
  };
  return slash == std::string::npos ? part_ok(id) : part_ok(id.substr(0, slash)) && part_ok(id.substr(slash + 1));
}

// A revision is a branch, tag or commit (refs/<revision> may nest: "refs/pr/1"); never a path out of refs/.
bool is_revision(const std::string& r) {
  if (r.empty() || r.size() > 256 || r.front() == '/' || r.back() == '/') return false;
  std::stringstream parts(r);
  for (std::string p; std::getline(parts, p, '/');) {
    if (p.empty() || p == "." || p == "..") return false;
  }
  for (unsigned char c : r) {
    if (c < 0x20 || c == '\\') return false;
  }
  return true;
}

}  // namespace

std::string hub_cache_dir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (!env(name).empty()) return expand_user(env(name));
  }
  if (!env("HF_HOME").empty()) return expand_user(env("HF_HOME")) + "/hub";
  const std::string xdg = env("XDG_CACHE_HOME");
  return (xdg.empty() ? expand_user("~/.cache") : expand_user(xdg)) + "/huggingface/hub";
}

std::string resolve_model(const std::string& spec) {
  std::error_code ec;
  if (fs::is_directory(spec, ec)) return spec;
  const size_t at = spec.find('@');
  const std::string id = spec.substr(0, at);
  const std::string revision = at == std::string::npos ? "main" : spec.substr(at + 1);
  if (!is_repo_id(id) || !is_revision(revision) || spec.front() == '.') return spec;  // a path: the loader names it

  const std::string cache = hub_cache_dir();
  std::string folder = "models--" + id;  // huggingface_hub's repo_folder_name: "/" becomes "--"
  if (const size_t slash = folder.find('/'); slash != std::string::npos) folder.replace(slash, 1, "--");
  const std::string repo = cache + "/" + folder;
  const std::string intro = spec + ": no such model directory, nor in the Hugging Face cache " + cache +
                            " ($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub; nothing is downloaded: "
                            "huggingface_hub's snapshot_download fills it)";
  if (!fs::is_directory(repo, ec)) throw io::Error(intro + ": no " + repo);
  const std::string ref = repo + "/refs/" + revision;
  std::string commit = revision;  // no refs file: the revision is a commit hash, as try_to_load_from_cache reads it
  if (fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
    if (commit.empty() || !is_revision(commit) || commit.find('/') != std::string::npos) {
      throw io::Error(ref + ": not a commit hash (a refs file of the Hugging Face cache holds one)");
    }
  }
  const std::string snapshot = repo + "/snapshots/" + commit;
  if (!fs::is_directory(snapshot, ec)) {
    throw io::Error(intro + ": " + (commit == revision ? "no " + ref + " and no " + snapshot
                                                       : ref + " names " + commit + ", but there is no " + snapshot));
  }
  return snapshot;
}

}  // namespace load
