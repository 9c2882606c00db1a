// The files behind shared-memory all-reduce segments (worker/collective/shm_communicator.h):
// making one (preallocated, so a full /dev/shm fails here with a clear error instead of as SIGBUS
// at a later write), opening one by name, the rank locks that say who still uses one, and the
// sweep of those no live process uses.
//
// Each rank holds an OFD lock on byte `rank` of the file for as long as its process has it open:
// the kernel drops it when the process ends however it ends (SIGKILL too), in any pid namespace,
// and no pid is ever reused for it. A segment file on which no byte is locked is stale: its
// maker made it unnamed (O_TMPFILE) and gave it its name only once it held its lock, so no
// segment is ever visible unlocked while its maker lives (where the filesystem has no O_TMPFILE,
// a fresh one is unlocked for the microseconds between its creation and its lock).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kubetrain::worker {

struct ShmFile {
  int fd = -1;
  std::string path;  // directory + name, for messages, once named
  bool named = false;
};

// Makes a file of `bytes` in `directory` (a tmpfs: "/dev/shm") for a segment called `name`
// ("/kubetrain-..."), with `lock_byte` locked, named only by NameShmFile where the filesystem
// allows. RESOURCE_EXHAUSTED "<directory> is full: ..." when it has not `bytes` free;
// UNAVAILABLE for any other failure.
absl::StatusOr<ShmFile> MakeShmFile(const std::string& directory, const std::string& name,
                                    uint64_t bytes, int lock_byte);
// Gives a file of MakeShmFile its name (nothing where it has it already).
absl::Status NameShmFile(ShmFile& file);
// Opens the segment file `path` of this user (no link, a regular file).
absl::StatusOr<int> OpenShmFile(const std::string& path);
void UnlinkShmFile(const std::string& path);

// Locks byte `byte` of `fd` for this open file; false when another holds it or it fails.
bool LockShmByte(int fd, int byte);
// Whether nobody holds a lock on byte `byte` of `fd` (one of `bytes` bytes when `bytes` > 1).
bool ShmBytesFree(int fd, int byte, int bytes = 1);

// Removes the segment files in `directory` ("/kubetrain-" and 16 hex digits, regular files of
// this user) on which no process holds a lock: what ranks killed during a rendezvous left.
// Returns how many it removed; logs each.
int SweepStaleShmFiles(const std::string& directory);

}  // namespace kubetrain::worker
