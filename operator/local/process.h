// A child process in its own process group, with stdout and stderr merged into one pipe.
//
// Owns the pid and the read end of the pipe. Destroying a Process that still runs kills its
// whole group (SIGKILL) and reaps it, so no child outlives the launcher. Not thread-safe: one
// supervisor thread drives all its processes.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::local {

struct ProcessOptions {
  std::vector<std::string> argv;           // argv[0] is an absolute path or found in PATH
  std::map<std::string, std::string> env;  // the complete environment of the child
  std::string working_dir;                 // empty: inherit
  // SIGKILL the child when the thread that started it ends (PR_SET_PDEATHSIG), so even a
  // supervisor killed with SIGKILL leaves no orphans. Start such processes from a long-lived
  // thread (main).
  bool die_with_parent = true;
};

class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(const ProcessOptions& options);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Read end of the merged stdout/stderr pipe (non-blocking); -1 once drained and closed.
  int output_fd() const { return output_fd_; }
  // Reads what is available; returns false at end of file (and closes the fd).
  bool ReadOutput(std::string* append_to);

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

}  // namespace kubetrain::local
