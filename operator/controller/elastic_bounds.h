// The last valid spec.elastic of an elastic TrainingJob, kept in an annotation beside the restart
// ledger (restart_ledger.h): an edit that makes the bounds invalid (minReplicas above
// maxReplicas, a bound out of range, a backupWorkers the new minimum cannot carry) is refused:
// the job runs on within the bounds it had, with the EditRefused condition and a Warning event
// saying why, instead of failing while its pods train on (docs/architecture.md §10).
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"
#include "operator/api/types.h"

namespace kubetrain::controller {

// {"minReplicas":1,"maxReplicas":4}: the bounds of the job's last pass that validated.
inline constexpr char kElasticBoundsAnnotation[] = "kubetrain.dev/elastic-bounds";
// A condition True while an edit of the spec is refused; its reason says which.
inline constexpr char kEditRefused[] = "EditRefused";

// The annotation's value for a valid `job`: its bounds, or "" when it is not elastic (the
// annotation is then removed).
std::string ElasticBoundsAnnotation(const api::TrainingJob& job);

// When every error in `errors` is about spec.elastic (or about Worker replicas or
// backupWorkers against it) and `object` remembers valid bounds: a copy of `object` with those
// bounds put back, for decoding again. nullopt otherwise.
std::optional<nlohmann::json> WithRememberedBounds(const nlohmann::json& object,
                                                   const api::FieldErrors& errors);

}  // namespace kubetrain::controller
