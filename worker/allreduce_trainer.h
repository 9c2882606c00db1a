// Data-parallel all-reduce training (no parameter servers): every rank holds the whole model,
// computes gradients on its shard, sums them with its peers through a Communicator (Gloo on the
// CPU, NCCL on GPUs), and applies the same optimizer update on its device, so every rank keeps
// bit-identical parameters. Rank 0 is the chief: it restores from the latest checkpoint (and
// broadcasts the state to the others), evaluates each epoch, logs progress, checkpoints, and
// prints the run's summary.
//
// Gradients travel in fused buffers (Horovod's tensor fusion): variables are packed, in order,
// into buffers of at most `fusion_bytes`, one all-reduce each. The step's mean loss rides in the
// last buffer, so the chief logs the loss over every rank's batch at no extra collective.
#pragma once

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/trainer.h"

namespace kubetrain::worker {

class AllReduceTrainer {
 public:
  // `identity.communicator` must be set, with rank() == identity.rank and size() ==
  // identity.num_workers. Borrows the device, datasets, communicator and metrics.
  AllReduceTrainer(TrainerOptions options, TaskIdentity identity, Device& device,
                   const Dataset* train, const Dataset* test, WorkerMetrics* metrics);
  ~AllReduceTrainer();

  absl::StatusOr<TrainingSummary> Run(const std::atomic<bool>& stop);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// FNV-1a over the bytes of `values`: the parameter checksum ranks compare.
uint64_t ParameterChecksum(const float* values, size_t count);

}  // namespace kubetrain::worker
