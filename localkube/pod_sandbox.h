// Pod sandboxes for localkube's kubelet (README "Pod sandboxes"): each pod gets a network
// namespace on its node's bridge (sandbox::Network; the pod IP is the sandbox's, the host IP the
// node's bridge address) and, through a holder process (localkube-pod-init hold, the pause
// container of a real node), its own mount, IPC and UTS namespaces: its hostname, a private /tmp,
// /dev/shm and /run, and localkube's /etc/hosts for it. Containers join them through
// localkube-pod-init exec, which also mounts their volumes.
//
// PodNetwork owns the sandbox::Network (nodes, bridges, namespaces; swept after a crash by the
// next start) and PodSandbox the pod's namespace and holder. Not thread-safe: the kubelet's
// thread drives both.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process.h"
#include "localkube/sandbox/network.h"

namespace kubetrain::localkube {

struct ContainerMount;  // container_process.h

struct PodNetworkOptions {
  // "host": pods share the host's network (each a loopback IP of its own); "sandbox": pod
  // sandboxes, an error when they cannot work here; "auto": sandboxes when they can work, else
  // host with one log line saying why.
  std::string mode = "host";
  int nodes = 1;
  std::optional<int64_t> uplink_bits_per_second;  // per node uplink; none: unshaped
  std::string pod_init;  // the localkube-pod-init binary; empty: the one beside this program
};

// "100Mbit", "1Gbit", "500kbit", "2.5gbit", "1000000" (bits per second) as bits per second;
// InvalidArgument naming `flag` otherwise.
absl::StatusOr<int64_t> ParseBitRate(const std::string& text, const std::string& flag);

class PodSandbox {
 public:
  ~PodSandbox();  // stops the holder, then removes the network namespace
  PodSandbox(const PodSandbox&) = delete;
  PodSandbox& operator=(const PodSandbox&) = delete;

  const std::string& ip() const { return sandbox_->ip(); }
  const std::string& netns() const { return sandbox_->netns(); }
  bool holding() const { return holder_ != nullptr; }
  // Starts the holder: hostname, private /tmp, /dev/shm, /run, `hosts_file` on /etc/hosts
  // (which must exist; keep it current by rewriting it in place) and a copy of `resolv_conf` on
  // /etc/resolv.conf. Waits until it is ready.
  absl::Status Hold(const std::string& hostname, const std::string& hosts_file,
                    const std::string& resolv_conf);
  // An oci container's image root file system and user (localkube-pod-init exec --rootfs, --user).
  struct ImageRoot {
    std::string rootfs;  // on the host
    int64_t uid = 0, gid = 0;
  };
  // `options` (argv, env) run inside the pod with `mounts`; `working_dir` empty: this program's
  // (with `image`: the image root's /). With `image` the container's root is the image's.
  ProcessOptions Wrap(ProcessOptions options, const std::vector<ContainerMount>& mounts,
                      const ImageRoot* image = nullptr) const;

  // Leaves the namespace and veth to the network's own removal (~PodNetwork), which removes
  // every sandbox in one go: for a kubelet that stops.
  void LeaveToNetworkTeardown() { network_teardown_ = true; }

 private:
  friend class PodNetwork;
  PodSandbox() = default;

  sandbox::Network* network_ = nullptr;
  const sandbox::Sandbox* sandbox_ = nullptr;
  std::string pod_init_;
  std::unique_ptr<Process> holder_;
  bool network_teardown_ = false;
};

class PodNetwork {
 public:
  // Null (with the log line) for host mode or an "auto" that fell back; FailedPrecondition for a
  // "sandbox" that cannot work; InvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<PodNetwork>> Create(const PodNetworkOptions& options);

  int nodes() const { return network_->nodes(); }
  std::string node_gateway(int node) const { return network_->node_gateway(node); }
  const std::string& prefix() const { return network_->prefix(); }
  sandbox::Network* network() { return network_.get(); }
  // A network namespace for the pod `uid` on `node` (clamped to the nodes there are).
  absl::StatusOr<std::unique_ptr<PodSandbox>> AddPod(int node, const std::string& uid);

 private:
  PodNetwork() = default;
  std::unique_ptr<sandbox::Network> network_;
  std::string pod_init_;
};

}  // namespace kubetrain::localkube
