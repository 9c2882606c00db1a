// Cuts variables into partitions of bounded size and places them on ps tasks.
//
// Every worker and the chief call PlacementPlan::Build with the same variable list and ps count
// and get the same plan: placement depends only on partition sizes and names, never on the order
// in which variables were listed or created (TF's round-robin device setter's weakness).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::ps {

// One float32 variable, flattened.
struct VariableSpec {
  std::string name;
  uint64_t elements = 0;
};

// Names one partition on the wire and in a shard store.
struct PartitionKey {
  std::string variable;
  uint32_t index = 0;

  // "variable/index", as errors and logs name a partition.
  std::string name() const;

  friend bool operator==(const PartitionKey&, const PartitionKey&) = default;
  friend auto operator<=>(const PartitionKey&, const PartitionKey&) = default;
  template <typename H>
  friend H AbslHashValue(H h, const PartitionKey& key) {
    return H::combine(std::move(h), key.variable, key.index);
  }
};

// Elements [offset, offset + length) of one variable, held by ps task `ps`.
struct PartitionSpec {
  PartitionKey key;
  size_t variable = 0;  // index into PlacementPlan::variables()
  uint64_t offset = 0;
  uint64_t length = 0;
  int ps = 0;

  uint64_t bytes() const { return length * sizeof(float); }
};

struct PlacementOptions {
  // BytePS uses ~4 MB partitions: big enough to amortise per-message cost, small enough to spread
  // one large variable over several ps tasks and stay far below gRPC/protobuf limits.
  uint64_t max_partition_bytes = uint64_t{4} << 20;
  // With several ps tasks, the limit is also 1/balance_pieces of a task's even share of the
  // model, but never below min_balanced_bytes (SplitEvenly's pieces are then over half of it):
  // a model whose largest variable is below max_partition_bytes is spread evenly too. The MLP's
  // 784x256 kernel is 85 % of the model; whole, it left one of 2 ps tasks 6 times the other's
  // bytes, and with a ps per node that node's uplink carried 1.7x what an even split would, every
  // step.
  int balance_pieces = 4;
  uint64_t min_balanced_bytes = uint64_t{64} << 10;
};

// The partitions of a model and the ps task each lives on. Immutable after Build; thread-safe.
class PlacementPlan {
 public:
  // Fails with INVALID_ARGUMENT on an empty list, a duplicate or empty name, a variable with no
  // elements, num_ps < 1, or a partition limit below one element.
  static absl::StatusOr<PlacementPlan> Build(std::vector<VariableSpec> variables, int num_ps,
                                             PlacementOptions options = {});

  const std::vector<VariableSpec>& variables() const { return variables_; }
  // Ordered by variable (as given), then partition index.
  const std::vector<PartitionSpec>& partitions() const { return partitions_; }
  int num_ps() const { return static_cast<int>(ps_partitions_.size()); }
  // Indices into partitions() of the partitions placed on ps task `ps`, in partitions() order.
  const std::vector<size_t>& PartitionsOn(int ps) const { return ps_partitions_[ps]; }
  uint64_t BytesOn(int ps) const { return ps_bytes_[ps]; }
  // Index of the variable called `name` in variables(), or -1.
  int FindVariable(absl::string_view name) const;
  // PartitionsOn(ps) cut, in order, into at most `max_pieces` runs of about equal bytes, none
  // below `min_piece_bytes` (so a task holding less than twice that is one piece): what a sync
  // worker pushes and pulls one after another, so that one piece's values travel back while the
  // next piece's gradients are on their way (BytePS's pipelining; docs/architecture.md §5.5).
  std::vector<std::vector<size_t>> Pieces(int ps, uint64_t min_piece_bytes, int max_pieces) const;

 private:
  PlacementPlan() = default;

  std::vector<VariableSpec> variables_;
  std::vector<PartitionSpec> partitions_;
  std::vector<std::vector<size_t>> ps_partitions_;
  std::vector<uint64_t> ps_bytes_;
};

// Splits `elements` into the fewest pieces of at most `max_elements`, sizes differing by at most
// one so no partition is a small leftover. Returns (offset, length) pairs.
std::vector<std::pair<uint64_t, uint64_t>> SplitEvenly(uint64_t elements, uint64_t max_elements);

}  // namespace kubetrain::ps
