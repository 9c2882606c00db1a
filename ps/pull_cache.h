// The ps's encoded pull answers, one per partition and wire format, kept under the revision of
// the values they encode (docs/architecture.md §5.5, "One encoding a step";
// docs/decisions/0003).
//
// In sync mode every worker pulls every partition once a step, and all of them read the same
// values: without this the ps copied (or narrowed to 16 bits) each partition once per worker,
// N times a step, each copy into freshly allocated memory. With it a partition is encoded once
// per revision and every answer references that one slice.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/slice.h"
#include "ps/half_float.h"
#include "ps/partition.h"

namespace kubetrain::ps {

// Thread-safe. Holds at most one slice per partition and wire format: the newest revision asked
// for. Its memory is therefore at most the values' own size per wire format in use (half for a
// 16-bit one), and an answer in flight keeps its slice alive after a newer revision replaced it.
class PullCache {
 public:
  // `values` at `revision` (ShardStore's PullVisitor names both), coded as `wire`: the slice
  // cached for that revision, or a new one, made once however many callers ask at the same
  // time. `values` must stay unchanged during the call (the store's reader lock holds them).
  grpc::Slice Get(const PartitionKey& key, uint64_t revision, WireFloat wire,
                  std::span<const float> values);
  // Drops every slice (a new Init: partitions may be gone).
  void Clear();
  // The bytes cached (the newest slice of each entry).
  size_t bytes() const;

 private:
  struct Entry {
    absl::Mutex mu;  // held while encoding, so callers of one revision wait for one encoding
    uint64_t revision ABSL_GUARDED_BY(mu) = 0;  // 0: nothing cached (revisions start at 1)
    grpc::Slice slice ABSL_GUARDED_BY(mu);
  };

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::pair<PartitionKey, WireFloat>, std::shared_ptr<Entry>> entries_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kubetrain::ps
