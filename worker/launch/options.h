// kubetrain-worker's command line: the flags (with their environment variables) and their checks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/core/precision.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::worker {

struct Options {
  TrainerOptions trainer;
  std::string mode = "ps-sync";
  std::string device = "auto";
  int cuda_device = -1;  // -1: chosen from LOCAL_RANK or TF_CONFIG (worker/core/device_choice.h)
  // --tf32: unset (convolutions in TF32, GEMMs in FP32), true (both) or false (neither).
  std::optional<bool> tf32;
  // --cuda-graphs: unset, on where the task runs on a GPU; true is an error on the CPU.
  std::optional<bool> cuda_graphs;
  // --precision: fp32, or bf16 GEMMs and convolutions with float32 master weights.
  Precision precision = Precision::kFloat32;
  std::string data_dir = std::string(kDefaultFashionMnistDir);
  std::string tf_config;
  std::vector<std::string> ps;
  int worker_index = 0;
  int num_workers = 1;
  std::string job_name = "job";
  std::string bind_address = "0.0.0.0";
  int metrics_port = 8080;
  int threads = 1;
  std::string log_level = "info";
  // All-reduce mode.
  std::string communicator = "auto";
  bool bind_cpus = true;
  absl::Duration collective_timeout = absl::Minutes(5);
  int fusion_threshold_mb = 64;
  std::string gradient_compression = "none";  // none, fp16, bf16
  std::string coordinator;  // without TF_CONFIG: the chief's coordinator host:port
  // The chief's checkpoints outlive its pod (the operator says so: operator/api/
  // checkpoint_storage.h); false: the chief warns at start that a recreated pod starts over.
  bool checkpoint_durable = true;
};

// Flags first, then their environment variables (TF_CONFIG, KUBETRAIN_*). Errors name the flag;
// --help is kubetrain::HelpRequested. Sets the log level.
absl::StatusOr<Options> ParseFlags(int argc, char** argv);

}  // namespace kubetrain::worker
