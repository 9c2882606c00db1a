#include "ps/shared_memory.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"

namespace kubetrain::ps {
namespace {

constexpr uint64_t kAlign = 64;
// The nonce and nothing else; slots start after it.
constexpr uint64_t kHeaderBytes = kAlign;
// A region larger than this is refused (no model a ps holds comes near it).
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 40;

uint64_t AlignUp(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string RandomBytes(size_t n) {
  std::string out(n, '\0');
  size_t done = 0;
  while (done < n) {
    const ssize_t got = getrandom(out.data() + done, n - done, 0);
    if (got > 0) done += static_cast<size_t>(got);
  }
  return out;
}

// "<kind>:<device>:<inode>" of /proc/self/ns/<kind>; empty when unreadable.
std::string NamespaceId(const char* kind) {
  struct stat st;
  if (stat(absl::StrCat("/proc/self/ns/", kind).c_str(), &st) != 0) return "";
  return absl::StrCat(kind, ":", st.st_dev, ":", st.st_ino);
}

}  // namespace

std::string ProcessSpace() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  const std::string pid = NamespaceId("pid"), ipc = NamespaceId("ipc");
  if (boot.empty() || pid.empty() || ipc.empty()) return "";
  return absl::StrCat(boot, "/", pid, "/", ipc);
}

// ---- ShmMapping ----

ShmMapping::~ShmMapping() {
  if (data_ != nullptr) munmap(data_, bytes_);
  CloseFd();
}

void ShmMapping::CloseFd() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::Status ShmMapping::Map(int fd, uint64_t bytes) {
  fd_ = fd;
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return Errno("mmap of the shared-memory region");
  data_ = static_cast<char*>(data);
  bytes_ = bytes;
  return absl::OkStatus();
}

// ---- ShmBuffer ----

absl::StatusOr<std::unique_ptr<ShmBuffer>> ShmBuffer::Create(
    std::span<const PartitionSpec* const> partitions) {
  std::unique_ptr<ShmBuffer> buffer(new ShmBuffer());
  uint64_t cursor = kHeaderBytes;
  for (const PartitionSpec* spec : partitions) {
    ShmSlot& slot = buffer->slots_.emplace_back();
    slot.key = spec->key;
    slot.length = spec->length;
    slot.gradient_offset = cursor;
    cursor = AlignUp(cursor + spec->bytes());
  }
  for (ShmSlot& slot : buffer->slots_) {
    slot.value_offset = cursor;
    cursor = AlignUp(cursor + slot.length * sizeof(float));
    buffer->index_[slot.key] = static_cast<int>(&slot - buffer->slots_.data());
  }
  const int fd = memfd_create(kShmName, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Errno("memfd_create");
  // Reserve the memory now: a later fault on an over-committed page would be a SIGBUS.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(cursor)); err != 0) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("reserving ", cursor, " bytes of shared memory: ", std::strerror(err)));
  }
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    const absl::Status s = Errno("sealing the shared-memory region");
    close(fd);
    return s;
  }
  RETURN_IF_ERROR(buffer->mapping_.Map(fd, cursor));
  const std::string nonce = RandomBytes(kShmNonceBytes);
  std::memcpy(buffer->mapping_.data(), nonce.data(), nonce.size());
  return buffer;
}

v1::AttachRequest ShmBuffer::Offer(uint32_t worker) const {
  v1::AttachRequest offer;
  offer.set_worker(worker);
  offer.set_pid(static_cast<int32_t>(getpid()));
  offer.set_process_space(ProcessSpace());
  offer.set_fd(mapping_.fd());
  offer.set_bytes(mapping_.bytes());
  offer.set_nonce(std::string(mapping_.data(), kShmNonceBytes));
  for (const ShmSlot& slot : slots_) {
    v1::ShmSlot* s = offer.add_slots();
    s->mutable_key()->set_variable(slot.key.variable);
    s->mutable_key()->set_index(slot.key.index);
    s->set_length(slot.length);
    s->set_gradient_offset(slot.gradient_offset);
    s->set_value_offset(slot.value_offset);
  }
  return offer;
}

