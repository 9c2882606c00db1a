// The all-reduce exchange's optimizer update on the device (worker/runtime/exchange_allreduce.cc),
// in a form a captured step can replay (docs/decisions/0010-one-graph-per-step.md): the step's
// rule is written into staging memory before the step, and the update uploads it and reads it
// from device memory when it runs (Device::ApplyUpdates), so a replay applies the learning rate
// and bias correction of the step it is replayed for. The step's summed loss comes back through
// the same staging block.
#pragma once

#include <cstddef>
#include <vector>

#include "ps/update_rule.h"
#include "worker/core/device.h"
#include "worker/runtime/fused_buckets.h"
#include "worker/runtime/replica_state.h"

namespace kubetrain::worker {

// Borrows the Device, which must outlive it. Not thread-safe: the training thread's.
class DeviceUpdate {
 public:
  // Floats of loss (and flags) the staging block brings back.
  static constexpr int kLossFloats = 2;

  explicit DeviceUpdate(Device& device);
  ~DeviceUpdate();
  DeviceUpdate(const DeviceUpdate&) = delete;
  DeviceUpdate& operator=(const DeviceUpdate&) = delete;

  // Points the update at every variable of `fused` (its summed gradient in the fused buffer,
  // its value, its optimizer slots in `state`). Returns whether anything changed since the last
  // call: work captured with the old pointers must not be replayed.
  bool Target(FusedBuckets& fused, ReplicaState& state);

  // Writes the next step's rule into the staging block. The device must be done reading it (the
  // last step was waited for).
  void Stage(const ps::UpdateRule& rule) { staged_->rule = rule; }
  // Issues the upload of the staged rule and the update of every variable under it.
  void Issue();
  // Queues the download of `count` (at most kLossFloats) device floats at `loss` into the staging
  // block (Device::QueueDownload: no wait, so a collective before it stays under its
  // communicator's timeout); loss() reads them after the device's next Synchronize.
  void IssueLossDownload(const float* loss, int count);
  const float* loss() const { return staged_->loss; }

 private:
  struct Staged {
    ps::UpdateRule rule;
    float loss[kLossFloats] = {};
  };

  Device& device_;
  Staged* staged_;                   // staging memory (Device::AllocateHostBytes)
  Buffer<ps::UpdateRule> rule_;      // the staged rule on the device
  std::vector<UpdateSlice> slices_;  // one per variable, in the fused buffers' order
  std::vector<UpdateSlice> next_;    // Target's scratch
};

}  // namespace kubetrain::worker
