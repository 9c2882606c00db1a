// Directories only their owner may enter, for what a run keeps on a machine other users share:
// checkpoints, a job's scratch folder. A shared /tmp lets any local user create a path first
// (a planted checkpoint, a symlink into a directory of their choosing), so a directory is made
// with mkdir (never through a symlink) and an existing one is trusted only when it is a real
// directory owned by this process's user that no one else may write.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace kubetrain {

// "uid 1000 (alice)", or "uid 1000" for a uid the user database does not name: how errors about
// a file's owner name the user.
std::string UserName(uid_t uid);

// Makes `path` (mode 0700; its missing parents too, 0700) or checks the one there: a directory,
// not a symlink, owned by the effective user, not writable by group or others. An existing
// directory of the user's own that others may read is made 0700. FAILED_PRECONDITION naming the
// path, what is wrong (its owner, its mode, the symlink's target) and the fix.
absl::Status EnsurePrivateDirectory(const std::string& path);

// The effective user's own scratch folder under $TMPDIR (/tmp when unset):
// $TMPDIR/kubetrain-<uid>, made or checked by EnsurePrivateDirectory. One folder per user: a
// folder that another user's run made first never stands in the way.
absl::StatusOr<std::string> UserScratchDirectory();

// A new folder `<prefix>-XXXXXX` (mkdtemp: unpredictable, made atomically, 0700) in `parent`,
// which must already be private.
absl::StatusOr<std::string> MakeUniqueDirectory(const std::string& parent,
                                                const std::string& prefix);

}  // namespace kubetrain
