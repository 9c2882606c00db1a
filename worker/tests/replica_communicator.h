// A Communicator for `size` ranks that all hold what this one holds, whose collectives queue
// device work as NCCL's do (Communicator::QueuesOnTheDevice): a sum is this rank's buffer times
// `size`, issued as a Device::Scale, so a capture records it with the step (StepTail) and a
// replay runs it; min, max and broadcast leave the buffer as it is. With it, CPU tests take the
// path a GPU job over NCCL takes, through a RecordingDevice. It counts the AllReduceMany calls
// the host made, which a replayed step does not make.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/status.h"
#include "worker/collective/communicator.h"
#include "worker/core/device.h"

namespace kubetrain::worker::testing {

class ReplicaCommunicator final : public Communicator {
 public:
  ReplicaCommunicator(Device& device, int size) : device_(device), size_(size) {}

  int64_t all_reduce_many_calls() const { return all_reduce_many_calls_; }
  // The next AllReduceMany fails with `status` and queues nothing, as a communicator whose peer
  // is gone does.
  void FailNextAllReduceMany(absl::Status status) { failure_ = std::move(status); }

  absl::string_view name() const override { return "replicas"; }
  int rank() const override { return 0; }
  int size() const override { return size_; }
  bool QueuesOnTheDevice() const override { return true; }

  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override {
    if (op == ReduceOp::kSum) device_.Scale(static_cast<int64_t>(count), size_, data);
    return absl::OkStatus();
  }
  absl::Status AllReduceMany(absl::Span<const absl::Span<float>> buffers, ReduceOp op) override {
    ++all_reduce_many_calls_;
    if (!failure_.ok()) return std::exchange(failure_, absl::OkStatus());
    for (absl::Span<float> b : buffers) RETURN_IF_ERROR(AllReduce(b.data(), b.size(), op));
    return absl::OkStatus();
  }
  absl::Status Broadcast(float*, size_t, int) override { return absl::OkStatus(); }
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  Device& device_;
  const int size_;
  int64_t all_reduce_many_calls_ = 0;
  absl::Status failure_;
};

}  // namespace kubetrain::worker::testing
