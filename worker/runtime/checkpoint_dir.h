// The chief's checkpoint directory, opened once and held for as long as the chief runs: private,
// its own, locked against a second run, with no partial file left over.
//
// Open refuses, each time with an error naming the directory, its owner and the fix:
//  - a checkpoint directory that is a symlink: whoever can change the link chooses where the
//    checkpoints go (and what is restored);
//  - one not owned by this process's effective user, or writable by its group or by others
//    (sticky or not: whoever can create a file in it can plant a checkpoint for the run to
//    restore);
//  - a directory above it that neither this user nor root owns: they could move the checkpoint
//    directory away and put one of theirs, or a symlink, in its place. One above it that its
//    group or others may write without the sticky bit (a pod's emptyDir, an fsGroup volume) is
//    taken with a warning: the directory itself must still be this user's, and it is used
//    through its descriptor, so they could move it away but not plant a checkpoint in it. A
//    symlink above it is followed when this
//    user or root owns it (the kernel's protected_symlinks rule), so a folder reached through a
//    link of one's own still works;
//  - a directory another live run holds (see below);
//  - a directory this user cannot write a file into (read-only, full, over a quota or file-size
//    limit): an error at start rather than a warning at every checkpoint.
// Missing directories are made one at a time (mkdirat, 0700 whatever the umask), each opened with
// O_NOFOLLOW | O_DIRECTORY and checked with fstat, so nothing can be slipped in between a check
// and a use; every later write goes through the directory's descriptor.
//
// The lock: checkpoint.lock in the directory, flock'd for the holder's lifetime and released by
// the kernel when the process ends, however it ends, so a crash never leaves a stale lock. It
// holds the pid, host, job and start time of its run, so that a second run refused the directory
// can say whose it is. Two runs in one directory would rotate away each other's checkpoints.
// The lock is the process's: Open of a directory this process already holds returns the same
// CheckpointDir (a restarted Trainer, a test's second Checkpointer), since a second flock of the
// file from the same process would refuse the process itself.
//
// Thread-safe: the methods write through the directory's descriptor and keep no other state.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::worker {

class CheckpointDir {
 public:
  // The lock file, inside the directory.
  static constexpr char kLockFile[] = "checkpoint.lock";

  // Opens (creating where missing) and locks the directory `path`; `job` is written into the
  // lock file for a refused run's message. Also ignores SIGXFSZ for the process, so that a
  // checkpoint over the file-size limit (ulimit -f) is a write that fails with EFBIG, reported,
  // instead of a process killed without a word. Removes the temporary files (*.tmp) an earlier
  // run left behind, and probes that a file can be written.
  static absl::StatusOr<std::shared_ptr<CheckpointDir>> Open(const std::string& path,
                                                             const std::string& job = "");

  ~CheckpointDir();
  CheckpointDir(const CheckpointDir&) = delete;
  CheckpointDir& operator=(const CheckpointDir&) = delete;

  // As given to Open.
  const std::string& path() const { return path_; }
  // path()/name.
  std::string PathOf(absl::string_view name) const;

  // Writes `data` to `name` atomically: `name`.tmp (0600), fsync, rename over `name`, fsync of
  // the directory. On any failure the temporary file is removed, and the error names the file
  // and the cause (a full disk, the file-size limit).
  absl::Status WriteAtomically(absl::string_view name, absl::string_view data) const;
  // Whether `name` exists in the directory (as any kind of file).
  bool Exists(absl::string_view name) const;
  // Removes the file `name`, if there.
  void Remove(absl::string_view name) const;

 private:
  CheckpointDir(std::string path, int dir_fd, int lock_fd);

  const std::string path_;
  const int dir_fd_;   // O_DIRECTORY, opened without following a symlink
  const int lock_fd_;  // kLockFile, flock'd
};

}  // namespace kubetrain::worker
