// Finding and removing a sandbox instance's objects by name: the one removal path for both a
// Network's own teardown and the sweep of what killed instances left behind (names.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::sandbox {

// Where instances hold their locks (lock_file.h): one per instance prefix, one per address block.
inline constexpr absl::string_view kDefaultLockDir = "/run/kubetrain-sandbox";
std::string InstanceLockPath(absl::string_view lock_dir, absl::string_view prefix);
std::string BlockLockPath(absl::string_view lock_dir, int block);

// Removes every object named with `prefix` (one of `family`'s): host veth ends, network
// namespaces, bridges, ifbs (and with them their qdiscs and routes) and the policy rules on
// those bridges, all through one `ip` batch; the links by their link group (names.h) when it
// holds nothing else. Already gone is fine; the first other failure is returned after trying the
// rest.
absl::Status RemoveInstanceObjects(absl::string_view family, absl::string_view prefix);

// Removes the objects and lock files of every `family` instance whose lock can be taken, i.e.
// whose process is gone; a live instance's lock is held, so its objects are never touched. Also
// removes unheld address-block lock files. Returns the prefixes swept.
absl::StatusOr<std::vector<std::string>> SweepStale(absl::string_view family,
                                                    absl::string_view lock_dir = kDefaultLockDir);

}  // namespace kubetrain::sandbox
