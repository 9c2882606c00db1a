// A kubelet that runs pods on this host: runs each pod in a sandbox (pod_sandbox.h: its own
// network namespace on its node's bridge, mount, IPC and UTS namespaces) or, in host network
// mode, gives it a loopback IP (from this instance's own 127.X.Y.0/24 block); writes each pod's
// /etc/hosts (pod_hosts.h: its names and the cluster DNS names localkube emulates), materializes
// the pod's volumes (volumes.h), starts each container through a runtime (container_process.h:
// `process` runs the command as a local process, oci_runtime.h runs it from its image) with
// Kubernetes' env and
// $(VAR) rules, captures logs, reports phase and container states (Waiting with the kubelet's
// reasons when a container cannot start), applies restartPolicy with backoff, and stops
// containers on deletion (SIGTERM, then SIGKILL after the grace period).
//
// Owns every pod process. One internal thread drives all state; the LogSource methods are
// thread-safe (guarded by a mutex). Stop (or destruction) kills every child.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "localkube/api.h"
#include "localkube/cluster_dns.h"
#include "localkube/container_process.h"
#include "localkube/logs.h"
#include "localkube/oci_runtime.h"
#include "localkube/pod_sandbox.h"
#include "localkube/volumes.h"

namespace kubetrain::localkube {

struct KubeletOptions {
  // The nodes this kubelet runs pods for, in index order (node-1 .. node-N): a pod is admitted
  // once its spec.nodeName names one of them. Empty: every pod, bound or not (a kubelet
  // without nodes, as tests that drive it alone use).
  std::vector<std::string> node_names;
  // Every pod's names (pod_hosts.h, as a pod outside every namespace sees them), rewritten on
  // every change, for the host's own tools; empty: none. Pods read their own /etc/hosts.
  std::string hosts_file;
  std::string log_dir;  // container logs: <log_dir>/<ns>_<pod>_<uid>/<container>.<run>.log
  // (image prefix, directory): command[0] is looked up in the directory first, and with no
  // command the image's last path element (without tag) is the binary.
  std::vector<std::pair<std::string, std::string>> image_map;
  absl::Duration max_backoff = absl::Seconds(10);
  // "process" (run each container's command on this host) or "oci" (run it from its image with
  // buildah; see oci_runtime.h).
  std::string runtime = "process";
  OciRuntimeOptions oci;  // for runtime "oci"
  // Issues the tokens of serviceAccountToken projections (projected volumes); an error is a
  // FailedMount (the pod stays ContainerCreating, retried). Unset: token files are left out.
  ServiceAccountTokenFunc service_account_token;
  // Pod sandboxes (pod_sandbox.h): mode host, sandbox or auto; one node per node_names entry
  // (node i is sandbox node i; pods without spec.nodeName run on node 0), each uplink shaped to
  // the rate when given. Both runtimes run pods in them (oci: the image's root in the sandbox).
  PodNetworkOptions pod_network;
};

class Kubelet : public LogSource {
 public:
  Kubelet(KubeletOptions options, Api* api);
  ~Kubelet() override;

  // InvalidArgument for a runtime other than process or oci; FailedPrecondition when the oci
  // runtime cannot work here (not root, no buildah).
  static absl::Status CheckOptions(const KubeletOptions& options);

  // The API server's address, for KUBERNETES_SERVICE_HOST/PORT and KUBERNETES_PORT*: the
  // `kubernetes` Service of a real cluster. Call before Start; without it only
  // KUBERNETES_SERVICE_HOST (127.0.0.1) is set.
  void SetApiServer(const std::string& host, int port);

  void Start();
  void Stop();

  // Why the pod network asked for cannot work (pod_network.mode "sandbox"); OK otherwise.
  const absl::Status& pod_network_status() const { return pod_network_status_; }
  // The pod network, or null when pods share the host's network.
  PodNetwork* pod_network() { return network_.get(); }

  // A node as its machine, kubelet and link are (node_faults.h): kUp; kPartitioned, its link cut:
  // its containers run on and restart by policy, but the kubelet reaches no API server (it
  // reports nothing and learns nothing new); kDown, the machine off: every container of its pods
  // is killed and nothing runs or is reported. Back to kUp, the kubelet resyncs from a full list,
  // as a kubelet that reconnects or restarts does: pods deleted meanwhile are stopped, the others
  // report (and a down node's containers start again by their restartPolicy).
  enum class NodeState { kUp, kPartitioned, kDown };
  // NotFound for a node that is not one of node_names.
  absl::Status SetNodeState(const std::string& node, NodeState state);

  // The loopback /24 this kubelet's pod IPs come from, e.g. "127.83.4.0/24".
  std::string ip_block() const;

  absl::StatusOr<std::string> LogPath(const std::string& ns, const std::string& pod,
                                      const std::string& container, bool previous) override;
  bool Running(const std::string& ns, const std::string& pod,
               const std::string& container) override;

  // Kubernetes' $(VAR) expansion: known names substituted, $$ escapes, others left as written.
  static std::string Expand(const std::string& text,
                            const std::map<std::string, std::string>& vars);

