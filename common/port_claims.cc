#include "common/port_claims.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/host_port.h"

namespace kubetrain {
namespace {

// Binds the abstract socket that claims `port`: its fd, -1 when another socket holds the name,
// or an error.
absl::StatusOr<int> Claim(int port) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket(AF_UNIX): ", std::strerror(errno)));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  // Abstract: a leading NUL, then the name (not NUL-terminated); no file is made.
  const std::string name = absl::StrCat("kubetrain-port-", port);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), length) == 0) return fd;
  const int error = errno;
  close(fd);
  if (error == EADDRINUSE) return -1;
  return absl::InternalError(absl::StrCat("claiming port ", port, " (abstract socket ", name,
                                          "): ", std::strerror(error)));
}

}  // namespace

PortClaims::~PortClaims() { Release(); }

PortClaims::PortClaims(PortClaims&& other) noexcept
    : ports_(std::exchange(other.ports_, {})), fds_(std::exchange(other.fds_, {})) {}

PortClaims& PortClaims::operator=(PortClaims&& other) noexcept {
  if (this != &other) {
    Release();
    ports_ = std::exchange(other.ports_, {});
    fds_ = std::exchange(other.fds_, {});
  }
  return *this;
}

void PortClaims::Add(PortClaims other) {
  ports_.insert(ports_.end(), other.ports_.begin(), other.ports_.end());
  fds_.insert(fds_.end(), other.fds_.begin(), other.fds_.end());
  other.ports_.clear();
  other.fds_.clear();
}

void PortClaims::Release() {
  for (const int fd : fds_) close(fd);
  fds_.clear();
  ports_.clear();
}

absl::StatusOr<PortClaims> ClaimPorts(int n, const std::function<absl::StatusOr<int>()>& next) {
  PortClaims claims;
  for (int tries = 64 * n + 64; static_cast<int>(claims.ports_.size()) < n; --tries) {
    if (tries == 0) {
      return absl::UnavailableError(absl::StrCat("no free loopback port left unclaimed (",
                                                 claims.ports_.size(), " of ", n, " claimed)"));
    }
    absl::StatusOr<int> port = next();
    if (!port.ok()) return port.status();
    if (std::find(claims.ports_.begin(), claims.ports_.end(), *port) != claims.ports_.end()) {
      continue;
    }
    absl::StatusOr<int> fd = Claim(*port);
    if (!fd.ok()) return fd.status();
    if (*fd < 0) continue;  // another run's
    claims.ports_.push_back(*port);
    claims.fds_.push_back(*fd);
  }
  return claims;
}

absl::StatusOr<PortClaims> ClaimFreeLoopbackPorts(int n) {
  // Candidates in batches of n, each batch all different (FreeLoopbackPorts holds them at once).
  std::vector<int> batch;
  return ClaimPorts(n, [&]() -> absl::StatusOr<int> {
    if (batch.empty()) {
      absl::StatusOr<std::vector<int>> free = FreeLoopbackPorts(std::max(n, 1));
      if (!free.ok()) return free.status();
      batch = *std::move(free);
    }
    const int port = batch.back();
    batch.pop_back();
    return port;
  });
}

}  // namespace kubetrain
