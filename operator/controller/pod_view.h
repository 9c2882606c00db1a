// What the operator needs to know about one of its pods, read from the pod object.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/types.h"

namespace kubetrain::controller {

struct PodView {
  std::string name;
  std::string uid;
  std::string phase;  // Pending, Running, Succeeded, Failed, Unknown
  bool deleting = false;
  api::ReplicaType type = api::ReplicaType::kWorker;
  int index = 0;
  std::string pod_ip;
  // The training container's exit code once it terminated; a pod that failed without one
  // (evicted, lost node) has none and is treated as killed.
  std::optional<int> exit_code;
  std::string reason;  // pod or container termination reason (OOMKilled, Evicted, ...)
  // What the training container left in its termination log (terminationMessagePath, by
  // default /dev/termination-log) when it ended: the chief writes its final summary there.
  std::string termination_message;
  // Why the pod was taken away rather than ending on its own: its DisruptionTarget condition's
  // reason (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager,
  // TerminationByKubelet), else an eviction or preemption reason of the pod (Evicted,
  // Preempting, Preempted, Shutdown, Terminated, NodeLost); empty when it was not disrupted.
  std::string disruption;
};

// nullopt when the pod lacks the kubetrain replica labels.
std::optional<PodView> ViewPod(const nlohmann::json& pod);

// The operator's pod informer transform (kube::InformerOptions::transform): kube::StripForCache,
// then only what the reconciler reads stays: metadata; status phase, podIP, reason, a
// DisruptionTarget condition and each container status's name, state and lastState; each
// container's name and its TF_CONFIG variable (Reconciler::RestartOnClusterChange compares it). A
// pod's spec is most of its size: 20,000 pods in the cache are then about a third of the memory.
void StripPodForCache(nlohmann::json& pod);

// The exit code a failed pod is judged by: its container's, else 137 (killed: eviction, node
// loss, preemption are retryable under every restart policy but Never).
int EffectiveExitCode(const PodView& pod);

}  // namespace kubetrain::controller
