// A child process in its own process group with stdout and stderr captured, line by line, into a
// log file as "<RFC3339Nano timestamp> <text>" (the kubelet's log format, minus the stream tag).
//
// Owns the child and its reader thread: destruction kills the whole group (SIGKILL) and reaps it,
// so no child outlives its owner. Not thread-safe; one owner drives it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::localkube {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH when it has no '/'
  std::vector<std::string> env;   // "KEY=value"; the whole environment of the child
  std::string working_dir;        // empty: inherit
  std::string log_path;           // appended to
};

class Process {
 public:
  static absl::StatusOr<std::unique_ptr<Process>> Start(const ProcessSpec& spec);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Non-blocking: true once the child has exited; `exit_code` is 128+signal for signals.
  bool Poll(int* exit_code);
  // Signals the whole process group.
  void Signal(int sig);
  // True until the child exited and its output was fully copied to the log.
  bool Alive() const { return !exited_ || !reader_done_; }

 private:
  Process() = default;

  pid_t pid_ = -1;
  int out_fd_ = -1;
  bool exited_ = false;
  int exit_code_ = 0;
  std::atomic<bool> reader_done_{false};
  std::atomic<bool> stop_reader_{false};
  std::thread reader_;
};

}  // namespace kubetrain::localkube
