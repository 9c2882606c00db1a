// iproute2's `ip` and `tc`, run as child processes (common/process.h) with a deadline: the
// sandbox network talks to the kernel through them rather than through netlink of its own, as
// their command lines are the documented, stable interface for veths, bridges, namespaces,
// rules and qdiscs.
//
// Stateless and thread-safe.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kubetrain::sandbox {

// The absolute path of `tool` ("ip", "tc") in the usual system folders; NOT_FOUND otherwise.
absl::StatusOr<std::string> FindTool(absl::string_view tool);

// Runs `tool` with `args` (up to 10 s); its output on exit 0, else an error quoting the
// command and what it said (NOT_FOUND when it said the object does not exist).
absl::StatusOr<std::string> RunTool(absl::string_view tool, const std::vector<std::string>& args);

// RunTool with `-j` before `args`, parsed: a JSON array (empty output reads as []). The tool's
// stderr is dropped: `ip` warns there about objects that vanish while it lists them.
absl::StatusOr<nlohmann::json> RunToolJson(absl::string_view tool,
                                           const std::vector<std::string>& args);

// The named network namespaces (the files `ip netns add` makes under /run/netns), read directly
// rather than through `ip netns list`, which stumbles over namespaces being deleted meanwhile.
std::vector<std::string> ListNetns();

}  // namespace kubetrain::sandbox
