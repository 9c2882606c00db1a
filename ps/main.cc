// kubetrain-ps: one parameter-server task. Starts uninitialised, is filled by the chief (Init),
// serves pushes and pulls, and exits 0 after a Shutdown RPC, SIGTERM or SIGINT.
#include <pthread.h>
#include <signal.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/flags.h"
#include "common/host_port.h"
#include "common/job_secret.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/program.h"
#include "common/status.h"
#include "operator/api/tf_config.h"
#include "ps/metrics.h"
#include "ps/server.h"

namespace kubetrain::ps {
namespace {

constexpr int kDefaultPort = 2222;

struct Options {
  int port = kDefaultPort;
  std::string bind_address = "0.0.0.0";
  int metrics_port = 8080;
  int max_message_mb = 256;
  std::string log_level = "info";
  absl::Duration max_pull_wait = absl::Minutes(10);
  absl::Duration shutdown_grace = absl::Seconds(1);
  std::string tf_config;
  std::string job_secret;
  bool shared_memory = true;
};

absl::StatusOr<Options> ParseOptions(int argc, char** argv) {
  Options opt;
  FlagSet flags("kubetrain-ps", "Parameter server: holds a shard of the model's variables.");
  flags
      .Add("port", &opt.port,
           "gRPC port; when left at 2222, the port of this task in TF_CONFIG wins",
           "KUBETRAIN_PORT")
      .Port();
  flags.Add("bind-address", &opt.bind_address, "address to bind gRPC on", "KUBETRAIN_BIND_ADDRESS");
  flags
      .Add("metrics-port", &opt.metrics_port, "Prometheus /metrics port (0: any)",
           "KUBETRAIN_METRICS_PORT")
      .Port();
  // 2047 MiB keeps the byte count within gRPC's int message limits.
  flags
      .Add("max-message-mb", &opt.max_message_mb, "largest gRPC message sent or received, MiB",
           "KUBETRAIN_MAX_MESSAGE_MB")
      .Range(4, 2047);
  flags.Add("log-level", &opt.log_level, "debug, info, warn or error", "KUBETRAIN_LOG_LEVEL");
  flags
      .Add("max-pull-wait", &opt.max_pull_wait, "longest a Pull waits for its step",
           "KUBETRAIN_MAX_PULL_WAIT")
      .AtLeast(absl::ZeroDuration());
  // Capped so the process exits within 2 s of SIGTERM whatever its clients do.
  flags.Add("shutdown-grace", &opt.shutdown_grace, "time given to calls in flight at shutdown")
      .Range(absl::ZeroDuration(), absl::Milliseconds(1500));
  flags.Add("shared-memory", &opt.shared_memory,
            "map the shared memory a worker on this host offers, so its pushes and pulls skip "
            "the socket (false: gRPC bytes only)",
            "KUBETRAIN_PS_SHARED_MEMORY");
  flags.Add("tf-config", &opt.tf_config, "cluster spec JSON (TensorFlow's TF_CONFIG)", "TF_CONFIG");
  flags.Add("job-secret", &opt.job_secret,
            "the job's shared secret every call must carry (prefer the environment variable: a "
            "flag shows in the process list)",
            kJobSecretEnv);
  ASSIGN_OR_RETURN(std::vector<std::string> args, flags.Parse(argc, argv));
  if (!args.empty()) return absl::InvalidArgumentError("kubetrain-ps takes no arguments");
  RETURN_IF_ERROR(ValidateJobSecret(opt.job_secret));
  return opt;
}

// Takes this task's port from TF_CONFIG unless --port chose one.
absl::Status ApplyTfConfig(Options& opt) {
  if (opt.tf_config.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(api::TfConfig config, api::ParseTfConfig(opt.tf_config));
  if (config.task_type != "ps") {
    return absl::InvalidArgumentError(
        absl::StrCat("TF_CONFIG: task.type is ", config.task_type, ", kubetrain-ps serves ps"));
  }
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort(config.TaskAddress(), &host, &port), "TF_CONFIG");
  if (opt.port == kDefaultPort) opt.port = port;
  log::Info("Read TF_CONFIG", {{"task_index", config.task_index},
                               {"ps_tasks", config.Addresses("ps").size()},
                               {"port", opt.port}});
  return absl::OkStatus();
}

// Waits for SIGTERM/SIGINT (blocked in every thread, so they queue here) or a Shutdown RPC.
void WaitForShutdown(const sigset_t& signals, ParameterServerService& service) {
  const timespec tick{0, 200 * 1000 * 1000};
  while (!service.shutdown_requested()) {
    siginfo_t info;
    const int sig = sigtimedwait(&signals, &info, &tick);
    if (sig > 0) service.RequestShutdown(absl::StrCat("signal ", strsignal(sig)));
  }
}

absl::Status Run(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // Before any thread starts, so gRPC's and civetweb's threads inherit the mask.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ASSIGN_OR_RETURN(Options opt, ParseOptions(argc, argv));
  RETURN_IF_ERROR(log::SetLevelFlag(opt.log_level));
  RETURN_IF_ERROR(ApplyTfConfig(opt));

  ASSIGN_OR_RETURN(auto metrics_server,
                   MetricsServer::Start(JoinHostPort(opt.bind_address, opt.metrics_port)));
  PsMetrics metrics(metrics_server->registry());
  ServerOptions server_options{.address = JoinHostPort(opt.bind_address, opt.port),
                               .max_message_bytes = opt.max_message_mb << 20,
                               .service = {.max_pull_wait = opt.max_pull_wait,
                                           .secret = opt.job_secret,
                                           .shared_memory = opt.shared_memory}};
  ASSIGN_OR_RETURN(auto server, PsServer::Start(server_options, &metrics));
  // The port actually bound: with --port=0 the system picks one.
  log::Info("Serving parameter server",
            {{"address", JoinHostPort(opt.bind_address, server->port())},
             {"metrics_port", metrics_server->port()},
             {"state", "uninitialised, waiting for the chief"},
             {"job_secret", !opt.job_secret.empty()}});
  if (opt.job_secret.empty()) {
    log::Warn(
        absl::StrCat("Any client that reaches the port may Init or Shut down this ps: no "
                     "job secret (set ",
                     kJobSecretEnv, ")"));
  }
  WaitForShutdown(signals, server->service());
  server->Stop(opt.shutdown_grace);
  log::Info("Stopped parameter server");
  return absl::OkStatus();
}

}  // namespace
}  // namespace kubetrain::ps

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  kubetrain::SetUpLargeMessageAllocator();
  absl::Status status = kubetrain::ps::Run(argc, argv);
  if (kubetrain::HelpRequested(status)) return 0;
  if (!status.ok()) {
    kubetrain::log::Error("kubetrain-ps failed", {{"error", status}});
    return absl::IsInvalidArgument(status) ? 2 : 1;
  }
  return 0;
}