std::span<float> ShmBuffer::gradient(size_t i) const {
  const ShmSlot& slot = slots_[i];
  return {reinterpret_cast<float*>(mapping_.data() + slot.gradient_offset), slot.length};
}

std::span<const float> ShmBuffer::values(size_t i) const {
  const ShmSlot& slot = slots_[i];
  return {reinterpret_cast<const float*>(mapping_.data() + slot.value_offset), slot.length};
}

int ShmBuffer::Find(const PartitionKey& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? -1 : it->second;
}

// ---- ShmRegion ----

absl::StatusOr<std::shared_ptr<const ShmRegion>> ShmRegion::Attach(const v1::AttachRequest& offer) {
  if (offer.pid() <= 0 || offer.fd() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attach: pid ", offer.pid(), " and fd ", offer.fd(), " must be >= 1 and 0"));
  }
  if (offer.bytes() < kHeaderBytes || offer.bytes() > kMaxRegionBytes) {
    return absl::InvalidArgumentError(absl::StrCat("Attach: a region of ", offer.bytes(),
                                                   " bytes; want ", kHeaderBytes, " to 2^40"));
  }
  if (offer.nonce().size() != kShmNonceBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("Attach: nonce of ", offer.nonce().size(), " bytes, want ", kShmNonceBytes));
  }
  std::shared_ptr<ShmRegion> region(new ShmRegion());
  region->worker_ = offer.worker();
  for (const v1::ShmSlot& s : offer.slots()) {
    ShmSlot slot{
        {s.key().variable(), s.key().index()}, s.length(), s.gradient_offset(), s.value_offset()};
    for (uint64_t offset : {slot.gradient_offset, slot.value_offset}) {
      if (offset % kAlign != 0 || offset < kHeaderBytes || offset > offer.bytes() ||
          slot.length > (offer.bytes() - offset) / sizeof(float)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Attach: slot of ", slot.key.name(), " (", slot.length, " floats at byte ",
                         offset, ") is misaligned or outside the ", offer.bytes(), "-byte region"));
      }
    }
    if (!region->slots_.emplace(slot.key, slot).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Attach: partition ", slot.key.name(), " has two slots"));
    }
  }

  // A worker in another pod or on another host: its memory is not this ps's to map, even where
  // /proc would reach it (pods on one machine without PID namespaces of their own).
  const std::string own_space = ProcessSpace();
  if (!offer.process_space().empty() && !own_space.empty() && offer.process_space() != own_space) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Attach: worker ", offer.worker(),
        " runs in another pod or on another host (another machine, PID or IPC namespace than "
        "this ps's), so it pushes and pulls over gRPC bytes"));
  }

  // Where the worker is not on this host (or not in this pid namespace) the path names nothing,
  // or some other process's file: the link text, type and size are checked before opening it,
  // and the nonce after mapping.
  const auto unreachable = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Attach: cannot map worker ", offer.worker(), "'s shared memory (pid ", offer.pid(),
        ", fd ", offer.fd(), "): ", why,
        "; it is not on this ps's host or not in its pid namespace, so it uses gRPC bytes"));
  };
  // A handle on the process first: a pid reused after this opens no memfd with this nonce.
  region->pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, offer.pid(), 0));
  if (region->pidfd_ < 0 && errno == ESRCH) return unreachable("no such process");
  const std::string path = absl::StrCat("/proc/", offer.pid(), "/fd/", offer.fd());
  char link[256];
  const ssize_t n = readlink(path.c_str(), link, sizeof(link) - 1);
  if (n < 0) return unreachable(absl::StrCat(path, ": ", std::strerror(errno)));
  if (!absl::StartsWith(absl::string_view(link, n), absl::StrCat("/memfd:", kShmName))) {
    return unreachable(absl::StrCat(path, " is not a kubetrain memfd"));
  }
  struct stat before;
  if (stat(path.c_str(), &before) != 0 || !S_ISREG(before.st_mode) ||
      static_cast<uint64_t>(before.st_size) != offer.bytes()) {
    return unreachable(absl::StrCat(path, " is not a file of ", offer.bytes(), " bytes"));
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return unreachable(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  struct stat after;
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &after) != 0 || after.st_ino != before.st_ino || after.st_dev != before.st_dev ||
      seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
    close(fd);
    return unreachable(absl::StrCat(path, " changed or is not sealed against resizing"));
  }
  RETURN_IF_ERROR(region->mapping_.Map(fd, offer.bytes()));
  region->mapping_.CloseFd();  // the mapping keeps the memory
  if (std::memcmp(region->mapping_.data(), offer.nonce().data(), kShmNonceBytes) != 0) {
    return unreachable("its nonce differs");
  }
  return region;
}

