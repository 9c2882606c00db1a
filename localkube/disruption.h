// PodDisruptionBudgets and the Eviction subresource, as kube-controller-manager's disruption
// controller and kube-apiserver's pods/eviction handler treat them.
//
// Status (DisruptionBudgetStatus): the matching pods (spec.selector; nil matches none, {} all),
// expectedPods (the pod count for an integer minAvailable, else the replicas of the pods'
// controllers: ReplicaSet, Deployment through its ReplicaSet, StatefulSet), desiredHealthy
// (minAvailable, percentages rounded up, or expectedPods - maxUnavailable), currentHealthy
// (Ready pods not being deleted and not in status.disruptedPods) and disruptionsAllowed
// (currentHealthy - desiredHealthy, at least 0). Pods with no scalable controller under a
// percentage or maxUnavailable budget fail the sync as the controller's does: 0 disruptions,
// condition DisruptionAllowed False with reason SyncFailed.
//
// Eviction (EvictPod): POST pods/NAME/eviction with a policy/v1 or v1beta1 Eviction. A pod that
// is Pending, Succeeded, Failed or already being deleted is deleted without looking at budgets.
// Otherwise the one budget selecting the pod (more than one: 500) must allow a disruption: its
// status is computed afresh, the disruption counted (disruptionsAllowed - 1, the pod in
// disruptedPods) in the same write, then the pod gets the DisruptionTarget condition and is
// deleted with the Eviction's deleteOptions. Not allowed: 429 TooManyRequests "Cannot evict pod
// as it would violate the pod's disruption budget." with a DisruptionBudget cause. A not-Ready
// pod is evicted without counting when the budget is already met (IfHealthyBudget).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "localkube/api.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

inline constexpr char kPdbsKey[] = "policy/poddisruptionbudgets";

// Whether a metav1.LabelSelector (matchLabels, matchExpressions) selects `labels`; a null
// selector selects nothing, an empty one everything.
bool LabelSelectorMatches(const nlohmann::json& selector, const nlohmann::json& labels);

// A pod's Ready condition is True.
bool PodReady(const nlohmann::json& pod);

// The status the disruption controller would write for `pdb` now (keeps the status's
// disruptedPods that still stand: pods present, not deleting, disrupted under 2 minutes ago).
nlohmann::json DisruptionBudgetStatus(const Store& store, const nlohmann::json& pdb,
                                      absl::Time now);

// The pods/eviction subresource: `eviction` is the request body; the answer is the Status for
// 201 Created. `dry_run` is the request's dryRun parameter.
absl::StatusOr<nlohmann::json> EvictPod(Api* api, const std::string& ns, const std::string& name,
                                        const nlohmann::json& eviction, bool dry_run);

}  // namespace kubetrain::localkube
