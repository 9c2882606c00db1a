#include "e2e/localkube/container_process.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain::localkube {
namespace {

std::string Stamp() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E9SZ", absl::Now(), absl::UTCTimeZone());
}

// Copies the child's output to the log, one stamped line per line of output, and closes `fd`.
// Once `stop` is set it drains for at most half a second more: a grandchild that left the
// process group can hold the pipe open for as long as it likes, and must not hold up its owner's
// destruction.
void CopyLines(int fd, const std::string& path, std::atomic<bool>* done,
               const std::atomic<bool>* stop) {
  std::ofstream log(path, std::ios::app);
  std::string pending;
  char buf[4096];
  absl::Time give_up = absl::InfiniteFuture();
  for (;;) {
    if (*stop && give_up == absl::InfiniteFuture()) give_up = absl::Now() + absl::Milliseconds(500);
    if (absl::Now() >= give_up) break;
    pollfd p = {fd, POLLIN, 0};
    int ready = poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t n = read(fd, buf, sizeof(buf));  // the pipe is non-blocking
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;
    pending.append(buf, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      log << Stamp() << ' ' << pending.substr(0, nl) << '\n';
      pending.erase(0, nl + 1);
    }
    log.flush();
  }
  if (!pending.empty()) log << Stamp() << ' ' << pending << '\n';
  log.flush();
  close(fd);
  *done = true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ContainerProcess>> ContainerProcess::Start(
    const ProcessOptions& options, const std::string& log_path) {
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(options);
  if (!process.ok()) return process.status();
  auto container = std::unique_ptr<ContainerProcess>(new ContainerProcess(std::move(*process)));
  container->reader_ = std::thread(CopyLines, container->process_->ReleaseOutput(), log_path,
                                   &container->reader_done_, &container->stop_reader_);
  return container;
}

ContainerProcess::~ContainerProcess() {
  process_.reset();  // SIGKILLs the group and reaps the child
  stop_reader_ = true;
  if (reader_.joinable()) reader_.join();
}

bool ContainerProcess::Poll(int* exit_code) {
  const bool had_exited = process_->exit_code().has_value();
  std::optional<int> code = process_->Poll();
  if (!code) return false;
  // Grandchildren that still hold the output pipe go with their parent.
  if (!had_exited) process_->Signal(SIGKILL);
  if (exit_code) *exit_code = *code;
  return true;
}

}  // namespace kubetrain::localkube
