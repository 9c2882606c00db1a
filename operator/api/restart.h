// What a task's exit means under its replica's restartPolicy. Shared by the operator (pods) and
// `kubetrain run` (processes) so both launchers apply the same rules.
#pragma once

#include <string>

#include "operator/api/types.h"

namespace kubetrain::api {

enum class ExitAction {
  kSucceeded,  // exit 0: the task is done
  kRestart,    // retryable: start it again (counts against backoffLimit)
  kFail,       // permanent: the job fails
};

// exit_code is the container's exit code; a process killed by signal N reports 128 + N.
// Always and OnFailure restart any non-zero exit; Never fails on it; ExitCode fails on 1-127
// (the program's own error) and restarts on 128-255 (killed: OOM, eviction, preemption).
ExitAction DecideExit(RestartPolicy policy, int exit_code);

// "exited with code 137 (SIGKILL)" for messages and events.
std::string DescribeExit(int exit_code);

}  // namespace kubetrain::api
