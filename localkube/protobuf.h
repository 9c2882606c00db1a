// Just enough of the Kubernetes protobuf encoding to accept the bodies kubectl's typed
// generators send (`kubectl create namespace|configmap|secret|serviceaccount`): client-go
// writes those as protobuf and does not fall back to JSON. Decodes to the JSON object.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::localkube {

// `body` is the whole request body ("k8s\0" magic + runtime.Unknown). Unimplemented for kinds
// it does not know (the server answers 415).
absl::StatusOr<nlohmann::json> DecodeK8sProtobuf(absl::string_view body);

}  // namespace kubetrain::localkube
