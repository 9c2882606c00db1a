// TF_CONFIG: the cluster spec every task of a job receives, in TensorFlow's own format, so real
// TensorFlow programs run under kubetrain unchanged:
//   {"cluster":{"chief":["a:2222"],"ps":["b:2222"],"worker":["c:2222"]},"task":{"type":"worker","index":0}}
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/host_port.h"  // SplitHostPort for the cluster addresses

namespace kubetrain::api {

struct TfConfig {
  // Task type ("chief", "ps", "worker") → "host:port" of each index. kubetrain lists no
  // evaluators; Kubeflow's TFJob does, and may call the chief "master".
  std::map<std::string, std::vector<std::string>> cluster;
  std::string task_type;
  int task_index = 0;
  // Kubeflow's "environment" ("cloud"), kept so that the config round-trips; kubetrain sets none.
  std::string environment;

  // The task type of the chief: "chief" when the cluster has one, else "master" (Kubeflow's
  // TFJob, TensorFlow 1's name for it) when it has one, else "worker".
  std::string ChiefType() const;
  // Index 0 of ChiefType().
  bool IsChief() const;
  // The address of this task, or "" for an evaluator (not in the cluster).
  std::string TaskAddress() const;
  // Addresses of one task type; empty when absent.
  const std::vector<std::string>& Addresses(absl::string_view type) const;
};

// The kernel refuses a single environment string over 128 KiB (MAX_ARG_STRLEN), so no process
// can be started with a larger TF_CONFIG.
inline constexpr size_t kMaxTfConfigBytes = 128 * 1024;

// Parses and checks TF_CONFIG; errors name the field, e.g.
// `TF_CONFIG: task.index: 3 is out of range, cluster.worker has 2 entries`.
absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json);

// Serialises with sorted keys and no spaces, byte-for-byte what the operator puts in the env.
std::string ToJsonString(const TfConfig& config);

}  // namespace kubetrain::api