ShmRegion::~ShmRegion() {
  if (pidfd_ >= 0) close(pidfd_);
}

bool ShmRegion::Alive() const {
  if (pidfd_ < 0) return true;
  pollfd p{pidfd_, POLLIN, 0};
  return poll(&p, 1, 0) == 0;  // a pidfd turns readable when its process exits
}

absl::StatusOr<const ShmSlot*> ShmRegion::Slot(const PartitionKey& key, uint64_t length) const {
  auto it = slots_.find(key);
  if (it == slots_.end() || it->second.length != length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition ", key.name(), " (", length, " floats) has no slot of that size in worker ",
        worker_, "'s shared-memory region; attach again after a plan change"));
  }
  return &it->second;
}

absl::StatusOr<std::span<const float>> ShmRegion::Gradient(const PartitionKey& key,
                                                           uint64_t length) const {
  ASSIGN_OR_RETURN(const ShmSlot* slot, Slot(key, length));
  return std::span<const float>(
      reinterpret_cast<const float*>(mapping_.data() + slot->gradient_offset), length);
}

absl::StatusOr<std::span<float>> ShmRegion::Values(const PartitionKey& key, uint64_t length) const {
  ASSIGN_OR_RETURN(const ShmSlot* slot, Slot(key, length));
  return std::span<float>(reinterpret_cast<float*>(mapping_.data() + slot->value_offset), length);
}

// ---- ShmRegistry ----

