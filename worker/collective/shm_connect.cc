// ShmCommunicator's rendezvous: which shared memory every rank sees, the segment rank 0 makes,
// and each rank's check of what it opened (worker/collective/shm_communicator.h).
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/collective/shm_communicator.h"
#include "worker/collective/shm_file.h"
#include "worker/core/random.h"

namespace kubetrain::worker {
namespace {

// What two processes share exactly when they see the same shared memory: the boot and the
// tmpfs behind the directory.
std::string SharedMemoryIdentity(const std::string& directory) {
  struct stat st {};
  if (::stat(directory.c_str(), &st) != 0) return "";
  return absl::StrCat(BootId(), "/", st.st_dev, "/", st.st_ino);
}

// A rank's verdict on the segment, as it says it at the rendezvous: usable, not usable here (the
// ranks use another communicator), or an error every rank reports.
constexpr absl::string_view kUsable = "1";
constexpr absl::string_view kNotHere = "0";

// The segment as one rank holds it during the rendezvous: unmapped and closed unless handed on.
struct HeldSegment {
  int fd = -1;
  void* mapped = MAP_FAILED;
  size_t bytes = 0;
  ShmFaultGuard guard;

  HeldSegment() = default;
  HeldSegment(const HeldSegment&) = delete;
  HeldSegment& operator=(const HeldSegment&) = delete;
  ~HeldSegment() {
    guard = ShmFaultGuard();  // before the unmapping: the address may be reused
    if (mapped != MAP_FAILED) ::munmap(mapped, bytes);
    if (fd >= 0) ::close(fd);
  }

