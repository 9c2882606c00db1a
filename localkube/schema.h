// Structural-schema handling for custom resources, in the apiserver's order: prune unknown
// fields, apply defaults, validate. Pure functions over nlohmann::json.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "localkube/errors.h"

namespace kubetrain::localkube {

struct SchemaOutcome {
  std::vector<std::string> unknown_fields;  // pruned paths, e.g. "spec.foo"
  std::vector<Cause> causes;                // validation failures
};

// Normalises `object` (a whole custom resource) against its openAPIV3Schema in place.
// apiVersion, kind and metadata are implicit and left alone.
SchemaOutcome ApplySchema(const nlohmann::json& schema, nlohmann::json* object);

// The pieces, exposed for tests. `path` is the field path of `value` ("" at the root).
void Prune(const nlohmann::json& schema, nlohmann::json* value, const std::string& path,
           std::vector<std::string>* pruned);
void ApplyDefaults(const nlohmann::json& schema, nlohmann::json* value);
void Validate(const nlohmann::json& schema, const nlohmann::json& value, const std::string& path,
              std::vector<Cause>* causes);

}  // namespace kubetrain::localkube
