// A container's process: a kubetrain::Process (common/process.h: its own process group,
// PR_SET_PDEATHSIG, stdout and stderr merged into one pipe) whose output a reader thread copies,
// line by line, into a log file as "<RFC3339Nano timestamp> <text>" (the kubelet's log format,
// minus the stream tag).
//
// Owns the child and its reader thread: destruction kills the whole group (SIGKILL) and reaps it,
// so no child outlives its owner. Not thread-safe; one owner drives it.
//
// Also the kubelet's container runtime interface (ContainerRuntime: what starts a container
// from the kubelet's ContainerConfig) and its `process` implementation, which runs the command
// on this host as it is (oci_runtime.h runs it from its image).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process.h"

namespace kubetrain::localkube {

class PodSandbox;  // pod_sandbox.h

// A volume (or a file or directory of one, with subPath) to mount into a container.
struct ContainerMount {
  std::string host_path;
  std::string container_path;  // the volumeMount's mountPath
  bool read_only = false;
};

// What the kubelet asks a runtime to start: one run of one container.
struct ContainerConfig {
  std::string id;     // unique among this kubelet's container runs: <pod uid>-<container>-<run>
  std::string image;  // as in the pod spec
  // The pod spec's command and args after $(VAR) expansion; either may be empty (the image's
  // ENTRYPOINT / CMD then apply, as Kubernetes defines: command replaces ENTRYPOINT, args
  // replace CMD, and a command alone drops CMD).
  std::vector<std::string> command, args;
  // The environment the kubelet sets (pod variables, the kubernetes Service's, the container's
  // env), laid by the runtime over its base (the process runtime: localkube's own environment;
  // the oci runtime: the image's ENV).
  std::map<std::string, std::string> env;
  std::string working_dir;  // empty: the image's (oci) or localkube's (process)
  std::optional<int64_t> run_as_user, run_as_group;  // securityContext; unset: the image's USER
  bool run_as_non_root = false;
  std::vector<ContainerMount> mounts;
  std::string etc_hosts;  // the pod's hosts file (oci: mounted at /etc/hosts)
  std::string pod_dir;    // the pod's own directory on the host (process: TMPDIR below it)
  std::string log_path;   // appended to, one stamped line per line of output
  // The pod's sandbox: the command runs in the pod's namespaces with `mounts` (the process
  // runtime: with a clean base environment; the oci runtime: in its image's root). Null: in the
  // host's network (the process runtime: on this host as it is).
  const PodSandbox* sandbox = nullptr;
};

// A started container run. Driven by one thread (the kubelet's).
class RunningContainer {
 public:
  virtual ~RunningContainer() = default;
  // containerID as containerStatuses report it ("localkube://<pid>", "buildah://<name>").
  virtual std::string id() const = 0;
  // Non-blocking: true once the container's program has exited; `exit_code` is 128+signal for
  // signals.
  virtual bool Poll(int* exit_code) = 0;
  // Signals the container's processes.
  virtual void Signal(int sig) = 0;
  // True until the program exited and its output was fully copied to the log.
  virtual bool Alive() const = 0;
};

// Why a start failed, in the kubelet's terms.
struct StartFailure {
  // "ErrImageNeverPull", "CreateContainerError", "CreateContainerConfigError": the container
  // stays Waiting with this reason and the kubelet retries; "StartError": it terminates (128).
  std::string reason;
  std::string message;
};

class ContainerRuntime {
 public:
  virtual ~ContainerRuntime() = default;
  virtual std::string name() const = 0;  // "process" or "oci"
  // Starts one run. On failure returns null and fills `failure`.
  virtual std::unique_ptr<RunningContainer> Start(const ContainerConfig& config,
                                                  StartFailure* failure) = 0;
  // localkube is exiting: containers are already killed; remove what is left, giving up at
  // `deadline`.
  virtual void Shutdown(absl::Time deadline) { (void)deadline; }
};

// Runs each container's command as a process group on this host (see README: "Runtimes"), inside
// the pod's sandbox when it has one (volume mounts then apply). runAsUser and the image's
// ENTRYPOINT/CMD cannot apply.
class ProcessRuntime : public ContainerRuntime {
 public:
  // (image prefix, directory) pairs of --image-map.
  explicit ProcessRuntime(std::vector<std::pair<std::string, std::string>> image_map)
      : image_map_(std::move(image_map)) {}
  std::string name() const override { return "process"; }
  std::unique_ptr<RunningContainer> Start(const ContainerConfig& config,
                                          StartFailure* failure) override;

  // command[0] (or, with no command, the image's last path element without its tag, or that
  // name after "kubetrain-") from the first mapped directory holding such an executable; else
  // `command` as given (with no command, the image's name).
  static std::string ResolveBinary(
      const std::vector<std::pair<std::string, std::string>>& image_map, const std::string& image,
      std::string command);

 private:
  std::vector<std::pair<std::string, std::string>> image_map_;
};

class ContainerProcess : public RunningContainer {
 public:
  // `log_path` is appended to.
  static absl::StatusOr<std::unique_ptr<ContainerProcess>> Start(const ProcessOptions& options,
                                                                 const std::string& log_path);
  ~ContainerProcess() override;
  ContainerProcess(const ContainerProcess&) = delete;
  ContainerProcess& operator=(const ContainerProcess&) = delete;

  pid_t pid() const { return process_->pid(); }
  std::string id() const override;
  // Non-blocking: true once the child has exited; `exit_code` is 128+signal for signals. Once the
  // child has exited, what is left of its group (grandchildren holding the output pipe) is killed.
  bool Poll(int* exit_code) override;
  // Signals the whole process group.
  void Signal(int sig) override { process_->Signal(sig); }
  // True until the child exited and its output was fully copied to the log.
  bool Alive() const override { return !process_->exit_code() || !reader_done_; }

 private:
  explicit ContainerProcess(std::unique_ptr<Process> process) : process_(std::move(process)) {}

  std::unique_ptr<Process> process_;
  std::atomic<bool> reader_done_{false};
  std::atomic<bool> stop_reader_{false};
  std::thread reader_;
};

}  // namespace kubetrain::localkube
