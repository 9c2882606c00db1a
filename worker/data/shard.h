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
#include <vector>

#include "absl/status/statusor.h"

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

}  // namespace kubetrain::worker
