// The timed loop every all-reduce rank of the benchmarks runs (bench/allreduce on loopback,
// bench/network between sandboxes): per size, `warmup + iters` in-place float-sum all-reduces of
// FillPattern's values, each after a barrier and checked with CountWrong; then the slowest rank's
// time per timed iteration and the wrong count over all ranks, which rank 0 prints
// (PrintResult, pattern.h) for the driver to parse.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "worker/collective/communicator.h"

namespace kubetrain::bench {

absl::Status TimeAllReduces(worker::Communicator& comm, int rank, int ranks,
                            const std::vector<size_t>& sizes, int warmup, int iters);

}  // namespace kubetrain::bench
