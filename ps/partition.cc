#include "ps/partition.h"

#include <algorithm>
#include <numeric>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::ps {

std::string PartitionKey::name() const { return absl::StrCat(variable, "/", index); }

namespace {

absl::Status Validate(const std::vector<VariableSpec>& variables, int num_ps,
                      const PlacementOptions& options) {
  if (num_ps < 1) return absl::InvalidArgumentError(absl::StrCat("num_ps must be >= 1: ", num_ps));
  if (options.max_partition_bytes < sizeof(float)) {
    return absl::InvalidArgumentError("max_partition_bytes must hold at least one float32");
  }
  if (variables.empty()) return absl::InvalidArgumentError("no variables to place");
  absl::flat_hash_set<std::string> names;
  for (const VariableSpec& v : variables) {
    if (v.name.empty()) return absl::InvalidArgumentError("variable with an empty name");
    if (v.elements == 0) {
      return absl::InvalidArgumentError(absl::StrCat("variable ", v.name, " has no elements"));
    }
    if (!names.insert(v.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate variable name ", v.name));
    }
  }
  return absl::OkStatus();
}

// Largest first, so the greedy step has small pieces left to even out the loads; ties broken by
// key so that the order (and hence the plan) never depends on the input order.
std::vector<size_t> PlacementOrder(const std::vector<PartitionSpec>& partitions) {
  std::vector<size_t> order(partitions.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (partitions[a].length != partitions[b].length) {
      return partitions[a].length > partitions[b].length;
    }
    return partitions[a].key < partitions[b].key;
  });
  return order;
}

int LeastLoaded(const std::vector<uint64_t>& loads) {
  // min_element returns the first minimum: the lowest ps index wins ties, deterministically.
  return static_cast<int>(std::min_element(loads.begin(), loads.end()) - loads.begin());
}

}  // namespace

std::vector<std::pair<uint64_t, uint64_t>> SplitEvenly(uint64_t elements, uint64_t max_elements) {
  const uint64_t pieces = (elements + max_elements - 1) / max_elements;
  const uint64_t base = elements / pieces;
  const uint64_t longer = elements % pieces;  // the first `longer` pieces get one extra element
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(pieces);
  uint64_t offset = 0;
  for (uint64_t i = 0; i < pieces; ++i) {
    const uint64_t length = base + (i < longer ? 1 : 0);
    out.emplace_back(offset, length);
    offset += length;
  }
  return out;
}

absl::StatusOr<PlacementPlan> PlacementPlan::Build(std::vector<VariableSpec> variables, int num_ps,
                                                   PlacementOptions options) {
  if (absl::Status s = Validate(variables, num_ps, options); !s.ok()) return s;
  PlacementPlan plan;
  uint64_t max_elements = options.max_partition_bytes / sizeof(float);
  if (num_ps > 1 && options.balance_pieces > 0) {
    uint64_t total = 0;
    for (const VariableSpec& v : variables) total += v.elements;
    const uint64_t pieces = static_cast<uint64_t>(num_ps) * options.balance_pieces;
    const uint64_t balanced =
        std::max((total + pieces - 1) / pieces, options.min_balanced_bytes / sizeof(float));
    max_elements = std::min(max_elements, std::max<uint64_t>(balanced, 1));
  }
  for (size_t v = 0; v < variables.size(); ++v) {
    uint32_t index = 0;
    for (auto [offset, length] : SplitEvenly(variables[v].elements, max_elements)) {
      plan.partitions_.push_back({{variables[v].name, index++}, v, offset, length, 0});
    }
  }
  plan.ps_bytes_.assign(num_ps, 0);
  plan.ps_partitions_.resize(num_ps);
  for (size_t p : PlacementOrder(plan.partitions_)) {
    const int ps = LeastLoaded(plan.ps_bytes_);
    plan.partitions_[p].ps = ps;
    plan.ps_bytes_[ps] += plan.partitions_[p].bytes();
  }
  for (size_t p = 0; p < plan.partitions_.size(); ++p) {
    plan.ps_partitions_[plan.partitions_[p].ps].push_back(p);
  }
  plan.variables_ = std::move(variables);
  return plan;
}

std::vector<std::vector<size_t>> PlacementPlan::Pieces(int ps, uint64_t min_piece_bytes,
                                                       int max_pieces) const {
  const std::vector<size_t>& on = ps_partitions_[ps];
  const uint64_t total = ps_bytes_[ps];
  const uint64_t by_size = total / std::max<uint64_t>(min_piece_bytes, 1);
  const uint64_t count = std::clamp<uint64_t>(std::min<uint64_t>(by_size, on.size()), 1,
                                              static_cast<uint64_t>(std::max(max_pieces, 1)));
  std::vector<std::vector<size_t>> pieces(1);
  uint64_t done = 0, bytes = 0;  // over the pieces closed so far, and in the open one
  for (size_t i = 0; i < on.size(); ++i) {
    pieces.back().push_back(on[i]);
    bytes += partitions_[on[i]].bytes();
    // Close the piece once it holds its share of what the open pieces have left to carry, and
    // no less than the minimum, leaving at least the minimum for the pieces after it.
    const uint64_t open = count - (pieces.size() - 1);
    const uint64_t rest = total - done - bytes;
    if (open > 1 && i + 1 < on.size() && bytes * open >= total - done && bytes >= min_piece_bytes &&
        rest >= min_piece_bytes) {
      done += bytes;
      bytes = 0;
      pieces.emplace_back();
    }
  }
  return pieces;
}

int PlacementPlan::FindVariable(absl::string_view name) const {
  for (size_t v = 0; v < variables_.size(); ++v) {
    if (variables_[v].name == name) return static_cast<int>(v);
  }
  return -1;
}

}  // namespace kubetrain::ps