uint64_t ShmRegistry::Add(std::shared_ptr<const ShmRegion> region) {
  absl::MutexLock lock(&mu_);
  for (auto it = lru_.begin(); it != lru_.end();) {  // a killed worker never detaches
    if (it->second->Alive()) {
      ++it;
      continue;
    }
    by_id_.erase(it->first);
    it = lru_.erase(it);
  }
  uint64_t id = 0;
  while (id == 0 || by_id_.contains(id)) {
    const std::string bytes = RandomBytes(sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  lru_.emplace_front(id, std::move(region));
  by_id_[id] = lru_.begin();
  while (lru_.size() > capacity_) {
    by_id_.erase(lru_.back().first);
    lru_.pop_back();  // unmapped once no push or pull still holds it
  }
  return id;
}

absl::StatusOr<std::shared_ptr<const ShmRegion>> ShmRegistry::Find(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) {
    return absl::AbortedError(absl::StrCat(
        "this ps does not know shared-memory region ", id,
        " (it restarted, or evicted the region for newer ones); attach again and pull"));
  }
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void ShmRegistry::Remove(uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return;
  lru_.erase(it->second);
  by_id_.erase(it);
}

size_t ShmRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return lru_.size();
}

// ---- ShmLinks ----

struct ShmLink {
  absl::Mutex mu;  // held by the Lease of the call using the buffer
  std::unique_ptr<ShmBuffer> buffer ABSL_GUARDED_BY(mu);
  uint64_t region ABSL_GUARDED_BY(mu) = 0;
  bool off ABSL_GUARDED_BY(mu) = false;  // the ps cannot map it: bytes from now on
};

ShmLinks::ShmLinks(const PlacementPlan& plan, uint32_t worker, bool enabled, AttachFn attach,
                   DetachFn detach)
    : plan_(plan),
      worker_(worker),
      enabled_(enabled),
      attach_(std::move(attach)),
      detach_(std::move(detach)) {
  for (int ps = 0; ps < plan_.num_ps(); ++ps) links_.push_back(std::make_unique<ShmLink>());
}

// A process that exits need not detach at all (the ps drops the regions of exited workers), so
// a stopping worker spends at most this on it.
constexpr absl::Duration kDetachBudget = absl::Milliseconds(250);

ShmLinks::~ShmLinks() {
  const absl::Time deadline = absl::Now() + kDetachBudget;
  for (int ps = 0; ps < static_cast<int>(links_.size()); ++ps) {
    ShmLink& link = *links_[ps];
    absl::MutexLock lock(&link.mu);
    if (link.region != 0) detach_(ps, link.region, deadline);
  }
}

std::vector<ShmLinks::Lease> ShmLinks::AcquireAll(std::span<const int> targets) {
  std::vector<Lease> leases;
  leases.reserve(targets.size());
  for (int ps : targets) leases.push_back(Acquire(ps));
  return leases;
}

ShmLinks::Lease ShmLinks::Acquire(int ps) {
  Lease lease;
  if (!enabled_) return lease;
  ShmLink& link = *links_[ps];
  if (!link.mu.TryLock()) return lease;  // another call is using it: this one goes as bytes
  lease.link_ = &link;
  lease.owner_ = this;
  lease.ps_ = ps;
  link.mu.AssertHeld();
  if (link.off || link.region != 0) return lease;
  std::vector<const PartitionSpec*> specs;
  for (size_t index : plan_.PartitionsOn(ps)) specs.push_back(&plan_.partitions()[index]);
  absl::StatusOr<std::unique_ptr<ShmBuffer>> buffer = ShmBuffer::Create(specs);
  if (!buffer.ok()) {
    link.off = true;
    log::Info("Pushing and pulling over gRPC bytes", {{"ps", ps}, {"reason", buffer.status()}});
    return lease;
  }
  absl::StatusOr<uint64_t> region = attach_(ps, (*buffer)->Offer(worker_));
  if (region.ok()) {
    link.buffer = *std::move(buffer);
    link.region = *region;
    log::Info("Pushing and pulling through shared memory",
              {{"ps", ps}, {"bytes", link.buffer->bytes()}});
    return lease;
  }
  // Unreachable from there (another host, an older ps, refused): for good. A ps that is down
  // gets another offer with the next call.
  const absl::StatusCode code = region.status().code();
  if (code != absl::StatusCode::kUnavailable && code != absl::StatusCode::kDeadlineExceeded &&
      code != absl::StatusCode::kCancelled) {
    link.off = true;
    log::Info("Pushing and pulling over gRPC bytes", {{"ps", ps}, {"reason", region.status()}});
  }
  return lease;
}

void ShmLinks::Drop(ShmLink& link, int ps) {
  link.mu.AssertHeld();
  if (link.region != 0) detach_(ps, link.region, absl::Now() + kDetachBudget);
  link.region = 0;
  link.buffer.reset();
}

ShmLinks::Lease::Lease(Lease&& other) noexcept
    : link_(std::exchange(other.link_, nullptr)), owner_(other.owner_), ps_(other.ps_) {}

ShmLinks::Lease& ShmLinks::Lease::operator=(Lease&& other) noexcept {
  std::swap(link_, other.link_);
  std::swap(owner_, other.owner_);
  std::swap(ps_, other.ps_);
  return *this;
}

ShmLinks::Lease::~Lease() {
  if (link_ != nullptr) link_->mu.Unlock();
}

uint64_t ShmLinks::Lease::region() const {
  if (link_ == nullptr) return 0;
  link_->mu.AssertHeld();
  return link_->region;
}

ShmBuffer* ShmLinks::Lease::buffer() const {
  if (link_ == nullptr) return nullptr;
  link_->mu.AssertHeld();
  return link_->buffer.get();
}

void ShmLinks::Lease::Discard() {
  if (link_ != nullptr) owner_->Drop(*link_, ps_);
}

}  // namespace kubetrain::ps
