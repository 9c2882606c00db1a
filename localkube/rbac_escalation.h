// RBAC's privilege escalation prevention, as the API server's rbac storage applies it to writes
// of Roles, ClusterRoles, RoleBindings and ClusterRoleBindings (Kubernetes documentation, "Using
// RBAC Authorization" > "Privilege escalation prevention and bootstrapping"):
//  - a Role (in its namespace) or ClusterRole (cluster-wide) may be created or updated only by a
//    user who already holds every permission it grants, or who has the `escalate` verb on
//    roles/clusterroles (named by the request's URL: a POST names none);
//  - a RoleBinding (in its namespace) or ClusterRoleBinding (cluster-wide) only by a user who
//    holds every permission of the role it references, or who has the `bind` verb on that role
//    (resourceNames may name it);
//  - members of system:masters (localkube's `--token` admin) bypass both; an update that only
//    changes ownerReferences or finalizers (what the garbage collector writes) is not checked.
// Updates and every kind of patch are checked on the object they produce. Refusals are the API
// server's 403: `roles.rbac.authorization.k8s.io "x" is forbidden: user "u" (groups=["g"]) is
// attempting to grant RBAC permissions not currently held:\n{APIGroups:[""], ...}`.
//
// Thread-safe: only reads the Store.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "localkube/rbac.h"
#include "localkube/rbac_rules.h"
#include "localkube/resources.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// The rules RBAC grants `user`: the default bindings' (rbac.h), every ClusterRoleBinding's, and
// with `ns` set the RoleBindings' of that namespace, in that order, and the errors resolving them
// met (roles that do not exist).
struct HeldRules {
  std::vector<PolicyRule> rules;
  std::vector<std::string> errors;
};
HeldRules RulesFor(const Store& store, const UserInfo& user, const std::string& ns);

// ConfirmNoEscalation: OK when the rules `user` holds in `ns` cover `granted`, else
// PermissionDenied whose message is the API server's `user "u" (groups=[...]) is attempting to
// grant RBAC permissions not currently held:\n<missing rules, one a line>`.
absl::Status ConfirmNoEscalation(const Store& store, const UserInfo& user, const std::string& ns,
                                 const std::vector<PolicyRule>& granted);

// The check for a create (`old` null) or update of `object`, an object of one of the four RBAC
// types (anything else passes) that `user` writes through a request naming `request_name` in its
// URL. OK, or the API server's 403 (400 when an update's roleRef names no role).
absl::Status AdmitRbacWrite(const Store& store, const UserInfo& user, const ResourceType& type,
                            const std::string& request_name, const nlohmann::json& object,
                            const nlohmann::json* old);

}  // namespace kubetrain::localkube
