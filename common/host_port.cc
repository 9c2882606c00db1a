#include "common/host_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

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

absl::StatusOr<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket: cannot create");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  if (port <= 0) return absl::UnavailableError("no free port on 127.0.0.1");
  return port;
}

}  // namespace kubetrain
