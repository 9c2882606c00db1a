// YAML <-> JSON for manifests. Plain scalars resolve the way kubectl's YAML reader does
// (sigs.k8s.io/yaml, YAML 1.1 booleans included), so a file means the same here and in kubectl.
//
// Reading is defensive, because manifests come from users: the text must be UTF-8 without
// control characters, nesting is bounded, aliases may not expand a document beyond a node
// budget ("billion laughs"), and a key set twice in one map is an error, as in kubectl's strict
// decoding. Every refusal names the line (and the field path where there is one).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::api {

// Maps and lists may nest at most this deep (a TrainingJob needs about 15).
inline constexpr int kMaxNestingDepth = 100;
// Nodes that aliases may add to one document, counted with everything they copy.
inline constexpr size_t kMaxAliasNodes = 100'000;
// Nodes of every kind one document may hold. yaml-cpp can loop on some malformed input, emitting
// nodes without end; this ends that as well as absurdly large manifests.
inline constexpr size_t kMaxDocumentNodes = 1'000'000;
// Largest manifest file read; the API server itself takes at most 3 MiB per object.
inline constexpr size_t kMaxManifestBytes = 16 << 20;

// Every non-empty document of a (multi-document) YAML stream, as JSON. Errors carry the line and
// column of the problem.
absl::StatusOr<std::vector<nlohmann::json>> ParseYamlDocuments(absl::string_view text);

// Block-style YAML for a JSON value; strings that would read back as another type are quoted.
std::string ToYaml(const nlohmann::json& value);

// Reads a whole file (or "-" for stdin) of at most kMaxManifestBytes; errors name the path.
absl::StatusOr<std::string> ReadFileOrStdin(const std::string& path);

// Offset of the first byte of `s` that is not part of valid UTF-8 (overlong forms, surrogates
// and code points above U+10FFFF included), or npos when all of it is valid.
size_t InvalidUtf8Offset(absl::string_view s);

// Checks a JSON value from outside (a parsed request, a programmatically built object): nesting
// at most kMaxNestingDepth and every key and string valid UTF-8. The error names the field path.
// Iterative, so a hostile depth cannot exhaust the stack.
absl::Status CheckJsonShape(const nlohmann::json& value);

}  // namespace kubetrain::api
