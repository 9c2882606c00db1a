// The access review APIs, as kube-apiserver serves them: authorization.k8s.io/v1
// SelfSubjectAccessReview and SubjectAccessReview (may this user do this? `kubectl auth can-i`),
// SelfSubjectRulesReview (what may I do in this namespace? `kubectl auth can-i --list`), and
// authentication.k8s.io/v1 SelfSubjectReview (who am I? `kubectl auth whoami`). All are
// cluster-scoped and create-only; nothing is stored. Decisions are the RBAC authorizer's (rbac.h),
// or allow-all when the server runs without RBAC.
//
// Not served: LocalSubjectAccessReview, TokenReview, and the field and label selectors of
// resourceAttributes (accepted, not used for the decision).
//
// Stateless; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "localkube/rbac.h"
#include "localkube/resources.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// Whether `plural` in `group`/`version` is one of the review resources.
bool IsAccessReview(absl::string_view group, absl::string_view version, absl::string_view plural);

// The group versions the reviews add to discovery ({"authentication.k8s.io", "v1"}, ...).
std::vector<std::pair<std::string, std::string>> AccessReviewGroupVersions();

// The APIResourceList entries of the reviews in `group`/`version` (an empty array for others).
nlohmann::json AccessReviewResources(absl::string_view group, absl::string_view version);

// Answers a POST of a review (`body` in `content_type`: JSON, YAML or protobuf) to `plural` by
// `user`: the object with its status filled in, served with 201 Created. `rbac_store` decides
// with RBAC; null allows everything. 400 for a body that does not decode or a rules review without
// spec.namespace; 422 Invalid for a spec the API server refuses.
absl::StatusOr<nlohmann::json> CreateAccessReview(const Registry& registry, const Store* rbac_store,
                                                  const UserInfo& user, absl::string_view plural,
                                                  absl::string_view content_type,
                                                  const std::string& body);

}  // namespace kubetrain::localkube
