#include "worker/collective/shm_communicator.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/collective/float_reductions.h"
#include "worker/collective/shm_file.h"

namespace kubetrain::worker {
namespace {

// How long a waiting rank spins before it sleeps on the futex: peers usually arrive within
// microseconds of each other, and a sleep and a wake-up cost tens of them.
constexpr int kSpins = 2000;
// A sleeping rank wakes at least this often to look at the stop flag, its peers and the clock.
constexpr absl::Duration kCheckEvery = absl::Milliseconds(2);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// The reduction of `n` floats of every slot (at least two), in rank order, into `out`: the
// first two in one pass, then each further slot into the running result.
void ReduceSlots(const std::vector<const float*>& slots, float* out, size_t n, ReduceOp op) {
  const FloatReduction reduce = FloatReductionFor(op);
  reduce(out, slots[0], slots[1], n);
  for (size_t r = 2; r < slots.size(); ++r) reduce(out, out, slots[r], n);
}

// Whether every one of `n` floats is finite, at about the speed of reading them: in integer
// lanes, adding one to an exponent of all ones (NaN, infinity) alone carries into the sign bit.
bool ShmAllFinite(const float* v, size_t n) {
  typedef uint32_t Lanes __attribute__((vector_size(16)));
  constexpr uint32_t kExponent = 0x7f80'0000, kOne = 0x0080'0000;
  const Lanes exponent = {kExponent, kExponent, kExponent, kExponent};
  const Lanes one = {kOne, kOne, kOne, kOne};
  Lanes a = {0, 0, 0, 0}, b = a;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Lanes x, y;
    std::memcpy(&x, v + i, sizeof(x));
    std::memcpy(&y, v + i + 4, sizeof(y));
    a |= (x & exponent) + one;
    b |= (y & exponent) + one;
  }
  a |= b;
  uint32_t any = a[0] | a[1] | a[2] | a[3];
  for (; i < n; ++i) {
    uint32_t x;
    std::memcpy(&x, v + i, sizeof(x));
    any |= (x & kExponent) + kOne;
  }
  return (any & 0x8000'0000) == 0;
}

// The first non-finite value among `n` floats of every slot: the lowest element, then the
// lowest rank. False when all are finite.
bool FirstNonFinite(const std::vector<const float*>& slots, size_t n, uint32_t* culprit,
                    size_t* element, float* value) {
  bool found = false;
  for (size_t r = 0; r < slots.size(); ++r) {
    if (ShmAllFinite(slots[r], n)) continue;
    const size_t end = found ? *element : n;
    for (size_t i = 0; i < end; ++i) {
      if (!std::isfinite(slots[r][i])) {
        *culprit = static_cast<uint32_t>(r);
        *element = i;
        *value = slots[r][i];
        found = true;
        break;
      }
    }
  }
  return found;
}

absl::Status NonFiniteError(uint32_t culprit, uint64_t element, float value, uint32_t found_by) {
  return absl::InvalidArgumentError(absl::StrCat(
      "shm all-reduce: rank ", culprit, "'s gradient holds a non-finite value at element ", element,
      " (", value, "; found by rank ", found_by, " reducing it)"));
}

}  // namespace

ShmCommunicator::~ShmCommunicator() {
  Leave();
  guard_ = ShmFaultGuard();  // before the unmapping: the address may be reused
  ::munmap(segment_, said_.layout.segment_bytes);
  ::close(fd_);  // drops this rank's lock
}

bool ShmCommunicator::Gone(int rank) const { return ShmBytesFree(fd_, rank); }

void ShmCommunicator::Leave() {
  if (left_) return;
  left_ = true;
  segment_->ranks[options_.rank].left.store(1, std::memory_order_release);
  Futex(&segment_->epoch, FUTEX_WAKE, INT_MAX, nullptr);  // waiters look again
}

float* ShmCommunicator::Slot(int rank, uint64_t step) const {
  const size_t index = static_cast<size_t>(step % 2) * options_.size + rank;
  return reinterpret_cast<float*>(reinterpret_cast<char*>(segment_) + kShmDataOffset +
                                  index * said_.layout.chunk_bytes);
}

float* ShmCommunicator::Result() const {
  return reinterpret_cast<float*>(reinterpret_cast<char*>(segment_) + kShmDataOffset +
                                  2 * static_cast<size_t>(options_.size) *
                                      said_.layout.chunk_bytes);
}

absl::Status ShmCommunicator::Break(absl::Status failure) {
  if (broken_.ok()) broken_ = std::move(failure);
  Leave();
  return broken_;
}

absl::Status ShmCommunicator::Usable() {
  if (left_ && broken_.ok()) return absl::FailedPreconditionError("shm communicator: closed");
  RETURN_IF_ERROR(broken_);
  // A non-finite value a rank found since this rank's last collective: reported alike here.
  if (absl::Status recorded = Recorded(); !recorded.ok()) return Break(recorded);
  // A few dozen bytes that nobody writes after the rendezvous: read from the rank's own cache.
  absl::Status header = CheckShmHeader(
      absl::string_view(reinterpret_cast<const char*>(&segment_->header), sizeof(ShmHeader)),
      said_.layout, said_.nonce);
  RETURN_IF_ERROR(Intact());  // a truncated segment reads as zeros: say so, not "magic is 0"
  if (!header.ok()) return Break(header);
  return absl::OkStatus();
}

absl::Status ShmCommunicator::Intact() {
  if (!guard_.faulted()) return absl::OkStatus();
  struct stat st {};
  ::fstat(fd_, &st);
  return Break(absl::DataLossError(absl::StrCat("the shared-memory segment ", path_, " shrank to ",
                                                st.st_size, " bytes under rank ", options_.rank,
                                                ": another process truncated it")));
}

absl::Status ShmCommunicator::Record(uint32_t culprit, uint64_t element, float value) {
  Segment::Failure& f = segment_->failure;
  uint32_t none = 0;
  if (f.state.compare_exchange_strong(none, 1, std::memory_order_acq_rel)) {
    f.culprit = culprit;
    f.element = element;
    std::memcpy(&f.value_bits, &value, sizeof(value));
    f.found_by = static_cast<uint32_t>(options_.rank);
    f.state.store(2, std::memory_order_release);
    return Recorded();
  }
  // Another rank is writing its record (state 1), a few stores long: wait for it, so that this
  // rank reports what every rank reports, never "OK" from a record still being written. A
  // writer that died between its stores leaves this rank its own finding.
  const absl::Time give_up = absl::Now() + absl::Milliseconds(100);
  while (f.state.load(std::memory_order_acquire) != 2 && absl::Now() < give_up) CpuRelax();
  if (absl::Status recorded = Recorded(); !recorded.ok()) return recorded;
  return NonFiniteError(culprit, element, value, static_cast<uint32_t>(options_.rank));
}

absl::Status ShmCommunicator::Recorded() const {
  const Segment::Failure& f = segment_->failure;
  if (f.state.load(std::memory_order_acquire) != 2) return absl::OkStatus();
  float value;
  std::memcpy(&value, &f.value_bits, sizeof(value));
  return NonFiniteError(f.culprit, f.element, value, f.found_by);
}

absl::Status ShmCommunicator::Arrive(absl::string_view what, absl::Duration timeout) {
  Segment& s = *segment_;
  const uint32_t epoch = s.epoch.load(std::memory_order_acquire);
  if (s.arrivals.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(options_.size)) {
    // The last to arrive resets the count before it releases the others, who may arrive at
    // the next barrier as soon as they see the new epoch.
    s.arrivals.store(0, std::memory_order_relaxed);
    s.epoch.store(epoch + 1, std::memory_order_release);
    Futex(&s.epoch, FUTEX_WAKE, INT_MAX, nullptr);
    ++step_;
    return Intact();
  }
  for (int i = 0; i < kSpins; ++i) {
    if (s.epoch.load(std::memory_order_acquire) != epoch) {
      ++step_;
      return Intact();
    }
    CpuRelax();
  }
  const absl::Time give_up = absl::Now() + timeout;
  const struct timespec slice = absl::ToTimespec(kCheckEvery);
  while (s.epoch.load(std::memory_order_acquire) == epoch) {
    Futex(&s.epoch, FUTEX_WAIT, epoch, &slice);
    if (s.epoch.load(std::memory_order_acquire) != epoch) break;
    // A truncated segment reads as zeros here (the epoch moved on): say so.
    RETURN_IF_ERROR(Intact());
    absl::Status failed;
    if (const uint32_t arrived = s.arrivals.load(std::memory_order_relaxed);
        arrived > static_cast<uint32_t>(options_.size)) {
      failed = absl::DataLossError(
          absl::StrCat("shm ", what, ": the segment's count of ranks arrived is ", arrived, " of ",
                       options_.size, ": another process wrote into the segment ", path_));
    } else if (options_.stop != nullptr && options_.stop->load()) {
      failed = absl::CancelledError(absl::StrCat("shm ", what, ": stopped"));
    } else if (absl::Now() >= give_up) {
      failed = absl::DeadlineExceededError(
          absl::StrCat("shm ", what, ": a peer did not arrive within ",
                       absl::FormatDuration(timeout), " (stalled or gone)"));
    }
    for (int r = 0; failed.ok() && r < options_.size; ++r) {
      if (r == options_.rank) continue;
      const Segment::Rank& peer = s.ranks[r];
      if (peer.left.load(std::memory_order_acquire) != 0) {
        failed = absl::UnavailableError(absl::StrCat("shm ", what, ": rank ", r, " left"));
      } else if (Gone(r)) {
        failed =
            absl::UnavailableError(absl::StrCat("shm ", what, ": rank ", r, "'s process ended"));
      }
    }
    if (!failed.ok()) {
      // A peer that left over a fault it found in the data recorded it: that is the error.
      if (absl::Status recorded = Recorded(); !recorded.ok()) failed = recorded;
      // This rank's arrival stays counted: nobody can use the segment any more.
      return Break(failed);
    }
  }
  ++step_;
  return Intact();
}

// Every collective keeps to one rule, so none needs a barrier at its end. Each barrier is a
// step, numbered alike on every rank, and each rank has two slots, used by even and odd steps:
// before step s's barrier a rank writes only its own slot of s's parity; after it, ranks read
// those slots until their next arrival. A rank writes that slot again before step s + 2, past
// step s + 1's barrier, which every rank reaches only once done reading. The shared result is
// written between a reduce-scatter's two barriers and read after the second until the reader's
// next arrival, which the next writer waits for.
absl::Status ShmCommunicator::AllReduce(float* data, size_t count, ReduceOp op) {
  RETURN_IF_ERROR(Usable());
  if (options_.size == 1 || count == 0) return absl::OkStatus();
  const int n = options_.size;
  const int self = options_.rank;
  std::vector<const float*>& slots = slots_;
  // Every rank's contribution is checked where it is read: a sum is finite only when all its
  // terms are, so a sum is checked once and its terms only when it is not; a minimum or maximum
  // may drop a NaN, so its terms always.
  uint32_t culprit = 0;
  size_t at = 0;
  float value = 0;
  auto non_finite = [&](const float* reduced, size_t m) {
    return (op != ReduceOp::kSum || !ShmAllFinite(reduced, m)) &&
           FirstNonFinite(slots, m, &culprit, &at, &value);
  };
  for (size_t off = 0; off < count; off += chunk_floats_) {
    const size_t len = std::min(chunk_floats_, count - off);
    float* const mine = data + off;
    const uint64_t step = step_;
    if (n <= kWholeChunkRanks && len * sizeof(float) <= kWholeChunkBytes) {
      // A small chunk: each rank reduces all of it over every slot, in rank order, straight into
      // its data, at one barrier (latency counts more than the n chunks each rank reads). Every
      // rank reads every slot, so each finds a non-finite value itself.
      std::memcpy(Slot(self, step), mine, len * sizeof(float));
      RETURN_IF_ERROR(Arrive("all-reduce", options_.timeout));
      for (int r = 0; r < n; ++r) slots[r] = Slot(r, step);
      ReduceSlots(slots, mine, len, op);
      RETURN_IF_ERROR(Intact());
      if (non_finite(mine, len)) {
        // Recorded too: a rank that read the slot before another process wrote the value there
        // reports it, rather than this rank's leaving, at its next collective.
        return Break(Record(culprit, off + at, value));
      }
      continue;
    }
    // A reduce-scatter and an all-gather: rank p reduces part p of the chunk (whole cache lines
    // where it can), reading its own part from its data and the others' from their slots, into
    // its data and the shared result; after a second barrier every rank copies the other parts
    // out of the result. A rank copies into its slot only the parts others reduce, so per byte
    // it moves about 4 bytes at two ranks where reducing the whole chunk moves 5, and the ranks
    // share the reduction instead of each doing all of it. A rank that finds a non-finite value
    // in its part records it in the segment and still arrives at the second barrier, past which
    // every rank reports it alike.
    constexpr size_t kLine = kShmAlign / sizeof(float);
    const size_t per = ((len + n - 1) / n + kLine - 1) / kLine * kLine;
    const size_t begin = std::min(len, per * static_cast<size_t>(self));
    const size_t end = std::min(len, begin + per);
    float* const slot = Slot(self, step);
    if (begin > 0) std::memcpy(slot, mine, begin * sizeof(float));
    if (end < len) std::memcpy(slot + end, mine + end, (len - end) * sizeof(float));
    RETURN_IF_ERROR(Arrive("all-reduce", options_.timeout));
    // In blocks that stay in the core's cache between the reduction into the result and the
    // copy of it into this rank's data.
    constexpr size_t kBlock = (size_t{16} << 10) / sizeof(float);
    for (size_t b = begin; b < end; b += kBlock) {
      const size_t m = std::min(kBlock, end - b);
      for (int r = 0; r < n; ++r) slots[r] = r == self ? mine + b : Slot(r, step) + b;
      ReduceSlots(slots, Result() + b, m, op);
      if (non_finite(Result() + b, m)) {
        Record(culprit, off + b + at, value).IgnoreError();  // reported past the next barrier
        break;
      }
      std::memcpy(mine + b, Result() + b, m * sizeof(float));
    }
    RETURN_IF_ERROR(Arrive("all-reduce", options_.timeout));
    if (absl::Status recorded = Recorded(); !recorded.ok()) return Break(recorded);
    if (begin > 0) std::memcpy(mine, Result(), begin * sizeof(float));
    if (end < len) std::memcpy(mine + end, Result() + end, (len - end) * sizeof(float));
  }
  return Intact();
}

absl::Status ShmCommunicator::Broadcast(float* data, size_t count, int root) {
  if (root < 0 || root >= options_.size) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " is not a rank"));
  }
  RETURN_IF_ERROR(Usable());
  if (options_.size == 1 || count == 0) return absl::OkStatus();
  for (size_t off = 0; off < count; off += chunk_floats_) {
    const size_t len = std::min(chunk_floats_, count - off);
    const uint64_t step = step_;
    if (options_.rank == root) std::memcpy(Slot(root, step), data + off, len * sizeof(float));
    RETURN_IF_ERROR(Arrive("broadcast", options_.timeout));
    if (options_.rank != root) std::memcpy(data + off, Slot(root, step), len * sizeof(float));
  }
  return Intact();
}

absl::Status ShmCommunicator::Barrier() {
  RETURN_IF_ERROR(Usable());
  if (options_.size == 1) return absl::OkStatus();
  return Arrive("barrier", options_.timeout);
}

absl::Status ShmCommunicator::Close() {
  absl::Status s = Usable();
  if (s.ok() && options_.size > 1) {
    s = Arrive("closing", std::min(options_.timeout, absl::Seconds(10)));
  }
  Leave();
  binding_.Release();
  return s;
}

}  // namespace kubetrain::worker
