// Internal to operator/api: validation of a replica's pod template (validation.h's Validate
// calls it per replica type): the operator owns restartPolicy, a training container named
// "kubetrain" is required, and the container fields read when pods are built and run (command,
// args, env, ports) have their types checked here, not found wrong by the kubelet later.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"

namespace kubetrain::api {

// Appends each problem of `pod_template`, found at `path` (spec.replicaSpecs.Worker.template),
// to `errors`. A null template (a wrong type the decoder reported) has none.
void ValidatePodTemplate(const nlohmann::json& pod_template, const std::string& path,
                         FieldErrors* errors);

}  // namespace kubetrain::api
