#include "localkube/sandbox/tests/test_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "localkube/sandbox/tools.h"

namespace kubetrain::sandbox::testing {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int Millis(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

absl::StatusOr<Listener> ListenOn(absl::StatusOr<int> fd, const std::string& ip) {
  if (!fd.ok()) return fd.status();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  socklen_t size = sizeof(address);
  if (::bind(*fd, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(*fd, 8) != 0 ||
      ::getsockname(*fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    ::close(*fd);
    return Errno("listen");
  }
  return Listener{*fd, ntohs(address.sin_port)};
}

}  // namespace

absl::StatusOr<Listener> Listen(const Sandbox& sandbox) {
  return ListenOn(sandbox.Socket(AF_INET, SOCK_STREAM), "0.0.0.0");
}

absl::StatusOr<Listener> ListenOnHost(const std::string& ip) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  return ListenOn(fd, ip);
}

absl::StatusOr<int> Connect(const Sandbox& from, const std::string& ip, int port,
                            absl::Duration timeout) {
  absl::StatusOr<int> fd = from.Socket(AF_INET, SOCK_STREAM);
  if (!fd.ok()) return fd.status();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  ::inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  ::fcntl(*fd, F_SETFL, O_NONBLOCK);
  if (::connect(*fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 &&
      errno != EINPROGRESS) {
    absl::Status error = Errno("connect");
    ::close(*fd);
    return error;
  }
  pollfd writable = {.fd = *fd, .events = POLLOUT, .revents = 0};
  int error = 0;
  socklen_t size = sizeof(error);
  if (::poll(&writable, 1, Millis(timeout)) != 1) {
    ::close(*fd);
    return absl::DeadlineExceededError(absl::StrCat("connect to ", ip, " timed out"));
  }
  ::getsockopt(*fd, SOL_SOCKET, SO_ERROR, &error, &size);
  if (error != 0) {
    ::close(*fd);
    return absl::UnavailableError(absl::StrCat("connect to ", ip, ": ", std::strerror(error)));
  }
  ::fcntl(*fd, F_SETFL, 0);
  return *fd;
}

absl::Status EchoOnce(int listener, absl::Duration timeout) {
  pollfd readable = {.fd = listener, .events = POLLIN, .revents = 0};
  if (::poll(&readable, 1, Millis(timeout)) != 1) {
    return absl::DeadlineExceededError("no connection");
  }
  int peer = ::accept(listener, nullptr, nullptr);
  if (peer < 0) return Errno("accept");
  char buffer[4096];
  for (ssize_t n; (n = ::read(peer, buffer, sizeof(buffer))) > 0;) {
    if (::write(peer, buffer, n) != n) break;
  }
  ::close(peer);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Exchange(int fd, const std::string& message) {
  if (::write(fd, message.data(), message.size()) != static_cast<ssize_t>(message.size())) {
    return Errno("write");
  }
  ::shutdown(fd, SHUT_WR);
  timeval limit = {.tv_sec = 10, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  std::string reply;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) reply.append(buffer, n);
  if (n < 0) return Errno("read");
  return reply;
}

std::set<std::string> ObjectsOf(const std::string& prefix, const std::string& lock_dir) {
  std::set<std::string> objects;
  auto add = [&](const char* kind, const nlohmann::json& rows, const char* key) {
    for (const auto& row : rows) {
      if (row.contains(key) && row[key].is_string() &&
          absl::StartsWith(row[key].get<std::string>(), prefix)) {
        objects.insert(absl::StrCat(kind, ":", row[key].get<std::string>()));
      }
    }
  };
  for (const std::string& name : ListNetns()) {
    if (absl::StartsWith(name, prefix)) objects.insert("netns:" + name);
  }
  if (auto rows = RunToolJson("ip", {"link", "show"}); rows.ok()) add("link", *rows, "ifname");
  if (auto rows = RunToolJson("ip", {"rule", "show"}); rows.ok()) add("rule", *rows, "iif");
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(lock_dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (absl::StartsWith(file, prefix)) objects.insert("lock:" + file);
  }
  return objects;
}

bool ReadUntil(Process& process, const std::string& needle, std::string* output,
               absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (output->find(needle) == std::string::npos) {
    if (absl::Now() > deadline || process.output_fd() < 0) return false;
    pollfd readable = {.fd = process.output_fd(), .events = POLLIN, .revents = 0};
    ::poll(&readable, 1, 50);
    if (!process.ReadOutput(output)) return output->find(needle) != std::string::npos;
  }
  return true;
}

std::optional<int> WaitExit(Process& process, std::string* output, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::optional<int> code;
  while (!(code = process.Poll()) && absl::Now() < deadline) {
    pollfd readable = {.fd = process.output_fd(), .events = POLLIN, .revents = 0};
    if (readable.fd >= 0) ::poll(&readable, 1, 20);
    if (readable.fd < 0 || !process.ReadOutput(output)) absl::SleepFor(absl::Milliseconds(5));
  }
  if (code) process.ReadOutput(output);
  return code;
}

}  // namespace kubetrain::sandbox::testing
