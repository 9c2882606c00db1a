// Request-body decoding with the checks the apiserver's decoder makes before an object reaches
// admission: nesting depth (encoding/json's limit), UTF-8, the body's kind and apiVersion
// against the resource it is sent to, and the Go types of the fields every client reads
// (ObjectMeta, ConfigMap and Secret data). Every failure is a 400 BadRequest Status worded as
// kube-apiserver words it, so a bad body never reaches code that assumes a well-formed object.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "localkube/resources.h"

namespace kubetrain::localkube {

// encoding/json (and so every Kubernetes JSON decoder) refuses deeper documents.
inline constexpr int kMaxJsonDepth = 10000;

// Scans `body` without recursion. On failure the message is the decoder's own ("invalid
// character '{' exceeded max depth", "invalid UTF-8 ..."), for callers to wrap.
absl::Status CheckJsonText(absl::string_view body);
// UTF-8 only (YAML and protobuf bodies).
absl::Status CheckUtf8(absl::string_view body);

// Decodes a create/update body (JSON, YAML or Kubernetes protobuf by `content_type`) for
// `type`. `registry` tells a kind served elsewhere from one nobody serves.
absl::StatusOr<nlohmann::json> DecodeObject(const ResourceType& type, const Registry& registry,
                                            absl::string_view content_type,
                                            const std::string& body);

// Decodes a PATCH, DeleteOptions or other auxiliary JSON body; 400 with the decoder's message.
absl::StatusOr<nlohmann::json> DecodeJson(absl::string_view body);

// The Go-typed decoding of `object` as `type`: "json: cannot unmarshal number into Go struct
// field ObjectMeta.metadata.resourceVersion of type string" and the like (message only, as an
// InvalidArgument). Nulls are normalised the way Go decodes them (field left unset).
absl::Status CheckFieldTypes(const ResourceType& type, nlohmann::json* object);

}  // namespace kubetrain::localkube
