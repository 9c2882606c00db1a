// network_bench's child processes, scratch folders and raw TCP reference (children.h).
#include "bench/network/children.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/private_dir.h"
#include "common/status.h"

namespace kubetrain::network_bench {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

// The last `n` characters of `text`, for error messages.
std::string Tail(const std::string& text, size_t n = 2000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

// Why the wait must end now, or OK.
absl::Status Interrupted(const std::atomic<bool>& stop, absl::Time deadline) {
  if (stop.load()) return absl::CancelledError("stopped by a signal");
  if (absl::Now() > deadline)
    return absl::DeadlineExceededError(
        "the run passed its --timeout (raise it for larger sizes or slower links)");
  return absl::OkStatus();
}

// Closes the descriptor it owns.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Sends or receives exactly `n` bytes on a socket with a 100 ms timeout, so the loop sees the
// stop flag and the deadline.
absl::Status Transfer(int fd, char* data, size_t n, bool send, const std::atomic<bool>& stop,
                      absl::Time deadline) {
  while (n > 0) {
    RETURN_IF_ERROR(Interrupted(stop, deadline));
    const ssize_t done = send ? ::send(fd, data, n, MSG_NOSIGNAL) : ::recv(fd, data, n, 0);
    if (done < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (done < 0) return Errno(send ? "send" : "recv");
    if (done == 0) return absl::UnavailableError("the raw TCP peer closed the connection");
    data += done;
    n -= static_cast<size_t>(done);
  }
  return absl::OkStatus();
}

void SetTimeouts(int fd) {
  timeval limit = {.tv_sec = 0, .tv_usec = 100'000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
}

}  // namespace

std::map<std::string, std::string> BaseEnv() {
  std::map<std::string, std::string> env;
  for (const char* name : {"HOME", "TMPDIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"}) {
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  return env;
}

absl::StatusOr<std::unique_ptr<TempDir>> TempDir::Make() {
  ASSIGN_OR_RETURN(std::string parent, UserScratchDirectory());
  ASSIGN_OR_RETURN(std::string path, MakeUniqueDirectory(parent, "network-bench"));
  return std::unique_ptr<TempDir>(new TempDir(std::move(path)));
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

absl::StatusOr<int> FreePort(const sandbox::Sandbox& sandbox) {
  ASSIGN_OR_RETURN(int fd, sandbox.Socket(AF_INET, SOCK_STREAM));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, sandbox.ip().c_str(), &addr.sin_addr);
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) return absl::UnavailableError(absl::StrCat("bind: ", std::strerror(error)));
  return static_cast<int>(ntohs(addr.sin_port));
}

absl::StatusOr<int> Children::Start(const sandbox::Sandbox& sandbox, std::vector<std::string> argv,
                                    const std::map<std::string, std::string>& env) {
  std::string name = absl::StrCat(argv.size() > 1 ? argv[1] : argv[0], " in ", sandbox.name());
  return Launch(sandbox.Wrap({.argv = std::move(argv), .env = env}), std::move(name));
}

absl::StatusOr<int> Children::StartOnHost(std::vector<std::string> argv,
                                          const std::map<std::string, std::string>& env) {
  std::string name = argv[0];
  return Launch({.argv = std::move(argv), .env = env}, std::move(name));
}

absl::StatusOr<int> Children::Launch(ProcessOptions options, std::string name) {
  RETURN_IF_ERROR(Interrupted(stop_, deadline_));
  options.env["PATH"] = "/usr/sbin:/usr/bin:/sbin:/bin";
  ASSIGN_OR_RETURN(auto process, Process::Start(options));
  processes_.push_back(std::move(process));
  names_.push_back(std::move(name));
  outputs_.emplace_back();
  return static_cast<int>(processes_.size()) - 1;
}

absl::Status Children::Pump() {
  std::vector<pollfd> fds;
  for (const auto& p : processes_) {
    if (p->output_fd() >= 0) fds.push_back({p->output_fd(), POLLIN, 0});
  }
  ::poll(fds.data(), fds.size(), 50);
  for (size_t i = 0; i < processes_.size(); ++i) {
    Process& p = *processes_[i];
    if (p.output_fd() >= 0) p.ReadOutput(&outputs_[i]);
    const bool was_running = !p.exit_code().has_value();
    const std::optional<int> code = p.Poll();
    if (was_running && code) p.ReadOutput(&outputs_[i]);
    if (code && *code != 0) {
      return absl::InternalError(
          absl::StrCat(names_[i], " failed (exit code ", *code, "):\n", Tail(outputs_[i])));
    }
  }
  return Interrupted(stop_, deadline_);
}

absl::Status Children::WaitOutput(int index, absl::string_view needle) {
  while (outputs_[index].find(std::string(needle)) == std::string::npos) {
    RETURN_IF_ERROR(Pump());
    if (processes_[index]->exit_code()) {
      return absl::InternalError(absl::StrCat(names_[index], " ended without saying \"", needle,
                                              "\":\n", Tail(outputs_[index])));
    }
  }
  return absl::OkStatus();
}

absl::Status Children::WaitExit(const std::vector<int>& which) {
  for (;;) {
    RETURN_IF_ERROR(Pump());
    bool all = true;
    for (int i : which) all = all && processes_[i]->exit_code().has_value();
    if (all) return absl::OkStatus();
  }
}

absl::StatusOr<RawTcp> MeasureRawTcp(const sandbox::Sandbox& from, const sandbox::Sandbox& to,
                                     size_t bytes, int reps, const std::atomic<bool>& stop,
                                     absl::Time deadline) {
  ASSIGN_OR_RETURN(int listener_fd, to.Socket(AF_INET, SOCK_STREAM));
  Fd listener(listener_fd);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, to.ip().c_str(), &addr.sin_addr);
  socklen_t len = sizeof(addr);
  if (::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) return Errno("bind");
  if (::listen(listener.fd, 1) != 0) return Errno("listen");
  if (::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Errno("getsockname");
  }
  ASSIGN_OR_RETURN(int sender_fd, from.Socket(AF_INET, SOCK_STREAM));
  Fd sender(sender_fd);
  if (::connect(sender.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return Errno(absl::StrCat("connect from ", from.name(), " to ", to.ip()));
  }
  Fd receiver(::accept(listener.fd, nullptr, nullptr));
  if (receiver.fd < 0) return Errno("accept");
  SetTimeouts(sender.fd);
  SetTimeouts(receiver.fd);
  RawTcp result;
  char algorithm[16] = {};  // the kernel's TCP_CA_NAME_MAX
  socklen_t algorithm_len = sizeof(algorithm);
  if (::getsockopt(sender.fd, IPPROTO_TCP, TCP_CONGESTION, algorithm, &algorithm_len) != 0) {
    return Errno("getsockopt TCP_CONGESTION");
  }
  result.congestion_control.assign(algorithm, strnlen(algorithm, algorithm_len));

  std::vector<char> out(bytes, 1), in(bytes);
  absl::Status receiving;
  std::thread sink([&] {
    char ack = 1;
    for (int rep = 0; rep <= reps && receiving.ok(); ++rep) {
      receiving = Transfer(receiver.fd, in.data(), bytes, false, stop, deadline);
      if (receiving.ok()) receiving = Transfer(receiver.fd, &ack, 1, true, stop, deadline);
    }
  });
  std::vector<double>& seconds = result.seconds;
  absl::Status sending;
  for (int rep = 0; rep <= reps && sending.ok(); ++rep) {  // rep 0 opens the congestion window
    const auto start = std::chrono::steady_clock::now();
    char ack = 0;
    sending = Transfer(sender.fd, out.data(), bytes, true, stop, deadline);
    if (sending.ok()) sending = Transfer(sender.fd, &ack, 1, false, stop, deadline);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rep > 0) seconds.push_back(s);
  }
  if (!sending.ok()) ::shutdown(receiver.fd, SHUT_RDWR);  // the sink stops waiting
  sink.join();
  RETURN_IF_ERROR(sending);
  RETURN_IF_ERROR(receiving);
  return result;
}

}  // namespace kubetrain::network_bench
