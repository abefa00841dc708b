// Scratch files for tests: a fresh per-process directory under GoogleTest's TempDir, a writer that
// creates parent directories as needed, and a check that an error names its file.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace test_files {

// The directory (with a trailing '/'), emptied on first use in this process.
inline std::string temp_dir() {
  static const std::string dir = [] {
    const std::filesystem::path d =
        std::filesystem::path(::testing::TempDir()) / ("roformer_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string() + "/";
  }();
  return dir;
}

// Writes bytes to temp_dir() + name and returns that path.
inline std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = temp_dir() + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Expects f() to throw an E whose message names `path` and holds `fragment`.
template <class E, class F>
void expect_error_naming(F&& f, const std::string& path, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error for " << path << " (expected '" << fragment << "')";
  } catch (const E& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
}

}  // namespace test_files
