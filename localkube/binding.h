// The pods/binding subresource: POST /api/v1/namespaces/NS/pods/NAME/binding with a v1 Binding
// sets the pod's spec.nodeName and its PodScheduled=True condition, as the API server's
// BindingREST does. The scheduler binds through it too.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "localkube/api.h"

namespace kubetrain::localkube {

// Binds pod `ns`/`name` to `binding`'s target node. Answers the Status the API server answers
// (Success, code 201). 400 when the Binding names another pod; a 500 with the field errors for
// a target that is not a Node or has no name (the API server answers these unconverted); 404
// when the pod is gone; 409 Conflict when it is already bound, being deleted, still has
// scheduling gates, or is not the pod (uid) the Binding names.
absl::StatusOr<nlohmann::json> BindPod(Api& api, const std::string& ns, const std::string& name,
                                       const nlohmann::json& binding, bool dry_run);

}  // namespace kubetrain::localkube
