// Collective communication among the training workers of an all-reduce job.
//
// One Communicator per process, made once at start-up through a rendezvous (see
// worker/collective/rendezvous.h) and used by the training thread only. Buffers are in the memory
// of the Device the communicator was made for: host memory for Gloo (CPU device), device memory
// for NCCL (CUDA device). Every call is collective: each rank must make the same calls, with the
// same counts, in the same order; a peer that dies or stalls surfaces as an error within the
// communicator's timeout, never as a hang.
#pragma once

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ps/half_float.h"

namespace kubetrain::worker {

enum class ReduceOp { kSum, kMin, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;

  // "gloo" or "nccl".
  virtual absl::string_view name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: data[i] = op over every rank's data[i], for `count` floats.
  virtual absl::Status AllReduce(float* data, size_t count, ReduceOp op) = 0;
  // AllReduce of every buffer as one collective call (NCCL: one group). On a device that queues
  // work (NCCL) it may return once the reduction is queued, ahead of the device work that follows
  // it: WaitForQueued waits for all of it, bounded by the communicator's timeout and stop flag.
  // Gloo reduces host memory and returns with the sums in place.
  virtual absl::Status AllReduceMany(absl::Span<const absl::Span<float>> buffers, ReduceOp op) {
    for (absl::Span<float> b : buffers) {
      if (absl::Status s = AllReduce(b.data(), b.size(), op); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // A sum AllReduceMany whose values cross the wire as 16-bit floats (--gradient-compression)
  // and are summed in float32 (Gloo's TCP ring: worker/collective/tcp_ring.h). A communicator
  // with no link to save (shared memory, NCCL) sums the float32 values as AllReduceMany does and
  // says so in CompressesOnTheWire.
  virtual absl::Status AllReduceManyCompressed(absl::Span<const absl::Span<float>> buffers,
                                               ps::WireFloat wire) {
    (void)wire;
    return AllReduceMany(buffers, ReduceOp::kSum);
  }
  virtual bool CompressesOnTheWire() const { return false; }
  // Waits for the work queued on the communicator's device, AllReduceMany's included; a peer
  // that is gone surfaces here as an error within the timeout, never as a hang.
  virtual absl::Status WaitForQueued() { return absl::OkStatus(); }
  // Whether AllReduceMany only queues its work on the device's stream (NCCL), so that it can be
  // captured in a device graph with the step that produces the gradients (StepTail,
  // worker/core/step_graphs.h). Gloo runs its collectives on the host as they are called.
  virtual bool QueuesOnTheDevice() const { return false; }
  // In place: every rank receives root's `count` floats.
  virtual absl::Status Broadcast(float* data, size_t count, int root) = 0;
  // Returns once every rank has called it.
  virtual absl::Status Barrier() = 0;
  // Ends the group where every rank ends at the same point (the last step of a finished run, a
  // reform every rank agreed on), after the last collective: returns once every rank got here
  // and then closes this rank's connections, so no peer still completing that collective sees
  // them close under it. Bounded: a peer that is gone or stuck ends the wait within the shorter
  // of the timeout and 10 s. An error only says the goodbye was cut short (a peer closed first
  // or left); nothing is lost. A rank that stops on its own (SIGTERM, a failure) does not call
  // it: destruction ends the group without a goodbye and peers fail their next call within
  // their timeout. NCCL needs none (its destruction finalizes, which waits for the peers'
  // outstanding work, bounded).
  virtual absl::Status Close() { return absl::OkStatus(); }
};

}  // namespace kubetrain::worker
