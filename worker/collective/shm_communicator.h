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
// The segment is this user's to write for any of its processes, so nothing read from it is
// trusted: the layout comes from the rendezvous (worker/collective/shm_layout.h), the header is
// checked against it at the start of every collective, a segment truncated under the ranks is an
// error rather than SIGBUS (worker/collective/shm_fault_guard.h), and a reduction that reads a
// NaN or infinity from a rank fails on every rank alike, naming that rank and the element. The
// segment's name goes once every rank has mapped it, so the kernel frees it with the last rank;
// what ranks killed during a rendezvous leave is swept by the next (worker/collective/shm_file.h).
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
#include "worker/collective/shm_fault_guard.h"
#include "worker/collective/shm_layout.h"

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
  static constexpr int kMaxRanks = kShmMaxRanks;
  // Chunks of up to kWholeChunkBytes among up to kWholeChunkRanks ranks are reduced whole by
  // every rank (one barrier); the rest are shared out (two barriers, less copying and reading).
  // Two ranks on two cores (`allreduce_bench --communicator=shm`): whole chunks are faster up
  // to 16 KiB (1 KiB: 1 against 2 us), shared-out ones from 32 KiB (6 against 7-9 us) on, and
  // 20-30% faster from 1 MiB (1 MiB 0.21 against 0.26 ms, 16 MiB 5.5 against 7.2-7.9 ms).
  static constexpr int kWholeChunkRanks = 4;
  static constexpr size_t kWholeChunkBytes = size_t{16} << 10;

  // Collective: every rank calls it with the same store (keys under "shm/"). Returns nullptr,
  // on every rank alike, when the ranks do not all share this host's shared memory (another
  // host, a pod of its own, /dev/shm full: logged with what to do): use another communicator
  // then. DATA_LOSS on every rank when a rank finds the segment other than agreed (its header
  // or its size): another process wrote into it.
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

  using Segment = ShmSegment;  // the shared layout (worker/collective/shm_layout.h)

 private:
  ShmCommunicator(const ShmOptions& options, const ShmRendezvous& said, std::string path,
                  Segment* segment, int fd, ShmFaultGuard guard);

  // Waits until every rank has arrived, ending a step; `timeout` bounds it. Any failure breaks
  // the communicator: this rank's arrival cannot be taken back, so later calls fail at once.
  absl::Status Arrive(absl::string_view what, absl::Duration timeout);
  // Whether the communicator may be used: not closed, not broken, the segment as agreed.
  absl::Status Usable();
  // Breaks the communicator with `failure` (DATA_LOSS) when the segment shrank under this rank
  // since the last look: what was read from it since is this process's zeros.
  absl::Status Intact();
  // Breaks the communicator with `failure` and leaves; returns it.
  absl::Status Break(absl::Status failure);
  // Records `value`, not finite, found in `culprit`'s data at `element`, for every rank to
  // report alike (the first record stays); returns the record, as Recorded() will, once it is
  // complete, also when another rank is writing its own at the same moment.
  absl::Status Record(uint32_t culprit, uint64_t element, float value);
  // The failure a rank recorded, as an error; OK when none.
  absl::Status Recorded() const;
  // Says this rank has gone, so peers waiting for it fail at once.
  void Leave();
  // Whether `rank`'s process has ended (its lock on the segment's file is gone).
  bool Gone(int rank) const;
  // `rank`'s slot for `step` (two per rank: even and odd steps), and the shared result.
  float* Slot(int rank, uint64_t step) const;
  float* Result() const;

  ShmOptions options_;
  ShmRendezvous said_;  // the segment's name and nonce and the agreed layout
  std::string path_;    // where the segment was, for messages
  Segment* segment_;
  int fd_;  // the segment's file, kept open for this rank's lock on it
  ShmFaultGuard guard_;
  size_t chunk_floats_;
  uint64_t step_ = 0;                // barriers passed: the same count on every rank
  std::vector<const float*> slots_;  // AllReduce's view of every rank's slot, made once
  absl::Status broken_;
  bool left_ = false;
  CpuBinding binding_;
};

}  // namespace kubetrain::worker
