// operator_scale's options: its flags (parsed in operator_scale.cc), shared by the cluster
// harness (cluster.h), the run (operator_scale.cc) and the report (report.h).
#pragma once

#include <string>

#include "absl/time/time.h"

namespace kubetrain::bench {

struct Options {
  int jobs = 500;
  int workers_per_job = 3;
  int operator_workers = 4;
  double qps = 50;  // the operator's own defaults: measure what ships
  int burst = 100;
  int client_threads = 4;
  std::string localkube;
  std::string operator_path;
  std::string crd =
      std::string(KUBETRAIN_SOURCE_DIR) + "/deploy/crd/kubetrain.dev_trainingjobs.yaml";
  absl::Duration timeout = absl::Minutes(15);
  bool json = false;
  bool keep_logs = false;
};

}  // namespace kubetrain::bench
