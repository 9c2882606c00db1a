// The child processes of allreduce_bench: the Gloo ranks (this program run again) and mpirun,
// started together, their stdout collected through one pipe, stopped together on a failure or
// at the deadline. The measurement and its table are in allreduce_bench.cc.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kubetrain::bench {

// INTERNAL: `what`, then strerror(errno).
absl::Status Errno(absl::string_view what);

// Starts one process per argv, all writing stdout into one pipe (stderr is inherited), and
// returns what they wrote once all have exited 0. A process that fails makes the others be
// stopped at once rather than left to run into their own timeouts; so does the deadline.
absl::StatusOr<std::string> RunProcesses(const std::vector<std::vector<std::string>>& argvs,
                                         absl::Duration timeout);

// This program's path, from /proc/self/exe; empty when it cannot be read.
std::string SelfPath();

}  // namespace kubetrain::bench
