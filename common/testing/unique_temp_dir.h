// Test support: a directory of the test's own, made under a name no other test (nor an earlier
// run) can hold, and removed with everything in it when the holder goes.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace kubetrain::testing {

class UniqueTempDir {
 public:
  UniqueTempDir() = default;
  ~UniqueTempDir() {
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  UniqueTempDir(const UniqueTempDir&) = delete;
  UniqueTempDir& operator=(const UniqueTempDir&) = delete;

  // Makes ::testing::TempDir()/<prefix>XXXXXX (mkdtemp, mode 0700); false if it cannot. In a
  // fixture's SetUp: ASSERT_TRUE(dir_.Make("name-")).
  bool Make(const std::string& prefix) {
    std::string tmpl = ::testing::TempDir() + "/" + prefix + "XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) return false;
    path_ = std::filesystem::path(tmpl).lexically_normal().string();
    return true;
  }

  // The directory, without a trailing or doubled slash; empty until Make succeeds.
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kubetrain::testing
