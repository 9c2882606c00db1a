// spec.runPolicy.managedBy: whether a job is this operator's to reconcile (api::
// ManagedByThisOperator). Under Kueue's MultiKueue the manager cluster's copy of a job names
// kueue.x-k8s.io/multikueue and a worker cluster runs it: this operator, like Kubeflow's, leaves
// such a job alone: no pods, Services or Secret, and no status write.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace kubetrain::controller {

// The managedBy value of `job` (a TrainingJob, or a TFJob when `tfjob`) when it names another
// controller; nullopt when the job is this operator's. Read from the object as stored, before
// any decoding, so a job left to another controller is not judged here either.
std::optional<std::string> ManagedElsewhere(const nlohmann::json& job, bool tfjob);

}  // namespace kubetrain::controller
