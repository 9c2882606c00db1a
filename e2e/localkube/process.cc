#include "e2e/localkube/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain::localkube {
namespace {

std::string Stamp() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E9SZ", absl::Now(), absl::UTCTimeZone());
}

// Copies the child's output to the log, one stamped line per line of output. Once `stop` is
// set it drains for at most half a second more: a grandchild that left the process group can
// hold the pipe open for as long as it likes, and must not hold up its owner's destruction.
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
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
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

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const ProcessSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("no command to run");
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // even a SIGKILLed localkube leaves no children
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    if (!spec.working_dir.empty() && chdir(spec.working_dir.c_str()) != 0) _exit(126);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "localkube: exec failed\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also from the parent, so Signal works even before the child ran
  close(pipefd[1]);
  auto process = std::unique_ptr<Process>(new Process());
  process->pid_ = pid;
  process->out_fd_ = pipefd[0];
  process->reader_ = std::thread(CopyLines, pipefd[0], spec.log_path, &process->reader_done_,
                                 &process->stop_reader_);
  return process;
}

Process::~Process() {
  if (pid_ > 0) {
    kill(-pid_, SIGKILL);
    if (!exited_) waitpid(pid_, nullptr, 0);
  }
  stop_reader_ = true;
  if (reader_.joinable()) reader_.join();
}

bool Process::Poll(int* exit_code) {
  if (!exited_) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // Grandchildren that still hold the output pipe go with their parent.
      kill(-pid_, SIGKILL);
    }
  }
  if (exited_ && exit_code) *exit_code = exit_code_;
  return exited_;
}

void Process::Signal(int sig) {
  if (pid_ > 0) kill(-pid_, sig);
}

}  // namespace kubetrain::localkube
