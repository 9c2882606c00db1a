// Per-epoch shuffling and sharding of example indices across data-parallel workers.
//
// Every worker computes the same permutation of [0, n) for epoch e from (seed, e), then worker i
// of k takes the strided slice perm[i], perm[i + k], perm[i + 2k], ... of the first
// floor(n / k) * k entries. Shards are therefore equal-sized (sync training needs the same number
// of steps on every worker), disjoint, and together cover the epoch except for the last n mod k
// entries of the permutation, which are dropped for that epoch only: a different, random set of
// at most k-1 examples each epoch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/core/data/batch_iterator.h"
#include "worker/core/data/dataset.h"

namespace kubetrain::worker {

struct ShardSpec {
  uint64_t seed = 0;
  int index = 0;  // this worker, in [0, count)
  int count = 1;  // number of workers
};

// The shared permutation of [0, n) for `epoch`: a Fisher-Yates shuffle driven by Rng(seed, epoch).
std::vector<int64_t> EpochPermutation(int64_t n, uint64_t seed, int64_t epoch);

// floor(n / count): the examples every worker gets per epoch.
int64_t ShardSize(int64_t n, int count);

// This worker's indices for `epoch`, in the order to visit them. INVALID_ARGUMENT if the spec is
// out of range or there are fewer examples than workers.
absl::StatusOr<std::vector<int64_t>> EpochShard(int64_t n, const ShardSpec& spec, int64_t epoch);

// One worker's batches addressed by its step: step s is batch s % steps_per_epoch() of epoch
// s / steps_per_epoch(), so a worker that resumes at any step sees exactly the batches it would
// have seen. Sequential steps reuse one iterator; a jump rebuilds the epoch's shard. Borrows the
// Dataset. Not thread-safe.
class ShardBatches {
 public:
  ShardBatches(const Dataset& data, const ShardSpec& spec, int batch_size)
      : data_(data), spec_(spec), batch_size_(batch_size) {}

  // Full batches per epoch: ShardSize(n, count) / batch_size (0 when the shard is too small).
  int64_t steps_per_epoch() const;
  // The batch of `step`; valid until the next call.
  absl::StatusOr<const Batch*> At(int64_t step);

 private:
  const Dataset& data_;
  const ShardSpec spec_;
  const int batch_size_;
  std::unique_ptr<BatchIterator> iterator_;
  int64_t epoch_ = -1;
  int64_t next_index_ = -1;
};

}  // namespace kubetrain::worker
