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
  // In place: every rank receives root's `count` floats.
  virtual absl::Status Broadcast(float* data, size_t count, int root) = 0;
  // Returns once every rank has called it.
  virtual absl::Status Barrier() = 0;
};

}  // namespace kubetrain::worker
