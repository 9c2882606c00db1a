// operator_scale's harness: localkube and the real kubetrain-operator as child processes of the
// bench, their logs in a temp dir, the TrainingJob CRD installed, and the bench's own client.
// What is measured on them, and how it is reported, is in operator_scale.cc and report.h.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bench/operator_scale/options.h"
#include "operator/kube/client.h"

namespace kubetrain::bench {

class Supervisor;  // the child processes and their logs (cluster.cc)

// localkube, the TrainingJob CRD and kubetrain-operator, set up in that order by Start. The
// destructor stops the operator, then localkube, and removes the temp dir unless --keep-logs.
class Cluster {
 public:
  explicit Cluster(Options opt);
  ~Cluster();

  // Makes the temp dir (logs, kubeconfig), starts localkube (ready within 30 s of `start`),
  // installs the CRD, then starts the operator (metrics and health on free 127.0.0.1 ports) and
  // waits for its /readyz.
  absl::Status Start(absl::Time start);
  // An error naming the child, with the tail of its log, when localkube or the operator exited.
  absl::Status CheckChildren();
  // SIGTERM to the operator, a grace period, then SIGKILL. Its exit code.
  std::optional<int> StopOperator();

  // The bench's own client, unthrottled: only the operator's limits are under test.
  kube::Client& client() { return *client_; }
  const std::string& dir() const { return dir_; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  pid_t operator_pid() const { return operator_pid_; }
  int metrics_port() const { return metrics_port_; }

 private:
  absl::Status StartLocalkube(absl::Time start);
  absl::Status InstallCrd();
  absl::Status StartOperator();

  Options opt_;
  std::string dir_;
  std::unique_ptr<Supervisor> supervisor_;
  std::string kubeconfig_;
  std::unique_ptr<kube::Client> client_;
  pid_t operator_pid_ = 0;
  int metrics_port_ = 0;
};

}  // namespace kubetrain::bench
