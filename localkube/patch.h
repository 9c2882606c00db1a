// The four PATCH flavours the apiserver accepts, applied to JSON objects. Pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::localkube {

// RFC 7386 JSON merge patch: objects merge, null deletes, everything else replaces.
absl::StatusOr<nlohmann::json> ApplyMergePatch(const nlohmann::json& target,
                                               const nlohmann::json& patch);

// RFC 6902 JSON patch (add, remove, replace, move, copy, test).
absl::StatusOr<nlohmann::json> ApplyJsonPatch(const nlohmann::json& target,
                                              const nlohmann::json& patch);

// Kubernetes strategic merge patch for built-in kinds: lists with a merge key (containers, env,
// volumes and ports by name/containerPort, ownerReferences by uid, ...) merge element-wise;
// finalizers merge as a set; understands $patch (replace|delete|merge), $retainKeys,
// $setElementOrder/<list> and $deleteFromPrimitiveList/<list>.
absl::StatusOr<nlohmann::json> ApplyStrategicMergePatch(const nlohmann::json& target,
                                                        const nlohmann::json& patch);

// Server-side apply's merge of an applied configuration into the live object: maps merge,
// keyed lists merge by key, other lists and scalars are taken from the applied configuration.
nlohmann::json MergeApplied(const nlohmann::json& live, const nlohmann::json& applied);

// The merge key Kubernetes uses for a list field, or "" when the list is atomic.
std::string MergeKeyFor(absl::string_view field, const nlohmann::json& elements);

}  // namespace kubetrain::localkube
