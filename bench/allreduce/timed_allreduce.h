// The timed loop every all-reduce rank of the benchmarks runs (bench/allreduce on loopback,
// bench/network between sandboxes): per size, `warmup + iters` in-place float-sum all-reduces of
// FillPattern's values, each after a barrier and checked with CountWrong; then the slowest rank's
// time per timed iteration and the wrong count over all ranks, which rank 0 prints
// (PrintResult, pattern.h) for the driver to parse. With a 16-bit `wire` (--gradient-compression)
// each all-reduce is AllReduceManyCompressed: FillPattern's small integers and their sums are
// exact in fp16 and bf16 up to 8 ranks, so CountWrong still checks every element.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "ps/half_float.h"
#include "worker/collective/communicator.h"

namespace kubetrain::bench {

absl::Status TimeAllReduces(worker::Communicator& comm, int rank, int ranks,
                            const std::vector<size_t>& sizes, int warmup, int iters,
                            ps::WireFloat wire = ps::WireFloat::kFloat32);

}  // namespace kubetrain::bench