  // Maps `bytes` of `fd` (taken over) and watches the mapping for truncation.
  absl::Status Map(int file, size_t size) {
    fd = file;
    bytes = size;
    mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (mapped == MAP_FAILED) {
      return absl::UnavailableError(absl::StrCat("mapping the segment: ", std::strerror(errno)));
    }
    ASSIGN_OR_RETURN(guard, ShmFaultGuard::Watch(mapped, bytes));
    return absl::OkStatus();
  }
  ShmSegment* segment() const { return static_cast<ShmSegment*>(mapped); }
};

// Rank 0: makes the segment and writes its header before it is named, so no rank ever opens
// one half made. Returns what it says at the rendezvous, or the reason it made none.
absl::StatusOr<ShmRendezvous> MakeSegment(const std::string& directory, const ShmLayout& layout,
                                          HeldSegment& held) {
  ShmRendezvous said{"/" + std::string(kShmNamePrefix) + RandomHexId(), RandomHexId(), layout};
  ASSIGN_OR_RETURN(ShmFile file, MakeShmFile(directory, said.name, layout.segment_bytes, 0));
  absl::Status s = held.Map(file.fd, layout.segment_bytes);
  if (s.ok()) {
    const ShmHeader header = MakeShmHeader(layout, said.nonce);
    std::memcpy(&held.segment()->header, &header, sizeof(header));
    s = NameShmFile(file);
  }
  if (!s.ok() && file.named) UnlinkShmFile(file.path);
  RETURN_IF_ERROR(s);
  return said;
}

// Every other rank: opens the segment rank 0 named and checks it against what was agreed.
// Returns its verdict.
std::string OpenSegment(const std::string& path, const ShmRendezvous& said, int rank,
                        HeldSegment& held) {
  absl::StatusOr<int> fd = OpenShmFile(path);
  if (!fd.ok()) {
    log::Info("Cannot open rank 0's shared-memory segment; using TCP",
              {{"rank", rank}, {"error", fd.status().message()}});
    return std::string(kNotHere);
  }
  struct stat st {};
  if (::fstat(*fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != said.layout.segment_bytes) {
    ::close(*fd);
    return absl::StrCat("the segment ", path, " is ", st.st_size, " bytes, expected ",
                        said.layout.segment_bytes, " (agreed at the rendezvous)");
  }
  if (absl::Status s = held.Map(*fd, said.layout.segment_bytes); !s.ok()) {
    log::Info("Cannot map rank 0's shared-memory segment; using TCP",
              {{"rank", rank}, {"error", s.message()}});
    return std::string(kNotHere);
  }
  if (!LockShmByte(held.fd, rank)) {
    return absl::StrCat("another process holds rank ", rank, "'s lock on the segment ", path);
  }
  absl::Status header =
      CheckShmHeader(absl::string_view(static_cast<const char*>(held.mapped), sizeof(ShmHeader)),
                     said.layout, said.nonce);
  if (held.guard.faulted()) {
    ::fstat(held.fd, &st);
    return absl::StrCat("the segment ", path, " shrank to ", st.st_size,
                        " bytes: another process truncated it");
  }
  if (!header.ok()) return std::string(header.message());
  return std::string(kUsable);
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
  // What ranks killed during an earlier rendezvous left here: nobody holds a lock on it.
  SweepStaleShmFiles(directory);
  // 1. Every rank says which shared memory it sees; unless all see the same, none is used.
  RETURN_IF_ERROR(
      store.Set(absl::StrCat("shm/host/", options.rank), SharedMemoryIdentity(directory)));
  std::string first;
  bool same = n <= kMaxRanks;
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(std::string id, store.Get(absl::StrCat("shm/host/", r), options.timeout));
    if (r == 0) first = id;
    same = same && !id.empty() && id == first;
  }
  if (!same) return std::unique_ptr<ShmCommunicator>();

  // 2. Rank 0 makes the segment (its name is random, the file only its user's) and says its
  // name, nonce and chunk size; the others open it and check it against what rank 0 said; each
  // says whether it could.
  HeldSegment held;
  ShmRendezvous said;
  // However this returns, the segment's name goes (below, once every rank has mapped it).
  absl::Cleanup unlink = [&] {
    if (!said.name.empty()) UnlinkShmFile(directory + said.name);
  };
  std::string verdict(kNotHere);
  if (options.rank == 0) {
    ASSIGN_OR_RETURN(const ShmLayout layout, ShmLayoutFor(n, options.chunk_bytes));
    absl::StatusOr<ShmRendezvous> made = MakeSegment(directory, layout, held);
    if (made.ok()) {
      said = *made;
      verdict = std::string(kUsable);
    } else if (made.status().code() == absl::StatusCode::kResourceExhausted) {
      log::Warn("No room for the shared-memory all-reduce; using TCP",
                {{"error", made.status().message()}});
    } else {
      log::Info("No shared memory for the all-reduce; using TCP",
                {{"error", made.status().message()}});
    }
    RETURN_IF_ERROR(store.Set("shm/name", made.ok() ? FormatShmRendezvous(said) : ""));
  } else {
    ASSIGN_OR_RETURN(std::string value, store.Get("shm/name", options.timeout));
    if (!value.empty()) {
      absl::StatusOr<ShmRendezvous> parsed = ParseShmRendezvous(value, n);
      if (parsed.ok()) {
        said = *parsed;
        verdict = OpenSegment(directory + said.name, said, options.rank, held);
      } else {
        verdict = std::string(parsed.status().message());
      }
    }
  }
  RETURN_IF_ERROR(store.Set(absl::StrCat("shm/ok/", options.rank), verdict));
  bool all = true;
  absl::Status failed;
  for (int r = 0; r < n; ++r) {
    ASSIGN_OR_RETURN(std::string v, store.Get(absl::StrCat("shm/ok/", r), options.timeout));
    all = all && v == kUsable;
    if (v != kUsable && v != kNotHere && failed.ok()) {
      failed = absl::DataLossError(
          absl::StrCat("shm rendezvous: rank ", r, " found the segment other than agreed: ", v));
    }
  }
  // Every rank that could map the segment has: its name goes, so the kernel frees it with the
  // last rank to unmap it, however the ranks end.
  std::move(unlink).Invoke();
  RETURN_IF_ERROR(failed);
  if (!all) return std::unique_ptr<ShmCommunicator>();
  std::unique_ptr<ShmCommunicator> communicator(new ShmCommunicator(
      options, said, directory + said.name, held.segment(), held.fd, std::move(held.guard)));
  held.mapped = MAP_FAILED;
  held.fd = -1;
  // 3. Off the other ranks' CPUs (worker/collective/cpu_binding.h).
  ASSIGN_OR_RETURN(communicator->binding_, CpuBinding::Bind(store, "shm/cpus/", options.rank, n,
                                                            options.timeout, options.bind_cpus));
  log::Info("Shared-memory communicator connected",
            {{"rank", options.rank},
             {"size", n},
             {"chunk_bytes", static_cast<int64_t>(said.layout.chunk_bytes)},
             {"cpus", communicator->binding_.Describe()}});
  return communicator;
}

ShmCommunicator::ShmCommunicator(const ShmOptions& options, const ShmRendezvous& said,
                                 std::string path, Segment* segment, int fd, ShmFaultGuard guard)
    : options_(options),
      said_(said),
      path_(std::move(path)),
      segment_(segment),
      fd_(fd),
      guard_(std::move(guard)),
      chunk_floats_(said.layout.chunk_bytes / sizeof(float)),
      slots_(options.size) {}

}  // namespace kubetrain::worker
