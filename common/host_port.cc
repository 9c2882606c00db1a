#include "common/host_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace kubetrain {
namespace {

// Splits at the last ':' and unbrackets an IPv6 host; false when there is no ':' or no number
// after it.
bool Split(absl::string_view address, absl::string_view* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return false;
  absl::string_view h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  *host = h;
  return absl::SimpleAtoi(address.substr(colon + 1), port);
}

}  // namespace

std::string JoinHostPort(absl::string_view host, int port) {
  if (host.find(':') != absl::string_view::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::Status SplitHostPort(absl::string_view address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", address, "\" is not host:port (e.g. fmnist-ps-0.fmnist:2222)"));
  }
  absl::string_view h;
  int p = 0;
  if (!Split(address, &h, &p) || p < 1 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", address, "\" has no valid port (1-65535) after the last ':'"));
  }
  *host = std::string(h);
  *port = p;
  return absl::OkStatus();
}

absl::Status SplitListenAddress(absl::string_view address, std::string* host, int* port) {
  absl::string_view h;
  int p = 0;
  if (!Split(address, &h, &p) || p < 0 || p > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", address,
                     "\" is not host:port (port 0-65535, 0 for any free one; \":port\" listens "
                     "on every interface)"));
  }
  *host = h.empty() ? "0.0.0.0" : std::string(h);
  *port = p;
  return absl::OkStatus();
}

namespace {

// `n` different TCP ports free on `address` (INADDR_LOOPBACK, INADDR_ANY; `name` says it in an
// error): each stays bound until all are read.
absl::StatusOr<std::vector<int>> FreePorts(int n, uint32_t address, absl::string_view name) {
  std::vector<int> fds;
  std::vector<int> ports;
  absl::Status status;
  for (int i = 0; i < n && status.ok(); ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      status = absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
      break;
    }
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(address);
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = absl::UnavailableError(absl::StrCat("no free port on ", name, " (", ports.size(),
                                                   " of ", n, " found): ", std::strerror(errno)));
      break;
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  if (!status.ok()) return status;
  return ports;
}

}  // namespace

absl::StatusOr<int> FreeLoopbackPort() {
  ASSIGN_OR_RETURN(std::vector<int> ports, FreeLoopbackPorts(1));
  return ports.front();
}

absl::StatusOr<std::vector<int>> FreeLoopbackPorts(int n) {
  return FreePorts(n, INADDR_LOOPBACK, "127.0.0.1");
}

absl::StatusOr<int> FreePortOnEveryInterface() {
  ASSIGN_OR_RETURN(std::vector<int> ports, FreePorts(1, INADDR_ANY, "0.0.0.0"));
  return ports.front();
}

}  // namespace kubetrain
