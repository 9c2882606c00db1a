#include "worker/entrypoint/entrypoint.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/api/tf_config.h"

namespace kubetrain::worker {

absl::StatusOr<int> FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("no free TCP port for the one-process rendezvous: ", std::strerror(error)));
  }
  close(fd);
  return ntohs(addr.sin_port);
}

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
    if (!port.ok()) return port.status();
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
