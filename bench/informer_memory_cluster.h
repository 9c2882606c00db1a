// informer_memory's cluster harness: localkube as a child process (plain HTTP on loopback,
// compacting its history every 200 ms), the TrainingJob CRD, and the finished TrainingJobs the
// measurements read, made from deploy/examples. The measurement and the report are in
// informer_memory.cc.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"

namespace kubetrain::bench {

// The annotation `kubectl apply` writes: the manifest it applied, as compact JSON.
inline constexpr char kLastApplied[] = "kubectl.kubernetes.io/last-applied-configuration";

// A running localkube, its output drained by `drain`. The destructor stops it and removes its
// temp dir.
struct Localkube {
  std::unique_ptr<kubetrain::Process> process;
  std::string dir;
  std::string output;
  std::atomic<bool> stop{false};
  std::mutex mu;  // guards process and output
  std::thread drain;

  ~Localkube();
};

// Starts the localkube binary at `localkube_path` in a fresh temp dir and reads the kubeconfig
// it writes into `config`.
absl::Status StartLocalkube(const std::string& localkube_path, Localkube* lk,
                            kube::ClusterConfig* config);

// Installs deploy/crd's TrainingJob CRD and waits until it is served.
absl::Status InstallCrd(kube::Client& client);

// Every TrainingJob in deploy/examples/*.yaml, the files in name order.
absl::StatusOr<std::vector<nlohmann::json>> LoadExamples();

// Creates jobs [begin, end) with `kubectl` and writes each one's finished status with `operator_`.
absl::Status CreateJobs(kube::Client& kubectl, kube::Client& operator_,
                        const std::vector<nlohmann::json>& examples, int begin, int end,
                        absl::Time deadline);

}  // namespace kubetrain::bench
