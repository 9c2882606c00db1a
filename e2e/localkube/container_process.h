// A container's process: a kubetrain::Process (common/process.h: its own process group,
// PR_SET_PDEATHSIG, stdout and stderr merged into one pipe) whose output a reader thread copies,
// line by line, into a log file as "<RFC3339Nano timestamp> <text>" (the kubelet's log format,
// minus the stream tag).
//
// Owns the child and its reader thread: destruction kills the whole group (SIGKILL) and reaps it,
// so no child outlives its owner. Not thread-safe; one owner drives it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/process.h"

namespace kubetrain::localkube {

class ContainerProcess {
 public:
  // `log_path` is appended to.
  static absl::StatusOr<std::unique_ptr<ContainerProcess>> Start(const ProcessOptions& options,
                                                                 const std::string& log_path);
  ~ContainerProcess();
  ContainerProcess(const ContainerProcess&) = delete;
  ContainerProcess& operator=(const ContainerProcess&) = delete;

  pid_t pid() const { return process_->pid(); }
  // Non-blocking: true once the child has exited; `exit_code` is 128+signal for signals. Once the
  // child has exited, what is left of its group (grandchildren holding the output pipe) is killed.
  bool Poll(int* exit_code);
  // Signals the whole process group.
  void Signal(int sig) { process_->Signal(sig); }
  // True until the child exited and its output was fully copied to the log.
  bool Alive() const { return !process_->exit_code() || !reader_done_; }

 private:
  explicit ContainerProcess(std::unique_ptr<Process> process) : process_(std::move(process)) {}

  std::unique_ptr<Process> process_;
  std::atomic<bool> reader_done_{false};
  std::atomic<bool> stop_reader_{false};
  std::thread reader_;
};

}  // namespace kubetrain::localkube
