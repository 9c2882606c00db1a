// Test support: a file-size limit (ulimit -f) on this process while it lives, the way to make
// a checkpoint write fail as a full disk would, also for root (whom permissions do not stop).
#pragma once

#include <sys/resource.h>

#include <gtest/gtest.h>

namespace kubetrain::worker::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    EXPECT_EQ(getrlimit(RLIMIT_FSIZE, &saved_), 0);
    struct rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &saved_); }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  struct rlimit saved_;
};

}  // namespace kubetrain::worker::testing
