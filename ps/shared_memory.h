// Same-host shared memory between a PsClient and one ps (docs/architecture.md §5.11).
//
// The worker makes a ShmBuffer per ps: a memfd sealed so it can neither shrink nor grow, holding
// a 16-byte nonce and, per partition of that ps, a gradient slot and a value slot. It offers the
// buffer with Attach (pid, fd, size, nonce, slots); the ps maps it as a ShmRegion through
// /proc/<pid>/fd/<fd> and keeps it in its ShmRegistry. A push then copies the gradients into
// their slots and sends only the partition headers; the ps applies them from the region. A pull
// asks the ps to copy the values into their slots under its lock; the client copies them out.
// Only a worker in the ps's own process space (ProcessSpace: the same machine, PID and IPC
// namespaces) is mapped: in another pod, whose processes and shared memory are its own, or on
// another host, Attach fails at once and the client keeps using gRPC bytes, as it does where the
// ps cannot open the worker's fd (another user).
//
// Trust: the ps maps memory a worker controls. The seals (checked before mapping) keep the
// mapping's size fixed, so a worker cannot make the ps fault on a truncated file; the bytes
// themselves are as untrusted as gRPC's and go through the same checks (a non-finite gradient is
// refused). The ps opens only regular files whose /proc link names a kubetrain memfd of the
// offered size.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kubetrain/v1/ps.pb.h"
#include "ps/partition.h"

namespace kubetrain::ps {

struct ShmLink;  // ShmLinks' per-ps state (shared_memory.cc)

// The memfd name every ShmBuffer carries; the ps opens nothing else.
inline constexpr char kShmName[] = "kubetrain-ps";
inline constexpr size_t kShmNonceBytes = 16;

// This process's machine and process space: its boot id and the ids of its PID and IPC
// namespaces. Two processes may share a memfd through /proc/<pid>/fd exactly when theirs are
// equal: the same machine, the same processes in /proc (a pod's own PID namespace, or the host's),
// and the same IPC namespace (where a pod's shared memory ends, as on a cluster). Empty when it
// cannot be read.
std::string ProcessSpace();

// One partition's place in a region.
struct ShmSlot {
  PartitionKey key;
  uint64_t length = 0;           // float32 elements
  uint64_t gradient_offset = 0;  // bytes from the region's start, 64-aligned
  uint64_t value_offset = 0;
};

// A mapping of a whole memfd, unmapped (and closed) on destruction.
class ShmMapping {
 public:
  ShmMapping() = default;
  ShmMapping(const ShmMapping&) = delete;
  ShmMapping& operator=(const ShmMapping&) = delete;
  ~ShmMapping();

  // Maps `bytes` of `fd` shared and read-write; takes ownership of `fd` on success or failure.
  absl::Status Map(int fd, uint64_t bytes);
  char* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  int fd() const { return fd_; }
  void CloseFd();

 private:
  int fd_ = -1;
  char* data_ = nullptr;
  uint64_t bytes_ = 0;
};

// Client side: the gradient and value slots of the partitions one ps holds. Not thread-safe;
// PsClient serialises its use per ps.
class ShmBuffer {
 public:
  // A sealed memfd laid out for `partitions` (the specs of one ps, in any order).
  // UNAVAILABLE when the kernel refuses (no memfd, no memory).
  static absl::StatusOr<std::unique_ptr<ShmBuffer>> Create(
      std::span<const PartitionSpec* const> partitions);

  // What Attach offers the ps: this process's pid, the fd, size, nonce and slots.
  v1::AttachRequest Offer(uint32_t worker) const;

  // Slot `i` (the order Create was given).
  std::span<float> gradient(size_t i) const;
  std::span<const float> values(size_t i) const;
  size_t slots() const { return slots_.size(); }
  uint64_t bytes() const { return mapping_.bytes(); }
  // The slot of `key`, or -1.
  int Find(const PartitionKey& key) const;

