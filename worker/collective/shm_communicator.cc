#include "worker/collective/shm_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/collective/float_reductions.h"
#include "worker/random.h"

namespace kubetrain::worker {
namespace {

constexpr uint64_t kShmMagic = 0x6b74'7368'6d30'0001;  // "ktshm0", version 1
constexpr size_t kAlign = 64;                          // a cache line: slots never share one
// Each rank's slot plus the result, together: /dev/shm is often small (64 MiB in a container).
constexpr size_t kMaxShmBytes = size_t{64} << 20;
// How long a waiting rank spins before it sleeps on the futex: peers usually arrive within
// microseconds of each other, and a sleep and a wake-up cost tens of them.
constexpr int kSpins = 2000;
// A sleeping rank wakes at least this often to look at the stop flag, its peers and the clock.
constexpr absl::Duration kCheckEvery = absl::Milliseconds(2);

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// What two processes share exactly when they see the same shared memory: the boot and the
// tmpfs behind the directory.
std::string ShmIdentity(const std::string& directory) {
  struct stat st {};
  if (::stat(directory.c_str(), &st) != 0) return "";
  return absl::StrCat(BootId(), "/", st.st_dev, "/", st.st_ino);
}

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

// The segment's layout. Atomics of 32 bits are lock-free and address-free, so they work across
// processes mapping the segment at different addresses; the futex words are 32-bit as well.
struct ShmCommunicator::Segment {
  struct alignas(kAlign) Rank {
    std::atomic<uint32_t> left;  // 1 once the rank stopped taking part
  };
  uint64_t magic;
  char nonce[33];
  uint32_t size;
  uint64_t chunk_bytes;
  alignas(kAlign) std::atomic<uint32_t> arrivals;
  alignas(kAlign) std::atomic<uint32_t> epoch;  // bumped by the last rank to arrive
  Rank ranks[kMaxRanks];
};

namespace {

size_t DataOffset() { return RoundUp(sizeof(ShmCommunicator::Segment), kAlign); }

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const struct timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// Opens (or with `create`, makes) the segment file `name`: under `directory` when set, else
// through shm_open.
int OpenSegment(const std::string& directory, const std::string& name, bool create) {
  const int flags = O_RDWR | (create ? O_CREAT | O_EXCL : 0);
  if (directory.empty()) return ::shm_open(name.c_str(), flags, 0600);
  return ::open((directory + name).c_str(), flags | O_CLOEXEC, 0600);
}

void UnlinkSegment(const std::string& directory, const std::string& name) {
  if (directory.empty()) {
    ::shm_unlink(name.c_str());
  } else {
    ::unlink((directory + name).c_str());
  }
}

// The reduction of `n` floats of every slot (at least two), in rank order, into `out`: the
// first two in one pass, then each further slot into the running result.
void ReduceSlots(const std::vector<const float*>& slots, float* out, size_t n, ReduceOp op) {
  const FloatReduction reduce = FloatReductionFor(op);
  reduce(out, slots[0], slots[1], n);
  for (size_t r = 2; r < slots.size(); ++r) reduce(out, out, slots[r], n);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmCommunicator>> ShmCommunicator::TryCreate(
    KeyValueStore& store, const ShmOptions& options) {
  const int n = options.size;
  if (n < 1 || options.rank < 0 || options.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm communicator: rank ", options.rank, " of ", n));
  }
  const std::string directory = options.directory.empty() ? "/dev/shm" : options.directory;
  // 1. Every rank says which shared memory it sees; unless all see the same, none is used.
  RETURN_IF_ERROR(store.Set(absl::StrCat("shm/host/", options.rank), ShmIdentity(directory)));
  std::string first;
  bool same = n <= kMaxRanks;
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(std::string id, store.Get(absl::StrCat("shm/host/", r), options.timeout));
    if (r == 0) first = id;
    same = same && !id.empty() && id == first;
  }
  if (!same) return std::unique_ptr<ShmCommunicator>();

  // 2. Rank 0 makes the segment (its name is random, the file only its user's) and says its
  // name and nonce; the others open it and check the nonce; each says whether it could.
  const size_t chunk = std::max<size_t>(
      kAlign, std::min(RoundUp(options.chunk_bytes, kAlign),
                       (kMaxShmBytes - DataOffset()) / (2 * n + 1) / kAlign * kAlign));
  const size_t bytes = DataOffset() + (2 * n + 1) * chunk;
  std::string name, nonce;
  int fd = -1;
  bool ok = true;
  void* mapped = MAP_FAILED;
  // Every rank that could open the segment has by the time this returns (or gave up): its name
  // goes then, so nothing outlives the job; the mapping stays only with the communicator.
  bool made = false;
  absl::Cleanup unlink = [&] {
    if (made) UnlinkSegment(options.directory, name);
  };
  absl::Cleanup unmap = [&] {
    if (mapped != MAP_FAILED) ::munmap(mapped, bytes);
    if (fd >= 0) ::close(fd);
  };
  // Each rank holds a lock on its own byte of the file for as long as its process has it open:
  // the kernel drops it when the process ends however it ends (SIGKILL too), in any pid
  // namespace, so a peer's free byte says it is gone.
  auto map = [&] {
    mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    struct flock mine {};
    mine.l_type = F_WRLCK;
    mine.l_whence = SEEK_SET;
    mine.l_start = options.rank;
    mine.l_len = 1;
    return mapped != MAP_FAILED && ::fcntl(fd, F_OFD_SETLK, &mine) == 0;
  };
  Segment* segment = nullptr;
  if (options.rank == 0) {
    name = "/kubetrain-" + RandomHexId();
    nonce = RandomHexId();
    fd = OpenSegment(options.directory, name, /*create=*/true);
    made = fd >= 0;
    // posix_fallocate, not only ftruncate: a full /dev/shm must fail here, not as SIGBUS on a
    // later write.
    ok = fd >= 0 && ::ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
         ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0;
    if (!ok) {
      log::Info("No shared memory for the all-reduce; using TCP",
                {{"bytes", bytes}, {"directory", directory}, {"error", std::strerror(errno)}});
    } else if ((ok = map())) {
      // The header is written before the name is said: the others check it when they open.
      segment = static_cast<Segment*>(mapped);
      segment->magic = kShmMagic;
      std::snprintf(segment->nonce, sizeof(segment->nonce), "%s", nonce.c_str());
      segment->size = static_cast<uint32_t>(n);
      segment->chunk_bytes = chunk;
    }
    RETURN_IF_ERROR(store.Set("shm/name", ok ? absl::StrCat(name, " ", nonce) : ""));
  } else {
    ASSIGN_OR_RETURN(std::string said, store.Get("shm/name", options.timeout));
    std::vector<std::string> parts = absl::StrSplit(said, ' ');
    // Only a name of the form rank 0 makes is opened: the store's values come over the network.
    ok = parts.size() == 2 && absl::StartsWith(parts[0], "/kubetrain-") && parts[0].size() <= 64 &&
         parts[0].find_first_not_of("0123456789abcdef", 11) == std::string::npos;
    if (ok) {
      name = parts[0];
      nonce = parts[1];
      fd = OpenSegment(options.directory, name, /*create=*/false);
      struct stat st {};
      ok = fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) == bytes;
      ok = ok && map();
    }
    if (ok) {
      segment = static_cast<Segment*>(mapped);
      ok = segment->magic == kShmMagic &&
           nonce == std::string(segment->nonce, strnlen(segment->nonce, sizeof(segment->nonce))) &&
           segment->size == static_cast<uint32_t>(n) && segment->chunk_bytes == chunk;
    }
  }
  RETURN_IF_ERROR(store.Set(absl::StrCat("shm/ok/", options.rank), ok ? "1" : "0"));
  bool all = true;
  for (int r = 0; r < n; ++r) {
    absl::StatusOr<std::string> said = store.Get(absl::StrCat("shm/ok/", r), options.timeout);
    if (!said.ok()) return said.status();
    all = all && *said == "1";
  }
  if (!all) return std::unique_ptr<ShmCommunicator>();
  std::move(unmap).Cancel();
  std::unique_ptr<ShmCommunicator> communicator(new ShmCommunicator(options, segment, bytes, fd));
  // 3. Off the other ranks' CPUs (worker/collective/cpu_binding.h).
  ASSIGN_OR_RETURN(communicator->binding_, CpuBinding::Bind(store, "shm/cpus/", options.rank, n,
                                                            options.timeout, options.bind_cpus));
  log::Info("Shared-memory communicator connected", {{"rank", options.rank},
                                                     {"size", n},
                                                     {"chunk_bytes", chunk},
                                                     {"cpus", communicator->binding_.Describe()}});
  return communicator;
}

ShmCommunicator::ShmCommunicator(const ShmOptions& options, Segment* segment, size_t mapped_bytes,
                                 int fd)
    : options_(options),
      segment_(segment),
      mapped_bytes_(mapped_bytes),
      fd_(fd),
      chunk_floats_(segment->chunk_bytes / sizeof(float)),
      slots_(options.size) {}

ShmCommunicator::~ShmCommunicator() {
  Leave();
  ::munmap(segment_, mapped_bytes_);
  ::close(fd_);  // drops this rank's lock
}

bool ShmCommunicator::Gone(int rank) const {
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_start = rank;
  probe.l_len = 1;
  return ::fcntl(fd_, F_OFD_GETLK, &probe) == 0 && probe.l_type == F_UNLCK;
}

void ShmCommunicator::Leave() {
  if (left_) return;
  left_ = true;
  segment_->ranks[options_.rank].left.store(1, std::memory_order_release);
  Futex(&segment_->epoch, FUTEX_WAKE, INT_MAX, nullptr);  // waiters look again
}

float* ShmCommunicator::Slot(int rank, uint64_t step) const {
  const size_t index = static_cast<size_t>(step % 2) * options_.size + rank;
  return reinterpret_cast<float*>(reinterpret_cast<char*>(segment_) + DataOffset() +
                                  index * segment_->chunk_bytes);
}

float* ShmCommunicator::Result() const {
  return reinterpret_cast<float*>(reinterpret_cast<char*>(segment_) + DataOffset() +
                                  2 * static_cast<size_t>(options_.size) * segment_->chunk_bytes);
}

absl::Status ShmCommunicator::Usable() const {
  if (left_) return absl::FailedPreconditionError("shm communicator: closed");
  return broken_;
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
    return absl::OkStatus();
  }
  for (int i = 0; i < kSpins; ++i) {
    if (s.epoch.load(std::memory_order_acquire) != epoch) {
      ++step_;
      return absl::OkStatus();
    }
    CpuRelax();
  }
  const absl::Time give_up = absl::Now() + timeout;
  const struct timespec slice = absl::ToTimespec(kCheckEvery);
  while (s.epoch.load(std::memory_order_acquire) == epoch) {
    Futex(&s.epoch, FUTEX_WAIT, epoch, &slice);
    if (s.epoch.load(std::memory_order_acquire) != epoch) break;
    absl::Status failed;
    if (options_.stop != nullptr && options_.stop->load()) {
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
      broken_ = failed;
      Leave();  // this rank's arrival stays counted: nobody can use the segment any more
      return failed;
    }
  }
  ++step_;
  return absl::OkStatus();
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
  for (size_t off = 0; off < count; off += chunk_floats_) {
    const size_t len = std::min(chunk_floats_, count - off);
    float* const mine = data + off;
    const uint64_t step = step_;
    if (n <= kWholeChunkRanks && len * sizeof(float) <= kWholeChunkBytes) {
      // A small chunk: each rank reduces all of it over every slot, in rank order, straight into
      // its data, at one barrier (latency counts more than the n chunks each rank reads).
      std::memcpy(Slot(self, step), mine, len * sizeof(float));
      RETURN_IF_ERROR(Arrive("all-reduce", options_.timeout));
      for (int r = 0; r < n; ++r) slots[r] = Slot(r, step);
      ReduceSlots(slots, mine, len, op);
      continue;
    }
    // A reduce-scatter and an all-gather: rank p reduces part p of the chunk (whole cache lines
    // where it can), reading its own part from its data and the others' from their slots, into
    // its data and the shared result; after a second barrier every rank copies the other parts
    // out of the result. A rank copies into its slot only the parts others reduce, so per byte
    // it moves about 4 bytes at two ranks where reducing the whole chunk moves 5, and the ranks
    // share the reduction instead of each doing all of it.
    const size_t per = RoundUp((len + n - 1) / n, kAlign / sizeof(float));
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
      std::memcpy(mine + b, Result() + b, m * sizeof(float));
    }
    RETURN_IF_ERROR(Arrive("all-reduce", options_.timeout));
    if (begin > 0) std::memcpy(mine, Result(), begin * sizeof(float));
    if (end < len) std::memcpy(mine + end, Result() + end, (len - end) * sizeof(float));
  }
  return absl::OkStatus();
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
  return absl::OkStatus();
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
