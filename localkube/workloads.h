// The workload controllers of kube-controller-manager that localkube runs with its kubelet
// (`--run-pods`): the Deployment controller (a ReplicaSet per pod template, named
// `<deployment>-<pod-template-hash>`; the new one scaled to spec.replicas and the old ones to 0
// at once, a rollout that kills the old pods as the new ones start; status with observedGeneration,
// the replica counts and the Available/Progressing conditions `kubectl rollout status` and
// `helm install --wait` read; old ReplicaSets pruned beyond revisionHistoryLimit) and the
// ReplicaSet controller (pods `<replicaset>-<5 random>` from spec.template, owned by the
// ReplicaSet, replaced when deleted or terminated, created or deleted to match spec.replicas; at
// most kMaxPodWritesPerSync creations per pass). Deleting a Deployment removes its ReplicaSets
// and pods through the ownerReference garbage collector.
//
// Owns one thread that wakes on every store change (and at least every `resync`) and makes one
// pass over every Deployment and ReplicaSet. Writes go through Api, so admission, watches and
// managedFields (manager `kube-controller-manager`) see them as they see a real controller's.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "localkube/api.h"

namespace kubetrain::localkube {

// The pod-template-hash of a Deployment's spec.template, as the controller labels its ReplicaSet
// and pods: FNV-32a of the template, its decimal form written in the apiserver's safe alphabet.
std::string PodTemplateHash(const nlohmann::json& pod_template);

class WorkloadControllers {
 public:
  static constexpr int kMaxPodWritesPerSync = 100;

  explicit WorkloadControllers(Api* api, absl::Duration resync = absl::Seconds(1));
  ~WorkloadControllers();
  WorkloadControllers(const WorkloadControllers&) = delete;
  WorkloadControllers& operator=(const WorkloadControllers&) = delete;

  void Start();
  // Returns within about 250 ms plus the pass in progress.
  void Stop();

  // One pass over every Deployment and ReplicaSet (the thread's work; tests call it directly).
  void SyncOnce();

 private:
  void Loop();
  // Creates or scales the Deployment's ReplicaSets.
  void SyncDeployment(const nlohmann::json& deployment);
  // Creates, replaces and deletes the ReplicaSet's pods and writes its status.
  void SyncReplicaSet(const nlohmann::json& replicaset,
                      const std::multimap<std::string, nlohmann::json>& pods_by_owner);
  void UpdateDeploymentStatus(const nlohmann::json& deployment);
  // Rewrites the status of the object at (storage_key, ns, name) unless it is no longer the one
  // `uid` names: `update` edits a copy of its status (an empty object when it has none) with the
  // live object at hand, and nothing is written when that leaves the status as it was.
  void UpdateStatus(
      const char* storage_key, const std::string& ns, const std::string& name,
      const std::string& uid,
      const std::function<void(const nlohmann::json& object, nlohmann::json& status)>& update);

  Api* api_;
  absl::Duration resync_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  // Why the last pod creation of a ReplicaSet (by uid) failed; cleared once one succeeds.
  std::map<std::string, std::string> create_failures_;
  // Deployments (by uid) whose new ReplicaSet was just created: Progressing says so.
  std::map<std::string, std::string> created_replicasets_;
};

}  // namespace kubetrain::localkube
