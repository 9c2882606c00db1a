// YAML <-> JSON for manifests. Plain scalars resolve the way kubectl's YAML reader does
// (sigs.k8s.io/yaml, YAML 1.1 booleans included), so a file means the same here and in kubectl.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::api {

// Every non-empty document of a (multi-document) YAML stream, as JSON. Errors carry the line and
// column of the syntax problem.
absl::StatusOr<std::vector<nlohmann::json>> ParseYamlDocuments(absl::string_view text);

// Block-style YAML for a JSON value; strings that would read back as another type are quoted.
std::string ToYaml(const nlohmann::json& value);

// Reads a whole file (or "-" for stdin); errors name the path.
absl::StatusOr<std::string> ReadFileOrStdin(const std::string& path);

}  // namespace kubetrain::api
