// The Kubernetes protobuf encoding of request bodies ("application/vnd.kubernetes.protobuf"):
// client-go's typed clients write every built-in kind that way (`kubectl create role|
// rolebinding|deployment|job|service|token ...`, DeleteOptions) and do not fall back to JSON.
// Decodes the body to the object's JSON form by the schema in protobuf_schema.h, so the rest
// of localkube sees what a JSON client would have sent. Unknown fields are skipped, as proto
// skips them; a malformed body is refused, naming where it is wrong.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::localkube {

// Limits on what one body may make of the decoder: nested messages, and values written
// (an empty repeated message costs 2 bytes on the wire and a JSON object in memory).
inline constexpr int kMaxProtobufDepth = 64;
inline constexpr size_t kMaxProtobufValues = 1 << 20;

// `body` is the whole request body ("k8s\0" magic + runtime.Unknown). Unimplemented for a kind
// it has no schema for (the server answers 415); InvalidArgument, naming the field path and
// the fault, for a malformed body.
absl::StatusOr<nlohmann::json> DecodeK8sProtobuf(absl::string_view body);

// The envelope's apiVersion and kind, without decoding the object; InvalidArgument when the
// body is not a "k8s\0" envelope.
struct ProtobufType {
  std::string api_version;
  std::string kind;
};
absl::StatusOr<ProtobufType> PeekK8sProtobuf(absl::string_view body);

// Whether DecodeK8sProtobuf has a schema for what `body` holds (false for a kind it does not
// know; true for a malformed envelope, which decoding then refuses with 400).
bool K8sProtobufDecodable(absl::string_view body);

}  // namespace kubetrain::localkube
