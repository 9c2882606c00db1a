// Defaulting: fills every optional field with its documented default, the way the operator and
// `kubetrain run` see a job. Idempotent.
#pragma once

#include "operator/api/types.h"

namespace kubetrain::api {

// restartPolicy default per role: Chief and Worker ExitCode (1-127 is a bug: fail fast; 128+ is
// a kill: retry), PS and Evaluator OnFailure (they hold no progress of their own).
RestartPolicy DefaultRestartPolicy(ReplicaType type);

void SetDefaults(TrainingJob* job);

// A pod template's spec.containers; null when it is not a list.
const nlohmann::json* Containers(const nlohmann::json& pod_template);
nlohmann::json* Containers(nlohmann::json* pod_template);

// The training container of a pod template: the one named "kubetrain" (nullptr if none).
const nlohmann::json* TrainingContainer(const nlohmann::json& pod_template);
nlohmann::json* TrainingContainer(nlohmann::json* pod_template);

}  // namespace kubetrain::api
