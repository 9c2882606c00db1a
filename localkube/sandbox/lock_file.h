// An exclusive flock on a file that names what it guards (an instance prefix, an address
// block). The kernel drops the lock when its holder dies, however it dies, so a lock that can be
// taken marks a dead (or never started) holder: that is how a start tells a killed instance's
// leftovers from a live one's.
//
// Protocol: the holder unlinks the file while still holding the lock; a taker checks, once it
// has the lock, that the path still names the file it locked (else someone unlinked it between
// open and flock) and tries again. So at most one process ever holds a path's lock.
//
// Owns the file descriptor and, once Release()d or destroyed, removes the file. Not thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kubetrain::sandbox {

class LockFile {
 public:
  // The lock on `path` (created if missing), or nullptr when another live process holds it;
  // an error when the file cannot be created or locked at all.
  static absl::StatusOr<std::unique_ptr<LockFile>> TryAcquire(const std::string& path);
  ~LockFile();
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;

  const std::string& path() const { return path_; }

 private:
  LockFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::string path_;
  int fd_;
};

}  // namespace kubetrain::sandbox
