#include "worker/entrypoint/entrypoint.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "operator/api/tf_config.h"

namespace kubetrain::worker {

absl::StatusOr<Launch> ChooseLaunch(const std::optional<std::string>& tf_config,
                                    const std::vector<std::string>& args,
                                    const std::function<absl::StatusOr<int>()>& free_port) {
  Launch launch;
  if (!args.empty() && !args[0].empty() && args[0][0] != '-') {
    launch.program = args[0];
    launch.args.assign(args.begin() + 1, args.end());
    launch.why = "the program named by the first argument";
    return launch;
  }
  if (!tf_config.has_value() || tf_config->empty()) {
    // A free port for the one rank's rendezvous, so that jobs sharing a host's network do not
    // collide (kubetrain-worker's chief listens on its --coordinator port).
    absl::StatusOr<int> port = free_port();
    if (!port.ok()) {
      return internal::WithContext(port.status(), "a port for the one-process rendezvous");
    }
    launch.program = kWorkerProgram;
    launch.args.push_back(absl::StrCat("--coordinator=127.0.0.1:", *port));
    launch.args.insert(launch.args.end(), args.begin(), args.end());
    launch.default_env.emplace_back("KUBETRAIN_MODE", "allreduce");
    launch.why = "no TF_CONFIG: one process trains alone";
    return launch;
  }
  absl::StatusOr<api::TfConfig> config = api::ParseTfConfig(*tf_config);
  if (!config.ok()) return config.status();
  const std::string& type = config->task_type;
  if (type == "ps") {
    launch.program = kPsProgram;
  } else if (type == "chief" || type == "master" || type == "worker" || type == "evaluator") {
    launch.program = kWorkerProgram;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "TF_CONFIG: task.type: unsupported \"", type,
        "\"; this image runs ps (kubetrain-ps) and chief, master, worker and evaluator tasks "
        "(kubetrain-worker)"));
  }
  launch.args = args;
  launch.why = absl::StrCat("TF_CONFIG task ", type, " ", config->task_index);
  return launch;
}

}  // namespace kubetrain::worker
