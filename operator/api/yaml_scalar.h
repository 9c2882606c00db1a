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

// A plain scalar in YAML's integer or float grammar that no double holds (a 400-digit integer,
// 1e999). kubectl's reader would keep it as text, so a field that wants a string took a number
// that only a shorter one would have been refused for: the reader refuses it (quote it to mean
// the text), and the writer quotes such a text.
bool IsNumberBeyondDouble(absl::string_view s);

// Resolves an untagged plain scalar: null, bool, int, float, or else string. A number too large
// for int64/uint64 reads as a float. Special floats and numbers beyond a double never get here
// (OnScalar refuses them); given one, it returns the text.
nlohmann::json ResolvePlain(const std::string& s);

// Whether a scalar of this tag is resolved by the grammars above (untagged plain, or an explicit
// !!int, !!float, !!bool or !!null) rather than taken as text (quoted, !!str, other tags).
bool IsResolvedTag(const std::string& tag);

// A scalar with its tag ("?" untagged plain, "!" quoted, or an explicit yaml.org tag) as JSON.
nlohmann::json ScalarToJson(const std::string& tag, const std::string& s);

}  // namespace kubetrain::api
