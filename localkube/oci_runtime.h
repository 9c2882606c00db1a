// The `oci` container runtime of localkube's kubelet (--runtime=oci): each container run is a
// buildah working container made from its image (`buildah from --pull=never`: images are never
// pulled; a missing one is the kubelet's ErrImageNeverPull), and its program runs in that
// container's root file system.
//
// The program is not started with `buildah run`: buildah does not forward SIGTERM to it (it
// SIGKILLs the program and exits 1 itself, so neither the grace period nor the exit code would
// be the program's). Instead the working container is mounted (`buildah mount`) and:
// - in a pod sandbox (pod_sandbox.h; README "Pod sandboxes"), localkube-pod-init exec joins the
//   pod's network, IPC, UTS and PID namespaces, pivots a mount namespace of the container's own
//   into the image's root with the pod's /proc, /dev (its private /dev/shm), /sys (read-only),
//   /etc/hosts, /etc/resolv.conf and volumes, and runs the program as the image's or the
//   securityContext's user: the pod is as isolated as with the process runtime;
// - in the host's network (--pod-network host, or no sandboxes here), the program is exec'd, as
//   the same process, through `unshare --mount` (a private mount namespace in which /proc, /dev,
//   /etc/hosts, /etc/resolv.conf and the volumes are bind-mounted into the root file system) and
//   `unshare --root --wd --setgid --setuid`. There is no PID, IPC or UTS namespace then: the
//   program is not PID 1's child, shares the host's /dev/shm, and a program whose uid changed
//   loses PR_SET_PDEATHSIG (localkube's own exit still kills it; a SIGKILLed localkube leaves it
//   running).
// Either way the launcher is the process group leader the kubelet signals and reaps: signals
// reach the program and its exit code is the container's. There is no cgroup and no capability
// dropping.
//
// Working containers are named localkube-<localkube pid>-<config id> and removed when their run
// ends or the pod goes; Prepare removes those of localkube processes that no longer exist, and
// Shutdown what is left, within its deadline. Start and the destructors of the containers run on
// the kubelet's thread; the set of live names is guarded by a mutex.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "localkube/container_process.h"

namespace kubetrain::localkube {

struct OciRuntimeOptions {
  std::string buildah = "buildah";  // looked up on PATH
  // Global buildah flags, e.g. {"--storage-driver", "vfs", "--root", DIR, "--runroot", DIR}.
  // Empty: buildah's own configuration (storage.conf, STORAGE_DRIVER, ...).
  std::vector<std::string> global_args;
  absl::Duration create_timeout = absl::Minutes(2);  // `buildah from` of a large image (vfs copies)
};

class OciRuntime : public ContainerRuntime {
 public:
  explicit OciRuntime(OciRuntimeOptions options) : options_(std::move(options)) {}
  ~OciRuntime() override;

  // Whether this runtime can work here: root, and buildah runs. The reason when not.
  static absl::Status Usable(const OciRuntimeOptions& options);

  std::string name() const override { return "oci"; }
  // Removes the working containers of localkube instances that are gone.
  void Prepare();
  std::unique_ptr<RunningContainer> Start(const ContainerConfig& config,
                                          StartFailure* failure) override;
  void Shutdown(absl::Time deadline) override;

  // Runs buildah with the global flags and `args`; the exit code and merged output, or
  // DeadlineExceeded after `timeout` (the child is killed).
  struct ToolResult {
    int exit_code = 0;
    std::string output;
  };
  absl::StatusOr<ToolResult> Buildah(const std::vector<std::string>& args,
                                     absl::Duration timeout) const;

  // Removes one working container (called when its run ended). While shutting down it is left
  // for Shutdown, which removes them all at once.
  void Remove(const std::string& name);

  // The argv a container runs, by Kubernetes' rules: command replaces ENTRYPOINT (and drops
  // CMD), args replace CMD.
  static std::vector<std::string> ResolveArgv(const std::vector<std::string>& entrypoint,
                                              const std::vector<std::string>& cmd,
                                              const std::vector<std::string>& command,
                                              const std::vector<std::string>& args);
  // `path` inside `root` with symlinks resolved as if `root` were `/` (none can lead outside).
  static std::string SecureJoin(const std::string& root, const std::string& path);

 private:
  OciRuntimeOptions options_;
  std::mutex mu_;
  std::set<std::string> live_;  // working containers not yet removed
  bool shutting_down_ = false;
};

}  // namespace kubetrain::localkube
