// network_bench's cases, each run from the driver (network_bench.cc) over the sandboxes it made:
// what they share (a result row, the setup, the children's "result" lines) and kubetrain's own
// exchanges. The peers (PyTorch, OpenMPI) on the same links are in peers.h.
//
//   ring       GlooCommunicator's ring all-reduce, as a training worker makes it
//   ps         sync-mode PsClient::PushAndPull against one PsServer on a node of its own
//   ps-shards  the same against one ps task per node, beside that node's worker, the model
//              placed on them by ps::PlacementPlan as a job with that many ps tasks places it
// Each with a 16-bit wire (--gradient-compression) too: the rows "ring+fp16", "ps+bf16"...
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bench/network/roles.h"
#include "localkube/sandbox/network.h"
#include "ps/half_float.h"

namespace kubetrain::network_bench {

struct Result {
  std::string mode;
  size_t bytes = 0;          // the float32 model's (a compressed row moves half as many)
  double seconds = 0;        // median of the slowest rank's time
  double model_seconds = 0;  // the alpha-beta model's time at the configured rate
  double busbw = 0;          // bytes/s
};

struct Setup {
  const Options& opt;
  std::vector<size_t> sizes;
  double rate = 0;  // configured, bytes/s
  std::unique_ptr<sandbox::Network> net;
  std::vector<const sandbox::Sandbox*> ranks;   // rank r on node r
  const sandbox::Sandbox* ps = nullptr;         // ps: on node N
  std::vector<const sandbox::Sandbox*> shards;  // ps-shards: shard r on node r, beside rank r
  const std::atomic<bool>& stop;
  absl::Time deadline;
  std::vector<std::string> notes;  // "mode: what ran" or "mode: skipped: why", for the table
};

// Times per size from "result" lines (bench/allreduce/pattern.h); for several processes, the
// slowest of each iteration.
absl::StatusOr<std::map<size_t, std::vector<double>>> Parse(const std::vector<std::string>& outputs,
                                                            int iters);

// The row of an all-reduce of `bytes` (or an exchange that moves as much through each uplink)
// timed as `times` (seconds per iteration): model 2(N-1)/N*M/R, busbw 2(N-1)/N*M/t, where M is
// what crosses the wire (`wire`: half of `bytes` for 16-bit values). Prints it.
Result AllReduceRow(const Setup& s, absl::string_view mode, size_t bytes,
                    const std::vector<double>& times, ps::WireFloat wire);
// AllReduceRow for each of s.sizes; INTERNAL when `times` lacks one.
absl::StatusOr<std::vector<Result>> AllReduceRows(
    const Setup& s, absl::string_view mode, const std::map<size_t, std::vector<double>>& times,
    ps::WireFloat wire);

// "ring", or "ring+fp16" for a 16-bit wire.
std::string ModeName(absl::string_view mode, ps::WireFloat wire);

// A ratio column's cell: `value / over` to two places, "-" without a divisor (over <= 0).
std::string Ratio(double value, double over);
// A ratio's JSON field, `,"field":value/over`, or nothing without a divisor.
std::string JsonRatio(absl::string_view field, double value, double over);

// Prints one row's figures on stderr as it is measured.
void Progress(const Result& r);

absl::StatusOr<std::vector<Result>> RunRing(Setup& s, ps::WireFloat wire);
// ps (one server on node N) or, `sharded`, ps-shards (one per node).
absl::StatusOr<std::vector<Result>> RunPs(Setup& s, bool sharded, ps::WireFloat wire);

}  // namespace kubetrain::network_bench
