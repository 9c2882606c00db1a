// kubetrain-entrypoint: the worker image's ENTRYPOINT. One image serves every task of a job, as a
// TensorFlow program's image does (Kubeflow's dist-mnist runs one image for PS and Worker with
// no `command`): it reads TF_CONFIG and execs the program of the task's role, so that SIGTERM
// reaches that program directly.
//   - task.type ps                               -> kubetrain-ps ARGS
//   - task.type chief, master, worker, evaluator -> kubetrain-worker ARGS (it reads the role)
//   - no TF_CONFIG (a one-replica TFJob gets none, as a TensorFlow program trained in one
//     process) -> kubetrain-worker --coordinator=127.0.0.1:PORT ARGS, PORT a free one, with
//     KUBETRAIN_MODE=allreduce unless set: one rank that trains alone
//   - ARGS whose first word is not a flag (`args: [kubetrain-ps, --port=2222]`) -> that program
//     with the rest, whatever TF_CONFIG says.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::worker {

inline constexpr char kWorkerProgram[] = "kubetrain-worker";
inline constexpr char kPsProgram[] = "kubetrain-ps";

struct Launch {
  std::string program;            // looked up on PATH
  std::vector<std::string> args;  // after the program name
  // Environment set only where the container does not already set it.
  std::vector<std::pair<std::string, std::string>> default_env;
  std::string why;  // one line for the log: the role and where it came from
};

// `tf_config`: the TF_CONFIG environment variable, nullopt when unset (empty counts as unset, as
// in TensorFlow). `free_port` gives the one-process rendezvous its port (called only without
// TF_CONFIG). Errors name TF_CONFIG's field (a malformed config, an unknown task type).
absl::StatusOr<Launch> ChooseLaunch(const std::optional<std::string>& tf_config,
                                    const std::vector<std::string>& args,
                                    const std::function<absl::StatusOr<int>()>& free_port);

}  // namespace kubetrain::worker
