#include "worker/cuda/nccl_communicator.h"

#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status.h"
#include "worker/cuda/cuda_check.h"

namespace kubetrain::worker {
namespace {

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Polling: a few yields first, so a fast collective returns at once, then short sleeps, so a
// slow one (a peer still computing) does not burn a core that the peer may need.
void Pause(int& polls) {
  if (++polls < 64) {
    std::this_thread::yield();
  } else {
    absl::SleepFor(absl::Microseconds(50));
  }
}

}  // namespace

NcclCommunicator::NcclCommunicator(CudaDevice& device, int rank, int size, absl::Duration timeout,
                                   const std::atomic<bool>* stop)
    : device_(device), rank_(rank), size_(size), timeout_(timeout), stop_(stop) {}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    CudaDevice& device, KeyValueStore& store, int rank, int size, absl::Duration timeout,
    const std::atomic<bool>* stop) {
  if (size < 1 || rank < 0 || rank >= size || timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL communicator: rank ", rank, " of ", size,
                                                   " with timeout ", absl::FormatDuration(timeout),
                                                   " (need 0 <= rank < size and timeout > 0)"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  RETURN_IF_ERROR(device.MakeCurrent());
  ncclUniqueId id;
  const std::string key(kUniqueIdKey);
  if (rank == 0) {
    KT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
    RETURN_IF_ERROR(store.Set(key, std::string(id.internal, sizeof(id.internal))),
                    "publishing the NCCL unique id");
  } else {
    ASSIGN_OR_RETURN(const std::string bytes, store.Get(key, timeout),
                     "waiting for rank 0's NCCL unique id");
    if (bytes.size() != sizeof(id.internal)) {
      return absl::InternalError(absl::StrCat("the NCCL unique id under \"", key, "\" has ",
                                              bytes.size(), " bytes, expected ",
                                              sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(device, rank, size, timeout, stop));
  ASSIGN_OR_RETURN(comm->barrier_, cuda::AllocateDeviceMemory(sizeof(float)));
  // On the compute stream, where the barrier's all-reduce runs after it.
  KT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(comm->barrier_.get(), 0, sizeof(float), device.stream()));
  // Non-blocking, so that waiting for peers can be bounded by the deadline (a blocking
  // ncclCommInitRank waits forever for a rank that never comes).
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t started = ncclCommInitRankConfig(&comm->comm_, size, id, rank, &config);
  if (started != ncclSuccess && started != ncclInProgress) {
    return comm->Abort(KT_NCCL_STATUS(started));
  }
  RETURN_IF_ERROR(comm->WaitForComm("ncclCommInitRankConfig", deadline), "setting up NCCL rank ",
                  rank, " of ", size);
  return comm;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  cuda::LogIfError(device_.MakeCurrent(), "Failed to make the NCCL communicator's device current");
  // Finalize flushes outstanding work and may wait for peers: bounded like every other wait.
  const ncclResult_t finalizing = ncclCommFinalize(comm_);
  absl::Status status =
      finalizing == ncclInProgress ? absl::OkStatus() : KT_NCCL_STATUS(finalizing);
  if (status.ok()) status = WaitForComm("ncclCommFinalize", absl::Now() + timeout_);
  if (!status.ok()) {
    cuda::LogIfError(Abort(std::move(status)),
                     "Failed to finalize the NCCL communicator; aborted it");
    return;
  }
  const ncclResult_t destroyed = ncclCommDestroy(std::exchange(comm_, nullptr));
  if (destroyed != ncclInProgress) {
    cuda::LogIfError(KT_NCCL_STATUS(destroyed), "Failed to destroy the NCCL communicator");
  }
}

absl::Status NcclCommunicator::Ready() const {
  if (comm_ == nullptr) {
    return absl::FailedPreconditionError(
        "the NCCL communicator was aborted after an earlier failure; rendezvous again");
  }
  return device_.MakeCurrent();
}

absl::Status NcclCommunicator::TimedOut(const char* what) const {
  return absl::DeadlineExceededError(
      absl::StrCat(what, " (rank ", rank_, " of ", size_, ") did not complete within ",
                   absl::FormatDuration(timeout_),
                   ": a peer is missing or stalled; the NCCL communicator was aborted"));
}

absl::Status NcclCommunicator::Stopped(const char* what) const {
  if (stop_ == nullptr || !stop_->load()) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat(what, " (rank ", rank_, " of ", size_,
                                           ") interrupted by a stop request (SIGTERM); the NCCL "
                                           "communicator was aborted"));
}

absl::Status NcclCommunicator::Abort(absl::Status status) {
  if (comm_ != nullptr) {
    const ncclResult_t aborted = ncclCommAbort(std::exchange(comm_, nullptr));
    if (aborted != ncclInProgress) {
      cuda::LogIfError(KT_NCCL_STATUS(aborted), "Failed to abort the NCCL communicator");
    }
  }
  return status;
}

absl::Status NcclCommunicator::WaitForComm(const char* what, absl::Time deadline) {
  for (int polls = 0;; Pause(polls)) {
    ncclResult_t state = ncclSuccess;
    absl::Status status = KT_NCCL_STATUS(ncclCommGetAsyncError(comm_, &state));
    if (!status.ok()) return Abort(std::move(status));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return Abort(cuda::NcclStatus(state, what, __FILE__, __LINE__));
    if (absl::Now() >= deadline) return Abort(TimedOut(what));
    if (absl::Status stopped = Stopped(what); !stopped.ok()) return Abort(std::move(stopped));
  }
}

absl::Status NcclCommunicator::WaitForStream(const char* what, absl::Time deadline) {
  for (int polls = 0;; Pause(polls)) {
    const cudaError_t done = cudaStreamQuery(device_.stream());
    if (done == cudaSuccess) return absl::OkStatus();
    if (done != cudaErrorNotReady) {
      return Abort(cuda::CudaStatus(done, "cudaStreamQuery(compute stream)", __FILE__, __LINE__));
    }
    // "Not ready" is a state, not an error; do not leave it for a later launch check to find.
    if (cudaPeekAtLastError() == cudaErrorNotReady) static_cast<void>(cudaGetLastError());
    ncclResult_t state = ncclSuccess;
    absl::Status status = KT_NCCL_STATUS(ncclCommGetAsyncError(comm_, &state));
    if (!status.ok()) return Abort(std::move(status));
    if (state != ncclSuccess && state != ncclInProgress) {
      return Abort(cuda::NcclStatus(state, what, __FILE__, __LINE__));
    }
    if (absl::Now() >= deadline) return Abort(TimedOut(what));
    if (absl::Status stopped = Stopped(what); !stopped.ok()) return Abort(std::move(stopped));
  }
}

absl::Status NcclCommunicator::Complete(ncclResult_t issued, const char* what) {
  const absl::Time deadline = absl::Now() + timeout_;
  if (issued == ncclInProgress) {
    RETURN_IF_ERROR(WaitForComm(what, deadline));
  } else if (issued != ncclSuccess) {
    return Abort(cuda::NcclStatus(issued, what, __FILE__, __LINE__));
  }
  return WaitForStream(what, deadline);
}

absl::Status NcclCommunicator::AllReduce(float* data, size_t count, ReduceOp op) {
  RETURN_IF_ERROR(Ready());
  if (count == 0) return absl::OkStatus();
  return Complete(ncclAllReduce(data, data, count, ncclFloat, ToNccl(op), comm_, device_.stream()),
                  "ncclAllReduce");
}

absl::Status NcclCommunicator::AllReduceMany(absl::Span<const absl::Span<float>> buffers,
                                             ReduceOp op) {
  RETURN_IF_ERROR(Ready());
  const ncclResult_t started = ncclGroupStart();
  if (started != ncclSuccess) {
    return Abort(cuda::NcclStatus(started, "ncclGroupStart", __FILE__, __LINE__));
  }
  ncclResult_t issued = ncclSuccess;
  for (absl::Span<float> b : buffers) {
    if (b.empty()) continue;
    issued =
        ncclAllReduce(b.data(), b.data(), b.size(), ncclFloat, ToNccl(op), comm_, device_.stream());
    if (issued != ncclSuccess && issued != ncclInProgress) break;
  }
  // The group is always closed, so a failed call does not leave NCCL inside it.
  const ncclResult_t ended = ncclGroupEnd();
  if (issued != ncclSuccess && issued != ncclInProgress) {
    return Abort(cuda::NcclStatus(issued, "ncclAllReduce (grouped)", __FILE__, __LINE__));
  }
  if (ended == ncclInProgress) {
    return WaitForComm("ncclGroupEnd (all-reduce)", absl::Now() + timeout_);
  }
  if (ended != ncclSuccess) {
    return Abort(cuda::NcclStatus(ended, "ncclGroupEnd (all-reduce)", __FILE__, __LINE__));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::WaitForQueued() {
  RETURN_IF_ERROR(Ready());
  return WaitForStream("ncclAllReduce (grouped) and the work queued after it",
                       absl::Now() + timeout_);
}

absl::Status NcclCommunicator::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast root ", root, " is not a rank of ", size_));
  }
  RETURN_IF_ERROR(Ready());
  if (count == 0) return absl::OkStatus();
  return Complete(ncclBroadcast(data, data, count, ncclFloat, root, comm_, device_.stream()),
                  "ncclBroadcast");
}

absl::Status NcclCommunicator::Barrier() {
  RETURN_IF_ERROR(Ready());
  return Complete(
      ncclAllReduce(barrier_.get(), barrier_.get(), 1, ncclFloat, ncclSum, comm_, device_.stream()),
      "ncclAllReduce (barrier)");
}

}  // namespace kubetrain::worker
