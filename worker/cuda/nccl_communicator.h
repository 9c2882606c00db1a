// All-reduce among GPU workers through NCCL (see worker/collective/communicator.h).
#pragma once

#include <nccl.h>

#include <atomic>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/collective/communicator.h"
#include "worker/collective/rendezvous.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_resources.h"

namespace kubetrain::worker {

// One NCCL communicator over `size` ranks, one GPU each. Collectives run on the device's compute
// stream, so they are ordered with the kernels that produce and consume their buffers (device
// memory of that CudaDevice); each call returns once its result is in place.
//
// The communicator is non-blocking internally: set-up and every collective are polled against
// the timeout and the stop flag. A peer that dies or stalls makes the call abort the
// communicator and return DEADLINE_EXCEEDED (or the NCCL error that surfaced first); a stop
// request (SIGTERM) aborts it the same way and returns CANCELLED within a poll (~50 µs), so
// the process can exit long before --collective-timeout. After either, every call fails with
// FAILED_PRECONDITION: the job must re-rendezvous with a new communicator.
//
// Borrows the device, which must outlive it. Thread-compatible: used by the training thread.
class NcclCommunicator final : public Communicator {
 public:
  // The store key rank 0 publishes its ncclUniqueId under (128 raw bytes).
  static constexpr absl::string_view kUniqueIdKey = "nccl/unique_id";

  // Rendezvous through `store` and NCCL set-up, each bounded by `timeout`, which also bounds
  // every later collective. INVALID_ARGUMENT for a bad rank/size/timeout. `stop`, when given,
  // must outlive the communicator; once it is true every wait aborts (CANCELLED).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      CudaDevice& device, KeyValueStore& store, int rank, int size, absl::Duration timeout,
      const std::atomic<bool>* stop = nullptr);

  // Flushes and destroys the communicator (aborting it if that does not finish in time).
  ~NcclCommunicator() override;

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  absl::string_view name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override;
  // One ncclGroupStart/End around every buffer's ncclAllReduce, queued on the compute stream;
  // returns without waiting for it (WaitForQueued does).
  absl::Status AllReduceMany(absl::Span<const absl::Span<float>> buffers, ReduceOp op) override;
  absl::Status WaitForQueued() override;
  // Its collectives are captured with the step (NCCL 2.9 and later captures them).
  bool QueuesOnTheDevice() const override { return true; }
  absl::Status Broadcast(float* data, size_t count, int root) override;
  // An all-reduce of one float.
  absl::Status Barrier() override;

 private:
  NcclCommunicator(CudaDevice& device, int rank, int size, absl::Duration timeout,
                   const std::atomic<bool>* stop);

  // Fails once the communicator has been aborted; makes the device current otherwise.
  absl::Status Ready() const;
  // Polls the communicator until its pending non-blocking call (set-up, an enqueue, finalize)
  // completes, up to `deadline`.
  absl::Status WaitForComm(const char* what, absl::Time deadline);
  // Polls the compute stream until the enqueued collective is done, watching for NCCL errors.
  absl::Status WaitForStream(const char* what, absl::Time deadline);
  // Aborts the communicator (it is unusable afterwards) and returns `status`.
  absl::Status Abort(absl::Status status);
  // Takes a collective's non-blocking result and waits for its enqueue, then its completion.
  absl::Status Complete(ncclResult_t issued, const char* what);
  absl::Status TimedOut(const char* what) const;
  // CANCELLED naming `what` when a stop was requested; OK otherwise.
  absl::Status Stopped(const char* what) const;

  CudaDevice& device_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const std::atomic<bool>* const stop_;  // may be null
  ncclComm_t comm_ = nullptr;            // null after an abort
  cuda::DeviceMemory barrier_;           // the one float Barrier reduces
};

}  // namespace kubetrain::worker
