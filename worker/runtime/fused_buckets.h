// The all-reduce exchange's fused gradient buffers (Horovod's tensor fusion) and the overlap of
// their all-reduces with backward (worker/runtime/exchange_allreduce.h, docs/architecture.md
// §5.3).
//
// FusedBuckets packs the model's variables into buffers of at most `fusion_bytes` (a larger
// variable gets one of its own): in variable order, or, for overlap, last variable first, the
// order backward completes them (DDP and Horovod bucket in reverse too). For overlap the first
// buffer also closes once it holds kFirstBufferBytes, as DDP's first bucket does: a model under
// the fusion threshold (the CNN's 1.8 MB against 64 MiB) would otherwise be one buffer, summed
// after backward with nothing overlapped, where this way the last layers' sum goes out while
// backward goes on through the rest. Each variable's gradient lives in its buffer (backward
// writes it there), and the last buffer carries `extra` floats more (the step's loss, an elastic
// job's flag).
//
// OverlappedReduction sums buffers on a thread of its own: the model's GradientsReady hook
// starts each buffer whose variables backward has completed while backward goes on with the
// earlier layers; Finish starts the rest (the last buffer, which carries the loss computed after
// backward) and waits. The communicator is then used by that thread alone for the step: the
// training thread makes no collective until Finish returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "worker/core/device.h"
#include "worker/core/model.h"

namespace kubetrain::worker {

struct FusedBucket {
  struct Member {
    Variable* variable;
    size_t index;    // in model.variables()
    int64_t offset;  // in the buffer
  };
  std::vector<Member> members;
  int64_t elements = 0;
  size_t first_variable = 0;  // the smallest index among the members
  Tensor buffer;
};

class FusedBuckets {
 public:
  // Overlap: the first buffer is full once it holds this much (DDP's first_bucket_bytes).
  static constexpr int64_t kFirstBufferBytes = int64_t{1} << 20;

  FusedBuckets() = default;
  // Points every variable's gradient into its buffer.
  FusedBuckets(Device& device, Model& model, int64_t fusion_bytes, bool reverse, int extra);

  std::vector<FusedBucket>& buckets() { return buckets_; }
  const std::vector<FusedBucket>& buckets() const { return buckets_; }
  // The buffers, as a communicator takes them.
  const std::vector<absl::Span<float>>& spans() const { return spans_; }
  size_t bytes() const { return bytes_; }
  // The `extra` floats at the end of the last buffer.
  float* extra() const { return extra_; }

 private:
  std::vector<FusedBucket> buckets_;
  std::vector<absl::Span<float>> spans_;
  size_t bytes_ = 0;
  float* extra_ = nullptr;
};

class OverlappedReduction {
 public:
  // `reduce(i)` all-reduces buffer i in place (on this object's thread).
  OverlappedReduction(const FusedBuckets& buckets, std::function<absl::Status(size_t)> reduce);
  // Waits for the buffer being reduced, if any (bounded by the communicator's timeout and stop
  // flag), and ends the thread.
  ~OverlappedReduction();

  // The model's GradientsReady hook (training thread): starts, in order, every buffer but the
  // last whose variables all have their gradients.
  void GradientsReady(size_t ready);
  // Starts what is left, waits until every buffer of the step is summed and readies the next
  // step; the first error of the step, if any (later buffers are then not reduced).
  absl::Status Finish();
  // Buffers started while backward still ran, over the run.
  int64_t started_during_backward() const { return started_during_backward_; }

 private:
  void Start(size_t bucket);
  void Run();
  bool HasWork() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !queue_.empty() || closing_; }
  bool Idle() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return busy_ == 0; }

  const std::vector<size_t> first_variable_;  // per buffer
  const std::function<absl::Status(size_t)> reduce_;
  size_t next_ = 0;  // the next buffer to start (training thread)
  int64_t started_during_backward_ = 0;
  mutable absl::Mutex mu_;
  std::deque<size_t> queue_ ABSL_GUARDED_BY(mu_);
  size_t busy_ ABSL_GUARDED_BY(mu_) = 0;  // started, not yet summed
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kubetrain::worker
