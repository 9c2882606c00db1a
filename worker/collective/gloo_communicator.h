// Collectives among CPU workers over TCP, buffers in host memory (the CPU device's memory):
// all-reduces through a ring of sockets the calling thread drives (worker/collective/tcp_ring.h),
// broadcasts and barriers through Debian's libgloo (full mesh).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/communicator.h"
#include "worker/collective/cpu_binding.h"
#include "worker/collective/rendezvous.h"
#include "worker/collective/tcp_ring.h"

namespace gloo {
class Context;
}  // namespace gloo

namespace kubetrain::worker {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // The address this rank listens on and advertises to its peers: an IP (or name) of this host
  // that every other rank can reach (the pod IP in a cluster, 127.0.0.1 locally). Never a
  // wildcard address, which peers could not dial.
  std::string hostname = "127.0.0.1";
  // Rendezvous and every collective fail with DEADLINE_EXCEEDED after this (a dead or stalled
  // peer), never hang. It must cover the longest pause of one rank between collectives (the
  // chief's evaluation).
  absl::Duration timeout = absl::Minutes(5);
  // When set and true, a waiting all-reduce returns CANCELLED (Gloo's broadcasts and barriers
  // wait out their timeout).
  const std::atomic<bool>* stop = nullptr;
  // Whether this rank's calling thread keeps off the CPUs of the ranks on its host while the
  // communicator lives (worker/collective/cpu_binding.h).
  bool bind_cpus = true;
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects every pair of ranks through `store` (Gloo's full mesh of TCP connections) and
  // the all-reduce ring.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(KeyValueStore& store,
                                                                  const GlooOptions& options);
  ~GlooCommunicator() override;

  absl::string_view name() const override { return "gloo"; }
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override;
  absl::Status AllReduceManyCompressed(absl::Span<const absl::Span<float>> buffers,
                                       ps::WireFloat wire) override;
  bool CompressesOnTheWire() const override { return true; }
  absl::Status Broadcast(float* data, size_t count, int root) override;
  absl::Status Barrier() override;
  absl::Status Close() override;

 private:
  explicit GlooCommunicator(const GlooOptions& options) : options_(options) {}

  // Closes every connection at once (a peer's next read fails); idempotent.
  void ClosePairs();

  GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;  // broadcasts and barriers
  std::unique_ptr<TcpRing> ring_;           // all-reduces
  CpuBinding binding_;
};

}  // namespace kubetrain::worker
