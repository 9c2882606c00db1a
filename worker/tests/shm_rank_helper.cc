// A shared-memory rank in a process of its own, for collective_test: it joins the coordinator at
// 127.0.0.1:PORT as rank RANK of SIZE, connects the shared-memory communicator in DIR, takes part
// in one barrier, prints "ready" and then waits to be killed (collective_test kills it with
// SIGKILL, so nothing of its own says it left).
//
//   shm_rank_helper PORT RANK SIZE DIR [SHM_BYTES]
//
// With SHM_BYTES, it first gives itself a /dev/shm of its own of that size (a tmpfs in a mount
// namespace of its own, gone with the process) and DIR is ignored: a small /dev/shm as a pod may
// have. It exits 77 where it may not make one.
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "worker/collective/coordinator.h"
#include "worker/collective/shm_communicator.h"

namespace {

bool WriteFile(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// A /dev/shm of `bytes` for this process alone; false (and why on stderr) where it may not.
bool OwnDevShm(const char* bytes) {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  // Root needs no user namespace; anyone else becomes root in one of their own.
  if (::unshare(CLONE_NEWNS) != 0) {
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0 || !WriteFile("/proc/self/setgroups", "deny") ||
        !WriteFile("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !WriteFile("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) {
      std::fprintf(stderr, "no mount namespace of its own: %s\n", std::strerror(errno));
      return false;
    }
  }
  const std::string data = std::string("size=") + bytes + ",mode=1777";
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount("tmpfs", "/dev/shm", "tmpfs", 0, data.c_str()) != 0) {
    std::fprintf(stderr, "no tmpfs of its own on /dev/shm: %s\n", std::strerror(errno));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kubetrain::worker;
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: shm_rank_helper PORT RANK SIZE DIR [SHM_BYTES]\n");
    return 2;
  }
  // Before any thread starts: a process with threads may not enter a user namespace.
  if (argc == 6 && !OwnDevShm(argv[5])) return 77;
  const std::string directory = argc == 6 ? "" : argv[4];
  const int rank = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  auto store = CoordinatorClient::Connect({.address = std::string("127.0.0.1:") + argv[1],
                                           .rank = rank,
                                           .world_size = size,
                                           .connect_timeout = absl::Seconds(20)});
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  auto comm = ShmCommunicator::TryCreate(
      **store, {.rank = rank, .size = size, .timeout = absl::Seconds(20), .directory = directory});
  if (!comm.ok() || *comm == nullptr) {
    std::fprintf(stderr, "no shared-memory communicator: %s\n",
                 comm.ok() ? "none" : comm.status().ToString().c_str());
    return 1;
  }
  if (absl::Status s = (*comm)->Barrier(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (int i = 0; i < 600; ++i) ::sleep(1);  // bounded: collective_test kills it long before
  return 0;
}