 private:
  struct Container {
    std::string name;
    nlohmann::json spec;
    std::unique_ptr<RunningContainer> process;
    std::string container_id;  // of the latest run
    int run = 0;               // log file index; restartCount = run - 1
    std::string started_at, finished_at;
    int exit_code = 0;
    bool terminated = false;
    bool exec_failed = false;
    std::string failure_message;  // a StartError's
    // Set while the container waits to be (re)started: ContainerCreating (volumes),
    // ErrImageNeverPull, CreateContainerConfigError, ...; retried at restart_at.
    std::string waiting_reason, waiting_message;
    nlohmann::json last_state = nlohmann::json::object();
    absl::Time restart_at = absl::InfiniteFuture();
    absl::Duration backoff = absl::Seconds(1);
  };
  struct Pod {
    // First, so destroyed last: the namespaces outlive the containers in them.
    std::unique_ptr<PodSandbox> sandbox;
    int node = 0;
    std::string host_ip, api_host;
    std::string hosts_text;  // what its /etc/hosts holds
    std::string ns, name, uid, ip;
    nlohmann::json object;
    std::vector<Container> containers;
    std::string dir;
    bool terminating = false;
    absl::Time kill_at = absl::InfiniteFuture();
    std::string start_time;
    bool volumes_ready = false;
    absl::Time mount_retry_at = absl::InfinitePast();
    absl::Duration mount_backoff = absl::Seconds(1);
    std::map<std::string, PodVolume> volumes;
    std::map<std::string, std::string> events;  // "reason\nmessage" -> Event name
  };

  void Loop();
  void Sync();
  // With mu_ held: whether the kubelet of node index `node` reaches the API server.
  bool Connected(int node) const {
    return node_state_.empty() || node_state_[static_cast<size_t>(node)] == NodeState::kUp;
  }
  void Admit(const nlohmann::json& pod);
  void StartContainer(Pod& pod, Container& c);
  bool MountVolumes(Pod& pod);
  // The pod's sandbox (network namespace and holder), with mu_ held; false (FailedCreatePodSandBox
  // event, retried with the volumes' backoff) when it cannot be made.
  bool SetUpSandbox(Pod& pod);
  int NodeIndex(const nlohmann::json& pod) const;
  void Wait(Pod& pod, Container& c, const std::string& reason, const std::string& message);
  void RecordEvent(Pod& pod, const std::string& type, const std::string& reason,
                   const std::string& message);
  // The container's volumeMounts as host paths, or the CreateContainerConfigError message.
  std::string Mounts(const Pod& pod, const Container& c, std::vector<ContainerMount>* out) const;
  void BeginTermination(Pod& pod, int64_t grace_seconds);
  void Tick(Pod& pod);
  void PublishStatus(Pod& pod);
  void WriteHosts();
  void WriteHostsLocked();  // with mu_ held
  void StartClusterDns();
  absl::Status WriteResolvConf(const Pod& pod) const;  // its dir's resolv.conf
  // What the kubelet sets (the runtime adds its base environment); `error` gets a
  // CreateContainerConfigError message (a missing ConfigMap/Secret or key that is not optional).
  std::map<std::string, std::string> Environment(const Pod& pod, const Container& c,
                                                 std::map<std::string, std::string>* vars,
                                                 std::string* error) const;
  void ReserveIpBlock();
  std::string AllocateIp();  // with mu_ held
  static std::string Key(const std::string& ns, const std::string& name) { return ns + "/" + name; }

  KubeletOptions options_;
  Api* api_;
  std::unique_ptr<ContainerRuntime> runtime_;
  std::string api_host_ = "127.0.0.1";
  int api_port_ = 0;
  std::thread thread_;
  bool stop_ = false;
  mutable std::mutex mu_;  // guards pods_ and stop_
  std::map<std::string, std::unique_ptr<Pod>> pods_;
  // Pods of a cut-off or stopped node whose name the API server has since given to a new pod on
  // another node (the old one force-deleted): that node's kubelet never heard, so they run on
  // (partitioned) or lie dead (down) until their node is back, then stop (mu_).
  std::vector<std::unique_ptr<Pod>> superseded_;
  int64_t cursor_ = 0;
  std::vector<NodeState> node_state_;  // by node index (node_names); guarded by mu_
  bool resync_ = false;                // a node came back: list everything again (mu_)
  std::string hosts_text_;  // the cluster-wide names WriteHosts last gave hosts_file and dns_
  std::unique_ptr<PodNetwork> network_;  // outlives pods_ (Stop clears them first)
  // With network_: the cluster DNS on the nodes' bridge addresses; null if it could not listen
  // (pods' resolv.conf then names no server that answers).
  std::unique_ptr<ClusterDns> dns_;
  size_t dns_pods_ = 0;  // pods with an IP in dns_'s table (mu_)
  absl::Status pod_network_status_;
  int next_ip_ = 0;
  int block_x_ = 0, block_y_ = 0;  // pods get 127.<x>.<y>.1-254
  int block_lock_fd_ = -1;         // flock held on the block's file while we live
};

}  // namespace kubetrain::localkube