 private:
  ShmBuffer() = default;
  ShmMapping mapping_;
  std::vector<ShmSlot> slots_;
  absl::flat_hash_map<PartitionKey, int> index_;
};

// Server side: a worker's ShmBuffer mapped into the ps. Immutable once made; thread-safe.
class ShmRegion {
 public:
  // Opens, checks and maps what `offer` names. FAILED_PRECONDITION when the ps cannot reach it
  // (another process space, no such process or fd, not a kubetrain memfd, unsealed, another
  // size, another nonce: the worker is elsewhere); INVALID_ARGUMENT for slots outside the region
  // or misaligned.
  static absl::StatusOr<std::shared_ptr<const ShmRegion>> Attach(const v1::AttachRequest& offer);

  // The slot of `key`, checked to hold `length` floats; INVALID_ARGUMENT otherwise.
  absl::StatusOr<std::span<const float>> Gradient(const PartitionKey& key, uint64_t length) const;
  absl::StatusOr<std::span<float>> Values(const PartitionKey& key, uint64_t length) const;
  uint64_t bytes() const { return mapping_.bytes(); }
  uint32_t worker() const { return worker_; }
  // False once the worker's process has exited (its region is then only the ps's to free).
  bool Alive() const;
  ~ShmRegion();

 private:
  ShmRegion() = default;
  absl::StatusOr<const ShmSlot*> Slot(const PartitionKey& key, uint64_t length) const;

  ShmMapping mapping_;
  uint32_t worker_ = 0;
  int pidfd_ = -1;  // the worker's process; -1 where the kernel has no pidfd_open
  absl::flat_hash_map<PartitionKey, ShmSlot> slots_;
};

// Client side: a PsClient's ShmBuffer for each ps, made and offered (Attach) on first use.
// Thread-safe: one call at a time goes through a ps's buffer; a call that finds it busy, or a ps
// that could not map it, uses gRPC bytes.
class ShmLinks {
 public:
  // Offers a buffer to ps `ps`; the region id, or why not.
  using AttachFn = std::function<absl::StatusOr<uint64_t>(int ps, const v1::AttachRequest&)>;
  // Tells ps `ps` to forget a region (best effort, giving up at `deadline`).
  using DetachFn = std::function<void(int ps, uint64_t region, absl::Time deadline)>;

  // `enabled` false: every Acquire answers "use bytes".
  ShmLinks(const PlacementPlan& plan, uint32_t worker, bool enabled, AttachFn attach,
           DetachFn detach);
  ShmLinks(const ShmLinks&) = delete;
  ShmLinks& operator=(const ShmLinks&) = delete;
  // Detaches every region still attached, within 250 ms in all.
  ~ShmLinks();

  // One call's hold on a ps's buffer; empty (region() == 0) when that call uses bytes.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    uint64_t region() const;
    ShmBuffer* buffer() const;
    // The call failed: the ps may still touch the buffer, so it is dropped (and detached), and
    // the next call offers a fresh one.
    void Discard();

   private:
    friend class ShmLinks;
    ShmLink* link_ = nullptr;
    ShmLinks* owner_ = nullptr;
    int ps_ = 0;
  };
  Lease Acquire(int ps);
  // One call's leases on every ps in `targets`, in that order.
  std::vector<Lease> AcquireAll(std::span<const int> targets);

 private:
  void Drop(ShmLink& link, int ps);

  const PlacementPlan& plan_;
  const uint32_t worker_;
  const bool enabled_;
  const AttachFn attach_;
  const DetachFn detach_;
  std::vector<std::unique_ptr<ShmLink>> links_;
};

// The regions a ps has mapped, by id. Adding one first drops those whose worker exited; at most
// `capacity` are kept: a new one evicts the least recently used (whose worker then gets ABORTED
// and attaches again). Thread-safe.
class ShmRegistry {
 public:
  explicit ShmRegistry(size_t capacity = 256) : capacity_(capacity) {}

  uint64_t Add(std::shared_ptr<const ShmRegion> region);
  // ABORTED (the ps restarted or evicted it: pull again) when `id` is unknown.
  absl::StatusOr<std::shared_ptr<const ShmRegion>> Find(uint64_t id);
  void Remove(uint64_t id);
  size_t size() const;

 private:
  using Lru = std::list<std::pair<uint64_t, std::shared_ptr<const ShmRegion>>>;
  const size_t capacity_;
  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  absl::flat_hash_map<uint64_t, Lru::iterator> by_id_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kubetrain::ps
