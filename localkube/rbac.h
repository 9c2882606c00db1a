// Users, the RBAC authorizer and the OwnerReferencesPermissionEnforcement admission rule, as
// kube-apiserver runs them with `--authorization-mode=RBAC`: rules come from the Roles,
// RoleBindings, ClusterRoles and ClusterRoleBindings in localkube's own store, read afresh on
// every check. Denials carry the apiserver's 403 Status wording.
//
// Escalation prevention on writes of Roles and bindings is in rbac_escalation.h.
// Impersonation is in impersonation.h, the access review APIs in access_reviews.h.
// Not modelled: aggregated ClusterRoles (aggregationRule) and the extra `create` check of a PUT
// that creates.
// The bootstrap ClusterRoleBindings every authenticated user holds on a real cluster
// (system:basic-user, system:discovery, system:public-info-viewer) and cluster-admin's binding to
// system:masters apply as if they were stored (DefaultBindings), without being objects here.
//
// Thread-safe: every function only reads the Store and Registry, which lock themselves.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "localkube/resources.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// A service account's user name is this prefix, then `<namespace>:<name>`.
inline constexpr char kServiceAccountPrefix[] = "system:serviceaccount:";

struct UserInfo {
  std::string name;
  std::vector<std::string> groups;
  std::string uid;
  std::map<std::string, std::vector<std::string>> extra;
};

// The `--token` user: member of system:masters, which bypasses authorization.
UserInfo AdminUser();
// A user with the groups the authenticator adds: system:authenticated always, and for
// `system:serviceaccount:<ns>:<name>` also system:serviceaccounts and system:serviceaccounts:<ns>.
UserInfo MakeUser(std::string name, std::vector<std::string> groups);
// Parses a `--user-token` value, `TOKEN=USERNAME[,GROUP...]`, into (token, user).
absl::StatusOr<std::pair<std::string, UserInfo>> ParseUserToken(absl::string_view flag);

// What the authorizer sees of a request (the apiserver's RequestInfo).
struct RequestAttributes {
  bool resource_request = false;
  std::string verb;  // get list watch create update patch delete deletecollection; lowercased
                     // HTTP method for non-resource requests
  std::string path;  // non-resource requests
  std::string api_group;
  std::string api_version;
  std::string resource;
  std::string subresource;
  std::string ns;
  std::string name;
};

// Derives the attributes from a request: `watch` is the parsed ?watch=, `field_selector` the
// raw ?fieldSelector= (an exact metadata.name there names the object of a list or watch).
RequestAttributes AttributesOf(absl::string_view method, absl::string_view path, bool watch,
                               absl::string_view field_selector);

struct Decision {
  bool allowed = false;
  // Allowed: "RBAC: allowed by <binding>" (`ClusterRoleBinding "b" of ClusterRole "r" to Group
  // "g"`, `RoleBinding "b/ns" of Role "r" to ServiceAccount "sa/ns"`), "" for system:masters.
  // Denied: "RBAC: <errors>" when bindings referred to roles that do not exist, else "".
  std::string reason;
};

// The union of the privileged-group (system:masters) authorizer and RBAC.
Decision Decide(const Store& store, const UserInfo& user, const RequestAttributes& attributes);

// OK, or the 403 Forbidden Status the apiserver answers a denied request with.
absl::Status Authorize(const Store& store, const UserInfo& user,
                       const RequestAttributes& attributes);

// A ClusterRoleBinding (named as its ClusterRole) of a kube-apiserver's bootstrap policy.
struct DefaultBinding {
  std::string name;
  std::vector<std::string> groups;  // its Group subjects
  nlohmann::json rules;             // its ClusterRole's rules
};
// cluster-admin (system:masters), system:basic-user, system:discovery, system:public-info-viewer.
const std::vector<DefaultBinding>& DefaultBindings();

// Whether a binding's subjects include the user. `binding_ns` defaults ServiceAccount subjects'
// namespace ("" for ClusterRoleBindings, whose ServiceAccount subjects must name one).
bool BindingAppliesTo(const UserInfo& user, const nlohmann::json& binding,
                      const std::string& binding_ns);
// The first subject of the binding that includes the user, or null.
const nlohmann::json* AppliedSubject(const UserInfo& user, const nlohmann::json& binding,
                                     const std::string& binding_ns);

// The `rules` of the role a binding's roleRef names (a Role in `binding_ns`, or a ClusterRole), or
// the error the RBAC rule resolver reports (`role.rbac.authorization.k8s.io "x" not found`).
absl::StatusOr<nlohmann::json> RoleRefRules(const Store& store, const nlohmann::json& binding,
                                            const std::string& binding_ns);

// apierrors.NewForbidden: 403 `<resource>.<group> "<name>" is forbidden: <why>` (the name part
// only with a name, `forbidden: <why>` with neither resource nor group), details name/group/kind.
absl::Status ForbiddenError(const std::string& resource, const std::string& group,
                            const std::string& name, const std::string& why);

// OwnerReferencesPermissionEnforcement for a create (`old` null) or update of `object` of `type`
// through `subresource` in namespace `ns`: changing ownerReferences needs `delete` on the object
// (updates only), and each ownerReference that newly sets blockOwnerDeletion needs `update` on
// the owner's `finalizers` subresource. 403 Forbidden otherwise.
absl::Status AdmitOwnerReferences(const Registry& registry, const Store& store,
                                  const UserInfo& user, const ResourceType& type,
                                  const std::string& subresource, const std::string& ns,
                                  const nlohmann::json& object, const nlohmann::json* old);

}  // namespace kubetrain::localkube
