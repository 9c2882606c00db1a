// What localkube's Deployment and ReplicaSet controllers (workloads.h) read from and write into
// objects: the storage keys and names they use, controller ownerReferences, revisions, pod
// readiness and status conditions as kube-controller-manager computes them. Internal to the
// localkube library. Pure functions.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"

namespace kubetrain::localkube {

inline constexpr char kDeploymentsKey[] = "apps/deployments";
inline constexpr char kReplicaSetsKey[] = "apps/replicasets";
inline constexpr char kPodsStorageKey[] = "/pods";
inline constexpr char kPodTemplateHashLabel[] = "pod-template-hash";
inline constexpr char kRevisionAnnotation[] = "deployment.kubernetes.io/revision";
// The field manager of the controllers' writes.
inline constexpr char kControllerManager[] = "kube-controller-manager";

// object[key] when it is an integer, else `fallback`.
int64_t IntField(const nlohmann::json& object, const char* key, int64_t fallback);

// The uid of the object's controller (the ownerReference with controller: true), or "".
std::string ControllerUid(const nlohmann::json& object);

// An ownerReferences list naming `owner` (an apps/v1 `kind`) as controller, blocking its deletion.
nlohmann::json ControllerRef(const nlohmann::json& owner, const std::string& kind);

// The ReplicaSet's deployment.kubernetes.io/revision, 0 when unset.
int64_t ReplicaSetRevision(const nlohmann::json& replicaset);

// Neither being deleted nor ended (Succeeded or Failed).
bool PodActive(const nlohmann::json& pod);

// Whether the pod's Ready condition is True, and (`since`, may be null) when it last changed.
bool PodReady(const nlohmann::json& pod, absl::Time* since);

// Ready for at least minReadySeconds.
bool PodAvailable(const nlohmann::json& pod, int64_t min_ready_seconds, absl::Time now);

// A condition list with `type` set to `condition`, keeping lastTransitionTime while the status
// holds and lastUpdateTime while nothing changes.
void SetCondition(nlohmann::json* conditions, nlohmann::json condition, const std::string& now);

void RemoveCondition(nlohmann::json* conditions, const std::string& type);

}  // namespace kubetrain::localkube
