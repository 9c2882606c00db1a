// All-reduce among CPU workers with Gloo over TCP (Debian's libgloo): ring all-reduce, buffers in
// host memory (the CPU device's memory).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/communicator.h"
#include "worker/collective/rendezvous.h"

namespace gloo {
class Algorithm;
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
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects every pair of ranks through `store` (full mesh of TCP connections).
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(KeyValueStore& store,
                                                                  const GlooOptions& options);
  ~GlooCommunicator() override;

  absl::string_view name() const override { return "gloo"; }
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override;
  absl::Status Broadcast(float* data, size_t count, int root) override;
  absl::Status Barrier() override;
  absl::Status Close() override;

 private:
  explicit GlooCommunicator(const GlooOptions& options) : options_(options) {}

  // Gloo's ring algorithm object for an all-reduce of `data`: built on first use and kept, most
  // recently used last, while all of them hold at most kRingCacheBytes (gloo_communicator.cc).
  gloo::Algorithm& Ring(float* data, size_t count, ReduceOp op);
  // Closes every connection at once (a peer's next read fails); idempotent.
  void ClosePairs();

  struct CachedRing {
    float* data;
    size_t count;
    ReduceOp op;
    std::shared_ptr<gloo::Algorithm> ring;  // shared_ptr: gloo::Algorithm is incomplete here
  };

  GlooOptions options_;
  std::shared_ptr<gloo::Context> context_;
  std::vector<CachedRing> rings_;
};

}  // namespace kubetrain::worker
