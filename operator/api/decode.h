// TrainingJob <-> JSON. Decoding is strict about the spec (wrong types and unknown fields are
// errors naming the field, so a typo is never silently ignored) and lenient about status, which
// only the operator writes.
#pragma once

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"
#include "operator/api/types.h"

namespace kubetrain::api {

// Decodes what it can and appends a FieldError for everything it cannot.
TrainingJob Decode(const nlohmann::json& doc, FieldErrors* errors);

// The full object: apiVersion, kind, metadata (unmodelled fields kept), spec (pod templates kept
// verbatim), status. Unset optional fields are omitted.
nlohmann::json ToJson(const TrainingJob& job);
nlohmann::json ToJson(const TrainingJobSpec& spec);
nlohmann::json ToJson(const TrainingJobStatus& status);

// obj[key] when obj is an object holding a string there, else `fallback`. Unlike json::value it
// never throws, so a field of the wrong type cannot abort the program that reads it.
std::string StringField(const nlohmann::json& obj, const char* key, std::string fallback = "");

// Formats a JSON value for an error message: strings quoted, everything else as compact JSON.
std::string Describe(const nlohmann::json& value);

}  // namespace kubetrain::api
