// Test support: an empty directory of the test's own under GoogleTest's temporary folder.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace kubetrain::testing {

// ::testing::TempDir()/name, removed with everything in it (a test's earlier run may have left
// it); the caller's code creates it again when it needs it.
inline std::string FreshTempDir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace kubetrain::testing
