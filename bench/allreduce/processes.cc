// allreduce_bench's child processes (see processes.h): posix_spawn with stdout on a shared pipe,
// polling for output and exits against a deadline, then SIGTERM and SIGKILL for what is left.
#include "bench/allreduce/processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

extern char** environ;

namespace kubetrain::bench {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::StatusOr<std::string> RunProcesses(const std::vector<std::vector<std::string>>& argvs,
                                         absl::Duration timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe");

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);  // dup2 clears CLOEXEC
  std::vector<pid_t> pids;
  absl::Status status;
  for (const std::vector<std::string>& argv : argvs) {
    std::vector<std::string> args = argv;
    std::vector<char*> cargv;
    for (std::string& a : args) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = ::posix_spawn(&pid, cargv[0], &actions, nullptr, cargv.data(), environ);
    if (rc != 0) {
      status = absl::FailedPreconditionError(
          absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
      break;
    }
    pids.push_back(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);

  std::string out;
  std::vector<bool> running(pids.size(), true);
  size_t left = pids.size();
  // Reads what is in the pipe within `wait_ms`; false at end of file or when nothing came.
  auto read_some = [&](int wait_ms) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, wait_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n > 0) out.append(buf, static_cast<size_t>(n));
    return n > 0;
  };
  const absl::Time deadline = absl::Now() + timeout;
  while (status.ok() && left > 0) {
    if (absl::Now() > deadline) {
      status = absl::DeadlineExceededError(absl::StrCat(
          argvs.front().front(), " did not finish within ", absl::FormatDuration(timeout)));
      break;
    }
    if (!read_some(50)) absl::SleepFor(absl::Milliseconds(20));  // at end of file poll is instant
    for (size_t i = 0; i < pids.size(); ++i) {
      int wstatus = 0;
      if (!running[i] || ::waitpid(pids[i], &wstatus, WNOHANG) != pids[i]) continue;
      running[i] = false;
      --left;
      if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
        status = absl::InternalError(
            absl::StrCat(absl::StrJoin(argvs[i], " "), " failed (",
                         WIFEXITED(wstatus) ? absl::StrCat("exit status ", WEXITSTATUS(wstatus))
                                            : absl::StrCat("signal ", WTERMSIG(wstatus)),
                         ")"));
      }
    }
  }
  // What the processes wrote just before exiting; a helper they left behind holding the pipe
  // (a launcher's daemon) must not keep us waiting.
  if (status.ok()) {
    while (read_some(1000)) {
    }
  }
  ::close(fds[0]);
  // Stop what is still running: politely first (mpirun then stops its ranks), then for good.
  for (int signal : {SIGTERM, SIGKILL}) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (running[i]) ::kill(pids[i], signal);
    }
    const absl::Time grace = absl::Now() + absl::Seconds(3);
    while (left > 0 && absl::Now() < grace) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (running[i] && ::waitpid(pids[i], nullptr, WNOHANG) == pids[i]) {
          running[i] = false;
          --left;
        }
      }
      if (left > 0) absl::SleepFor(absl::Milliseconds(20));
    }
  }
  if (!status.ok()) return status;
  return out;
}

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace kubetrain::bench
