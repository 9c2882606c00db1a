// kube-controller-manager's node lifecycle, taint eviction and pod GC controllers, as far as
// node faults and drains need them:
//
// - Node health (node_lifecycle.cc): a Node whose heartbeat (its Lease `kube-node-lease/<node>`
//   renewTime, or its Ready condition's lastHeartbeatTime, whichever is later; its creation when
//   it never posted) is older than `monitor_grace_period` gets its Ready, MemoryPressure,
//   DiskPressure and PIDPressure conditions set to Unknown (reason NodeStatusUnknown, "Kubelet
//   stopped posting node status."; NodeStatusNeverUpdated, "Kubelet never posted node status." for
//   those it never posted). When its Ready condition leaves True, its pods' Ready condition is
//   set False (MarkPodsNotReady, event NodeNotReady) and the node gets a NodeNotReady event.
// - Node taints: Ready False -> node.kubernetes.io/not-ready, Ready Unknown ->
//   node.kubernetes.io/unreachable, each with effects NoSchedule and NoExecute;
//   spec.unschedulable -> node.kubernetes.io/unschedulable:NoSchedule; the pressure conditions
//   True -> their NoSchedule taints. Added taints carry timeAdded; they go when the condition
//   does. When every node is not Ready (the controller's "master disruption" mode) no NoExecute
//   taint is added and those present are removed, so that a whole-cluster outage evicts nothing.
// - Taint eviction (pod_eviction.cc): a pod on a node with NoExecute taints it does not tolerate
//   is deleted at once; one that tolerates them all with tolerationSeconds is deleted once the
//   smallest of them has passed since the taint's timeAdded; tolerating forever keeps it. The
//   delete is an ordinary graceful one, after the DisruptionTarget condition
//   (DeletionByTaintManager) and with an event TaintManagerEviction "Marking for deletion Pod
//   NS/NAME". With graceful pod deletion the pod then stays Terminating until its kubelet
//   finishes it, as on a real cluster with an unreachable node.
// - Pod GC (pod_eviction.cc): pods bound to a Node that has not existed for `orphan_quarantine`
//   are marked Failed (DisruptionTarget DeletionByPodGC) and force-deleted (grace 0);
//   terminating pods on a not-Ready node with the node.kubernetes.io/out-of-service NoExecute
//   taint are force-deleted.
//
// Owns one thread that waits on the store and makes a pass when Nodes, Leases or Pods changed,
// and otherwise only when a deadline comes due (a heartbeat outgrowing the grace period, a
// tolerationSeconds running out, a quarantine ending). Writes go through Api.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "localkube/api.h"

namespace kubetrain::localkube {

inline constexpr char kNodesKey[] = "/nodes";
inline constexpr char kLeasesKey[] = "coordination.k8s.io/leases";
inline constexpr char kNodeLeaseNamespace[] = "kube-node-lease";

struct NodeLifecycleOptions {
  // kube-controller-manager's --node-monitor-grace-period.
  absl::Duration monitor_grace_period = absl::Seconds(40);
  // How long PodGC waits after seeing a pod's Node missing before deleting the pod.
  absl::Duration orphan_quarantine = absl::Seconds(40);
  // The controller's clock (tests pass their own); null: absl::Now.
  std::function<absl::Time()> clock;
};

class NodeLifecycleController {
 public:
  explicit NodeLifecycleController(Api* api, NodeLifecycleOptions options = {});
  ~NodeLifecycleController();
  NodeLifecycleController(const NodeLifecycleController&) = delete;
  NodeLifecycleController& operator=(const NodeLifecycleController&) = delete;

  void Start();
  // Returns within about 250 ms plus the pass in progress.
  void Stop();

  // One pass over every Node and Pod (the thread's work; tests call it directly). Returns when
  // the next pass is due though nothing changes (InfiniteFuture: not until something does).
  absl::Time SyncOnce();

 private:
  void Loop();
  absl::Time Now() const { return options_.clock ? options_.clock() : absl::Now(); }
  // Node health for one node: the conditions set Unknown once its heartbeat is too old. Returns
  // the node as it stands and lowers `*next` to when its heartbeat will be too old.
  nlohmann::json MonitorHealth(nlohmann::json node, const nlohmann::json* lease, absl::Time now,
                               absl::Time* next);
  // The taints the controller manages, made what the node's conditions ask.
  void SyncTaints(const nlohmann::json& node, bool no_execute, absl::Time now);
  // MarkPodsNotReady for the pods on `node`.
  void MarkPodsNotReady(const std::string& node, absl::Time now);
  // Taint eviction of one pod on a node whose NoExecute taints are `taints`.
  void EvictForTaints(const nlohmann::json& pod, const nlohmann::json& taints, absl::Time now,
                      absl::Time* next);
  // PodGC for one pod, `node` its Node (null: none).
  void CollectPod(const nlohmann::json& pod, const nlohmann::json* node, absl::Time now,
                  absl::Time* next);
  // Sets the DisruptionTarget condition (and phase Failed when `fail`), then deletes.
  void DeletePod(const nlohmann::json& pod, const std::string& reason, const std::string& message,
                 bool fail, std::optional<int64_t> grace);
  void RecordEvent(const nlohmann::json& object, const std::string& type, const std::string& reason,
                   const std::string& message, const std::string& component);

  Api* api_;
  NodeLifecycleOptions options_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // The Ready status each node had at the last pass (MarkPodsNotReady acts on the change).
  std::map<std::string, std::string> observed_ready_;
  // Since when PodGC has seen each missing node named by a pod.
  std::map<std::string, absl::Time> missing_since_;
};

}  // namespace kubetrain::localkube
