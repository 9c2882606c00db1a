// Validation of a decoded, defaulted TrainingJob. Returns every problem, not just the first,
// each naming the field, the bad value and what is allowed.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "operator/api/field_errors.h"
#include "operator/api/types.h"

namespace kubetrain::api {

inline constexpr int kMaxLabelLength = 63;
// Pods of one replica type; the CRD's maximum. Far beyond it TF_CONFIG alone would be too large.
inline constexpr int kMaxReplicas = 1000;
// Largest TF_CONFIG a job may give its tasks: below the kernel's 128 KiB limit on one
// environment string, with room for a cluster-domain suffix.
inline constexpr size_t kMaxTfConfigSize = 120 * 1024;

// Semantic checks on a job that SetDefaults has seen.
FieldErrors Validate(const TrainingJob& job);

// The whole pipeline a user's manifest goes through: decode (type errors, unknown fields), set
// defaults, validate. The returned job is defaulted; it is only usable when errors is empty.
// With `clamped` (the operator), an elastic job's Worker replicas outside its bounds are moved
// to the nearest bound (ClampElasticReplicas) and reported there instead of in `errors`.
TrainingJob DecodeAndValidate(const nlohmann::json& doc, FieldErrors* errors,
                              FieldErrors* clamped = nullptr);

// `kubectl scale` sets spec.replicaSpecs.Worker.replicas alone, and the CRD cannot bound one
// field by another: the operator keeps an elastic job whose Worker replicas left
// [spec.elastic.minReplicas, maxReplicas] at the nearest bound rather than fail it
// (docs/architecture.md §10). Returns what was out of bounds, or nullopt when nothing moved
// (not elastic, invalid bounds, or within them).
std::optional<FieldError> ClampElasticReplicas(TrainingJob* job);

// The size of the largest TF_CONFIG among the job's tasks under cluster DNS addresses. The job
// must be defaulted and hold at most kMaxReplicas per type.
size_t LargestTfConfigSize(const TrainingJob& job);

// RFC 1035 label: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters (Service and pod host names).
bool IsDns1035Label(absl::string_view s);
// RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters (namespaces).
bool IsDns1123Label(absl::string_view s);

}  // namespace kubetrain::api
