#include "bench/allreduce/timed_allreduce.h"

#include <chrono>

#include "bench/allreduce/pattern.h"
#include "common/status.h"

namespace kubetrain::bench {

absl::Status TimeAllReduces(worker::Communicator& comm, int rank, int ranks,
                            const std::vector<size_t>& sizes, int warmup, int iters,
                            ps::WireFloat wire) {
  using Clock = std::chrono::steady_clock;
  using worker::ReduceOp;
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> data(count);
    std::vector<float> seconds;  // float: what the communicator reduces; µs resolution is plenty
    size_t wrong = 0;
    for (int it = 0; it < warmup + iters; ++it) {
      FillPattern(data.data(), count, rank, it);
      RETURN_IF_ERROR(comm.Barrier());
      const auto start = Clock::now();
      if (wire == ps::WireFloat::kFloat32) {
        RETURN_IF_ERROR(comm.AllReduce(data.data(), count, ReduceOp::kSum));
      } else {
        const absl::Span<float> whole(data);
        RETURN_IF_ERROR(comm.AllReduceManyCompressed({&whole, 1}, wire));
      }
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      wrong += CountWrong(data.data(), count, ranks, it);
      if (it >= warmup) seconds.push_back(static_cast<float>(s));
    }
    // Slowest rank per iteration, and the wrong count over all ranks (exact as a float sum while
    // it is below 2^24, and never 0 when any rank saw an error).
    RETURN_IF_ERROR(comm.AllReduce(seconds.data(), seconds.size(), ReduceOp::kMax));
    float wrong_total = static_cast<float>(wrong);
    RETURN_IF_ERROR(comm.AllReduce(&wrong_total, 1, ReduceOp::kSum));
    if (rank == 0) {
      PrintResult(bytes, static_cast<size_t>(wrong_total),
                  std::vector<double>(seconds.begin(), seconds.end()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::bench
