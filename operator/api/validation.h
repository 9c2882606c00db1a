// Validation of a decoded, defaulted TrainingJob. Returns every problem, not just the first,
// each naming the field, the bad value and what is allowed.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"
#include "operator/api/field_errors.h"
#include "operator/api/types.h"

namespace kubetrain::api {

inline constexpr int kMaxLabelLength = 63;

// Semantic checks on a job that SetDefaults has seen.
FieldErrors Validate(const TrainingJob& job);

// The whole pipeline a user's manifest goes through: decode (type errors, unknown fields), set
// defaults, validate. The returned job is defaulted; it is only usable when errors is empty.
TrainingJob DecodeAndValidate(const nlohmann::json& doc, FieldErrors* errors);

// RFC 1035 label: [a-z]([-a-z0-9]*[a-z0-9])?, at most 63 characters (Service and pod host names).
bool IsDns1035Label(absl::string_view s);
// RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters (namespaces).
bool IsDns1123Label(absl::string_view s);

}  // namespace kubetrain::api
