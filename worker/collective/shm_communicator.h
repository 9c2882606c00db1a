// All-reduce among CPU workers that share this host's shared memory (the processes of
// `kubetrain run`, or several ranks in one pod): one POSIX shared-memory segment instead of
// loopback TCP (docs/architecture.md §5.3). Ranks on different hosts, or in pods with /dev/shm
// of their own, use Gloo; ShmCommunicator::TryCreate finds out which, and every rank gets the
// same answer.
//
// An all-reduce, per chunk of at most chunk_bytes: each rank copies into its slot the parts of
// its data the others reduce, a barrier, each reduces its 1/n over every rank's in rank order
// into its data and a shared result, a barrier, and all copy the other parts out. A small chunk
// among few ranks (kWholeChunkBytes, kWholeChunkRanks) takes one barrier instead: each rank
// copies all of it into its slot and reduces the whole chunk over every slot into its data.
// Either way every element is reduced in the same order, so every rank gets the same bits.
// The barrier spins briefly, then sleeps on a futex in
// the segment; it notices a stop request, a peer that left (stopped, failed) or whose process
// ended (killed too: each rank holds a lock on the segment's file that the kernel drops), and
// the collective timeout.
// While the communicator lives, each rank's calling thread keeps off the other ranks' CPUs
// where they may all use the same ones (worker/collective/cpu_binding.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/collective/communicator.h"
#include "worker/collective/cpu_binding.h"
#include "worker/collective/rendezvous.h"

namespace kubetrain::worker {

struct ShmOptions {
  int rank = 0;
  int size = 1;
  // Every collective (and the rendezvous) fails with DEADLINE_EXCEEDED after this.
  absl::Duration timeout = absl::Minutes(5);
  // When set and true, a waiting collective returns CANCELLED.
  const std::atomic<bool>* stop = nullptr;
  // The largest piece of a buffer reduced at once; the segment holds size + 1 of them.
  size_t chunk_bytes = size_t{4} << 20;
  // Where the segment is made ("/dev/shm" through shm_open when empty): tests point it at a
  // directory of their own to act as ranks that do not share one.
  std::string directory;
  // Whether this rank's calling thread keeps to its share of the ranks' common CPUs
  // (worker/collective/cpu_binding.h) until the communicator closes.
  bool bind_cpus = true;
};

class ShmCommunicator final : public Communicator {
 public:
  // The most ranks one segment serves; a larger group uses Gloo.
  static constexpr int kMaxRanks = 64;
  // Chunks of up to kWholeChunkBytes among up to kWholeChunkRanks ranks are reduced whole by
  // every rank (one barrier); the rest are shared out (two barriers, less copying and reading).
  // Two ranks on two cores (`allreduce_bench --communicator=shm`): whole chunks are faster up
  // to 16 KiB (1 KiB: 1 against 2 us), shared-out ones from 32 KiB (6 against 7-9 us) on, and
  // 20-30% faster from 1 MiB (1 MiB 0.21 against 0.26 ms, 16 MiB 5.5 against 7.2-7.9 ms).
  static constexpr int kWholeChunkRanks = 4;
  static constexpr size_t kWholeChunkBytes = size_t{16} << 10;

  // Collective: every rank calls it with the same store (keys under "shm/"). Returns nullptr,
  // on every rank alike, when the ranks do not all share this host's shared memory (another
  // host, a pod of its own, /dev/shm too small): use another communicator then.
  static absl::StatusOr<std::unique_ptr<ShmCommunicator>> TryCreate(KeyValueStore& store,
                                                                    const ShmOptions& options);
  ~ShmCommunicator() override;

  absl::string_view name() const override { return "shm"; }
  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }

  absl::Status AllReduce(float* data, size_t count, ReduceOp op) override;
  absl::Status Broadcast(float* data, size_t count, int root) override;
  absl::Status Barrier() override;
  absl::Status Close() override;

  struct Segment;  // the shared layout (shm_communicator.cc)

 private:
  ShmCommunicator(const ShmOptions& options, Segment* segment, size_t mapped_bytes, int fd);

  // Waits until every rank has arrived, ending a step; `timeout` bounds it. Any failure breaks
  // the communicator: this rank's arrival cannot be taken back, so later calls fail at once.
  absl::Status Arrive(absl::string_view what, absl::Duration timeout);
  absl::Status Usable() const;
  // Says this rank has gone, so peers waiting for it fail at once.
  void Leave();
  // Whether `rank`'s process has ended (its lock on the segment's file is gone).
  bool Gone(int rank) const;
  // `rank`'s slot for `step` (two per rank: even and odd steps), and the shared result.
  float* Slot(int rank, uint64_t step) const;
  float* Result() const;

  ShmOptions options_;
  Segment* segment_;
  size_t mapped_bytes_;
  int fd_;  // the segment's file, kept open for this rank's lock on it
  size_t chunk_floats_;
  uint64_t step_ = 0;                // barriers passed: the same count on every rank
  std::vector<const float*> slots_;  // AllReduce's view of every rank's slot, made once
  absl::Status broken_;
  bool left_ = false;
  CpuBinding binding_;
};

}  // namespace kubetrain::worker
