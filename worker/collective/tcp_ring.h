// The CPU all-reduce between hosts: a ring of TCP connections (each rank dials the next and
// accepts the previous) driven by the calling thread with non-blocking sockets
// (docs/architecture.md §5.3). Gloo's own all-reduce hands every segment to its I/O thread and
// sleeps until that thread wakes it, a wake-up per piece of socket data; here the thread that
// asked moves the bytes itself, sending and receiving at once, and spins a little before it
// sleeps in poll(). Two ranks on two cores (`allreduce_bench`): 1 MiB in 0.47-0.49 ms where
// Gloo took 2.8, 1.15-1.20x OpenMPI's TCP (1.10-1.95x from 256 KiB to 64 MiB).
//
// An all-reduce, per segment of at most n x kPartBytes: a reduce-scatter (n - 1 steps; in step s
// rank r sends part r - s to the next rank and reduces part r - s - 1 from the previous into
// its data) and an all-gather (n - 1 steps passing the reduced parts on). Each part is reduced
// once, in ring order, and copied to every rank: every rank gets the same bits. The steps are not
// run in lockstep: what step s + 1 sends is what step s received, so its bytes go out as soon as
// they have come in and been reduced (Stream), and the next segment's first step follows the last
// step of this one at once: a shaped link stays busy across the steps' and segments' ends
// instead of idling while the last bytes of each part arrive.
//
// Compressed (AllReduce's `wire` fp16 or bf16, --gradient-compression): the same steps with
// 16-bit values on the wire and float32 sums. In the reduce-scatter a rank rounds the partial sum
// it sends to 16 bits, and the next decodes it and adds its own float32 values; the owner of a
// fully reduced part rounds it once more, keeps that rounded value itself and sends those 16 bits,
// which the all-gather forwards untouched. So each element is rounded n times (n - 1 partial
// sums and the total; error <= n x 2^-11 (fp16) or 2^-8 (bf16) of the sum of the magnitudes,
// not growing with the steps of training), and every rank still ends with the same bits.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/half_float.h"
#include "worker/collective/communicator.h"
#include "worker/collective/float_reductions.h"
#include "worker/collective/rendezvous.h"

namespace kubetrain::worker {

struct TcpRingOptions {
  int rank = 0;
  int size = 1;
  // The address this rank listens on and its neighbour dials (never a wildcard).
  std::string hostname = "127.0.0.1";
  // Connecting, and every all-reduce, fail with DEADLINE_EXCEEDED after this.
  absl::Duration timeout = absl::Minutes(5);
  // When set and true, a waiting all-reduce returns CANCELLED.
  const std::atomic<bool>* stop = nullptr;
};

class TcpRing {
 public:
  // The largest part of a segment (each rank's share of it): bounds the receive buffer.
  static constexpr size_t kPartBytes = size_t{4} << 20;

  // Collective: every rank calls it with the same store (keys under "ring/"). A peer that
  // dials in without the listening rank's nonce (which only the store tells) is turned away.
  static absl::StatusOr<std::unique_ptr<TcpRing>> Connect(KeyValueStore& store,
                                                          const TcpRingOptions& options);
  ~TcpRing();

  // In place, over every rank's `count` floats. A failure (a peer gone, the timeout, a stop)
  // breaks the ring: later calls fail at once. `wire` other than float32: the values travel as
  // 16-bit floats (above); a finite value that a 16-bit format cannot hold (fp16 beyond 65504)
  // is an INVALID_ARGUMENT naming the fix, not an inf summed into the model.
  absl::Status AllReduce(float* data, size_t count, ReduceOp op,
                         ps::WireFloat wire = ps::WireFloat::kFloat32);
  // Closes both connections (the neighbours' next read fails); idempotent.
  void Shutdown();

 private:
  explicit TcpRing(const TcpRingOptions& options);
  // The all-reduce of `count` values as two streams: the 2(n-1) steps' outgoing parts of every
  // segment one after the other to the next rank, and their incoming parts from the previous
  // one. Step t + 1 sends the part step t received (reduced, in the reduce-scatter), so its bytes
  // leave as soon as they have arrived and been reduced, not once the whole part has; and the
  // next segment's first step leaves as soon as this one's last has. So the link does not idle
  // at a step's or a segment's end while the last bytes arrive (Gloo pipelines its ring for the
  // same reason). `wire` 16-bit: the values are coded into wire_ as they are ready.
  absl::Status Stream(float* data, size_t count, FloatReduction reduce, ps::WireFloat wire,
                      absl::Time deadline);
  // One non-blocking send (to the next rank) or receive (from the previous one) of what is left
  // of `bytes`, advancing the count: whether bytes moved; UNAVAILABLE when the peer is gone.
  absl::StatusOr<bool> SendSome(const char* out, size_t bytes, size_t* sent);
  absl::StatusOr<bool> ReceiveSome(char* in, size_t bytes, size_t* received);
  // Nothing moved: spins for kSpinFor (yielding), then polls the directions that can move;
  // CANCELLED on a stop, DEADLINE_EXCEEDED past `deadline`.
  absl::Status WaitIdle(absl::Time* idle_since, absl::Time deadline, bool can_send,
                        bool can_receive);

  TcpRingOptions options_;
  int next_fd_;      // dialled: to rank + 1
  int previous_fd_;  // accepted: from rank - 1
  // The part being received in the reduce-scatter (float32), and when compressed two segments'
  // values in 16 bits (what this rank sends, and the all-gather's parts as they arrive) and the
  // reduce-scatter's incoming codes.
  std::vector<float> received_;
  std::vector<uint16_t> wire_;
  std::vector<uint16_t> wire_received_;
  absl::Status broken_;
};

}  // namespace kubetrain::worker
