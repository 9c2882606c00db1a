// How yaml.cc reads a YAML scalar's type: plain scalars resolve as kubectl's YAML reader
// (sigs.k8s.io/yaml) resolves them, YAML 1.1 booleans included. Internal to operator/api: the
// reader (ParseYamlDocuments) and the writer (ToYaml, which quotes a string that would read back
// as another type) share it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"

namespace kubetrain::api {

// YAML's infinities and not-a-numbers (.inf, -.Inf, .NaN, ...): floats JSON cannot hold.
bool IsSpecialFloat(absl::string_view s);

// Resolves an untagged plain scalar: null, bool, int, float, or else string. A number too large
// for int64/uint64 reads as a float, and one too large for a double stays a string, as in
// kubectl (a JSON document cannot hold infinity). Special floats never get here (OnScalar
// refuses them).
nlohmann::json ResolvePlain(const std::string& s);

// A scalar with its tag ("?" untagged plain, "!" quoted, or an explicit yaml.org tag) as JSON.
nlohmann::json ScalarToJson(const std::string& tag, const std::string& s);

}  // namespace kubetrain::api
