// Model ids in the Hugging Face cache (src/load/hub_cache.h): a cache laid out by hand as
// huggingface_hub lays it out (models--org--name/refs/<revision>, snapshots/<hash>/), the
// environment variables that place it, and the error line of an id that is not there.
// tests/hf/hub_cache_vs_hf.py checks the same layout against huggingface_hub's own reading of it.
#include "load/hub_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "serve_fixtures.h"

namespace {

namespace fs = std::filesystem;
using serve_fixtures::expect_error;

// Sets (or unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value->c_str(), 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A cache with org/name at two commits: main → aaaa…, v1 → bbbb…, and the pull request revision
// "refs/pr/1" → bbbb… (hf_hub_download writes refs/<revision>: refs/refs/pr/1).
std::string make_cache(const std::string& name) {
  const std::string cache = serve_fixtures::temp_dir() + "/" + name;
  fs::remove_all(cache);
  const std::string repo = cache + "/models--org--name";
  const std::string a(40, 'a'), b(40, 'b');
  for (const std::string& c : {a, b}) {
    fs::create_directories(repo + "/snapshots/" + c);
    std::ofstream(repo + "/snapshots/" + c + "/config.json") << "{}";
  }
  fs::create_directories(repo + "/refs/refs/pr");
  std::ofstream(repo + "/refs/main") << a;  // huggingface_hub writes the hash without a newline
  std::ofstream(repo + "/refs/v1") << b << "\n";
  std::ofstream(repo + "/refs/refs/pr/1") << b;
  return cache;
}

TEST(HubCache, AnIdResolvesToTheSnapshotItsRefNames) {
  const std::string cache = make_cache("hub1");
  const ScopedEnv env("HF_HUB_CACHE", cache);
  const std::string repo = cache + "/models--org--name/snapshots/";
  EXPECT_EQ(load::resolve_model("org/name"), repo + std::string(40, 'a'));
  EXPECT_EQ(load::resolve_model("org/name@main"), repo + std::string(40, 'a'));
  EXPECT_EQ(load::resolve_model("org/name@v1"), repo + std::string(40, 'b'));
  EXPECT_EQ(load::resolve_model("org/name@refs/pr/1"), repo + std::string(40, 'b'));
  // A commit hash names its snapshot directly.
  EXPECT_EQ(load::resolve_model("org/name@" + std::string(40, 'b')), repo + std::string(40, 'b'));
}

TEST(HubCache, AnExistingDirectoryWinsOverAnId) {
  const std::string cache = make_cache("hub2");
  const ScopedEnv env("HF_HUB_CACHE", cache);
  const fs::path cwd = fs::current_path();
  fs::create_directories(cache + "/work/org/name");
  fs::current_path(cache + "/work");
  EXPECT_EQ(load::resolve_model("org/name"), "org/name");
  fs::current_path(cwd);
  // Not ids: paths go to the loader unchanged, which names the missing directory.
  EXPECT_EQ(load::resolve_model("/no/such/dir"), "/no/such/dir");
  EXPECT_EQ(load::resolve_model("a/b/c"), "a/b/c");
  EXPECT_EQ(load::resolve_model("./name"), "./name");
  EXPECT_EQ(load::resolve_model("org/name@../../x"), "org/name@../../x");
}

TEST(HubCache, TheCacheDirectoryComesFromTheEnvironmentAsHuggingfaceHubReadsIt) {
  const ScopedEnv hub("HF_HUB_CACHE", std::nullopt), old("HUGGINGFACE_HUB_CACHE", std::nullopt);
  const ScopedEnv home("HF_HOME", "/x/hf"), xdg("XDG_CACHE_HOME", "/x/xdg"), user("HOME", "/x/home");
  EXPECT_EQ(load::hub_cache_dir(), "/x/hf/hub");
  {
    const ScopedEnv no_home("HF_HOME", std::nullopt);
    EXPECT_EQ(load::hub_cache_dir(), "/x/xdg/huggingface/hub");
    const ScopedEnv no_xdg("XDG_CACHE_HOME", std::nullopt);
    EXPECT_EQ(load::hub_cache_dir(), "/x/home/.cache/huggingface/hub");
  }
  const ScopedEnv legacy("HUGGINGFACE_HUB_CACHE", "/x/legacy");
  EXPECT_EQ(load::hub_cache_dir(), "/x/legacy");
  const ScopedEnv first("HF_HUB_CACHE", "~/hub");
  EXPECT_EQ(load::hub_cache_dir(), "/x/home/hub");
}

TEST(HubCache, AMissingIdIsOneErrorNamingWhereItLooked) {
  const std::string cache = make_cache("hub3");
  const ScopedEnv env("HF_HUB_CACHE", cache);
  expect_error([] { load::resolve_model("org/other"); },
               {"org/other: no such model directory, nor in the Hugging Face cache " + cache,
                "no " + cache + "/models--org--other"});
  expect_error([] { load::resolve_model("org/name@v2"); },
               {"no " + cache + "/models--org--name/refs/v2 and no " + cache + "/models--org--name/snapshots/v2"});
  fs::remove_all(cache + "/models--org--name/snapshots/" + std::string(40, 'a'));
  expect_error([] { load::resolve_model("org/name"); },
               {cache + "/models--org--name/refs/main names " + std::string(40, 'a') + ", but there is no"});
  std::ofstream(cache + "/models--org--name/refs/main") << "../../etc";
  expect_error([] { load::resolve_model("org/name"); }, {"refs/main: not a commit hash"});
}

}  // namespace
