// A child process in its own process group, with stdout and stderr merged into one pipe: what
// `kubetrain run` (operator/local/launcher.h) and localkube's kubelet (localkube/kubelet.h)
// start their tasks and containers as.
//
// Owns the pid and the read end of the pipe. Destroying a Process that still runs kills its
// whole group (SIGKILL) and reaps it, so no child outlives its owner. Not thread-safe: one
// supervisor thread drives all its processes (a reader thread of its own may take the output
// pipe with ReleaseOutput).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain {

struct ProcessOptions {
  // argv[0] with a '/' is a path (a relative one from working_dir when set); without one it is
  // looked up on the PATH of `env` (/usr/bin:/bin when it has none), as a container runtime
  // resolves a command against the container's PATH.
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the complete environment of the child
  std::string working_dir;                 // empty: inherit
  // SIGKILL the child when the thread that started it ends (PR_SET_PDEATHSIG), so even a
  // supervisor killed with SIGKILL leaves no orphans. Start such processes from a long-lived
  // thread (main).
  bool die_with_parent = true;
  // When argv[0] is not an executable, start all the same: the child says so on its output and
  // exits 127, as a shell's child does (localkube's containers), instead of Start returning
  // NOT_FOUND.
  bool not_found_exits_127 = false;
  // The CPUs the child may run on (its threads inherit them), set before exec; a set the kernel
  // refuses (a cpuset without them) leaves the child on its parent's. Empty: the parent's.
  std::vector<int> cpus;
};

// The CPUs thread `tid` (0: the calling one) may run on, in increasing order; empty when it
// cannot be read or past cpu_set_t's 1024.
std::vector<int> AllowedCpus(pid_t tid = 0);
// Lets thread `tid` (0: the calling one) run only on `cpus`; false when a CPU is past
// cpu_set_t's 1024 or the kernel refuses (a cpuset without them).
bool SetAllowedCpus(pid_t tid, const std::vector<int>& cpus);

class Process {
 public:
  // The child starts with stdin on /dev/null, every signal unblocked and SIGPIPE, SIGINT and
  // SIGTERM at their defaults, whatever its parent blocked or ignored. NOT_FOUND when argv[0]
  // is not an executable (unless not_found_exits_127); should exec fail all the same, the child
  // says so on its output and exits 127.
  static absl::StatusOr<std::unique_ptr<Process>> Start(const ProcessOptions& options);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Read end of the merged stdout/stderr pipe (non-blocking); -1 once drained and closed, or
  // released.
  int output_fd() const { return output_fd_; }
  // Reads what is available without waiting; returns false at end of file (and closes the fd).
  // Once the process has exited, one call reads all it wrote; do not loop until false: a
  // descendant that outlives it (`sleep 60 &`) holds the pipe open, and true comes back for ever.
  bool ReadOutput(std::string* append_to);
  // Hands the read end of the pipe (non-blocking) to the caller, who closes it; -1 if already
  // closed. ReadOutput returns false afterwards.
  int ReleaseOutput();

  // Non-blocking: the exit code once the process has ended (128 + N when killed by signal N).
  std::optional<int> Poll();
  std::optional<int> exit_code() const { return exit_code_; }

  // Sends `sig` to the whole process group.
  void Signal(int sig);

 private:
  Process(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}

  pid_t pid_;
  int output_fd_;
  std::optional<int> exit_code_;
};

// Resolves a program name the way execvp would, against `path` (a PATH-style list).
std::optional<std::string> FindInPath(const std::string& program, const std::string& path);

}  // namespace kubetrain
