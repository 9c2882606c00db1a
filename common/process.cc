#include "common/process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kubetrain {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

// What the child needs after fork, all built before it: the child may not allocate.
struct ChildArgs {
  int write_fd;
  const char* path;  // nullptr: not found, nothing to run
  char* const* argv;
  char* const* envp;
  const char* dir;  // nullptr: inherit
  bool die_with_parent;
  pid_t parent;
  const char* exec_failed;  // written to the output when exec fails
  size_t exec_failed_len;
  bool set_cpus;
  cpu_set_t cpus;
};

// In the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void ExecChild(const ChildArgs& a) {
  setpgid(0, 0);
  if (a.die_with_parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != a.parent) _exit(137);  // the parent died before prctl took effect
  }
  dup2(a.write_fd, STDOUT_FILENO);
  dup2(a.write_fd, STDERR_FILENO);
  close(a.write_fd);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);  // dup2 clears close-on-exec on stdin
  // The parent may ignore SIGPIPE (an HTTP server does) and block SIGTERM/SIGINT on every thread
  // (a sigwait loop does); exec keeps both, and the child must start as a fresh program would.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGPIPE, &dfl, nullptr);
  sigaction(SIGINT, &dfl, nullptr);
  sigaction(SIGTERM, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  if (a.set_cpus) (void)sched_setaffinity(0, sizeof(a.cpus), &a.cpus);
  if (a.dir != nullptr && chdir(a.dir) != 0) _exit(126);
  if (a.path != nullptr) execve(a.path, a.argv, a.envp);
  (void)!write(STDERR_FILENO, a.exec_failed, a.exec_failed_len);
  _exit(127);
}

// `cpus` as a cpu_set_t; false when one is past its 1024 (or negative).
bool ToCpuSet(const std::vector<int>& cpus, cpu_set_t* set) {
  CPU_ZERO(set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) return false;
    CPU_SET(c, set);
  }
  return true;
}

}  // namespace

bool SetAllowedCpus(pid_t tid, const std::vector<int>& cpus) {
  cpu_set_t set;
  return ToCpuSet(cpus, &set) && sched_setaffinity(tid, sizeof(set), &set) == 0;
}

std::vector<int> AllowedCpus(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::optional<std::string> FindInPath(const std::string& program, const std::string& path) {
  if (program.find('/') != std::string::npos) {
    if (access(program.c_str(), X_OK) == 0) return program;
    return std::nullopt;
  }
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/", program);
    struct stat st;
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::unique_ptr<Process>> Process::Start(const ProcessOptions& options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("no command to run");
  const std::string& program = options.argv[0];
  auto path_it = options.env.find("PATH");
  std::string search = path_it != options.env.end() ? path_it->second : "/usr/bin:/bin";
  // A relative path with a '/' names a file under working_dir: the child runs it from there.
  const bool from_working_dir =
      program.find('/') != std::string::npos && program[0] != '/' && !options.working_dir.empty();
  std::optional<std::string> binary = FindInPath(
      from_working_dir ? absl::StrCat(options.working_dir, "/", program) : program, search);
  if (!binary && !options.not_found_exits_127) {
    return absl::NotFoundError(
        absl::StrCat("executable \"", program, "\" not found in PATH (", search, ")"));
  }
  const std::string exec_path = from_working_dir || !binary ? program : *binary;
  // Everything exec needs is built before fork: the child may not allocate.
  std::vector<char*> argv;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : options.env) env_strings.push_back(absl::StrCat(k, "=", v));
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string exec_failed = absl::StrCat(exec_path, ": exec failed\n");

  cpu_set_t cpus;
  if (!ToCpuSet(options.cpus, &cpus)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpus: ", absl::StrJoin(options.cpus, ","), " names a CPU outside 0-1023"));
  }

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Errno("pipe");
  const ChildArgs child{fds[1],
                        binary ? exec_path.c_str() : nullptr,
                        argv.data(),
                        envp.data(),
                        options.working_dir.empty() ? nullptr : options.working_dir.c_str(),
                        options.die_with_parent,
                        getpid(),
                        exec_failed.data(),
                        exec_failed.size(),
                        !options.cpus.empty(),
                        cpus};
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return Errno("fork");
  }
  if (pid == 0) ExecChild(child);
  setpgid(pid, pid);  // also in the parent, so Signal() works before the child has run
  close(fds[1]);
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return std::unique_ptr<Process>(new Process(pid, fds[0]));
}

Process::~Process() {
  Signal(SIGKILL);  // also reaps leftovers of the group, e.g. a shell's background children
  if (!exit_code_) {
    int status;
    waitpid(pid_, &status, 0);
  }
  if (output_fd_ >= 0) close(output_fd_);
}

bool Process::ReadOutput(std::string* append_to) {
  if (output_fd_ < 0) return false;
  char buf[16384];
  while (true) {
    ssize_t n = read(output_fd_, buf, sizeof(buf));
    if (n > 0) {
      append_to->append(buf, n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n < 0 && errno == EINTR) continue;
    close(output_fd_);
    output_fd_ = -1;
    return false;
  }
}

int Process::ReleaseOutput() {
  const int fd = output_fd_;
  output_fd_ = -1;
  return fd;
}

std::optional<int> Process::Poll() {
  if (exit_code_) return exit_code_;
  int status;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) exit_code_ = DecodeWaitStatus(status);
  return exit_code_;
}

void Process::Signal(int sig) {
  // Before the child's own setpgid has run the group may not exist yet: then signal the pid,
  // which is ours until reaped.
  if (kill(-pid_, sig) != 0 && !exit_code_) kill(pid_, sig);
}

}  // namespace kubetrain
