// Users, the RBAC authorizer and the OwnerReferencesPermissionEnforcement admission rule, as
// kube-apiserver runs them with `--authorization-mode=RBAC`: rules come from the Roles,
// RoleBindings, ClusterRoles and ClusterRoleBindings in localkube's own store, read afresh on
// every check. Denials carry the apiserver's 403 Status wording.
//
// Escalation prevention on writes of Roles and bindings is in rbac_escalation.h.
// Not modelled: aggregated ClusterRoles (aggregationRule), impersonation, and the extra `create`
// check of a PUT that creates.
// Discovery (/api, /apis, /version, /openapi and below) is always allowed to an authenticated
// user, which the default system:discovery and system:public-info-viewer ClusterRoles grant on a
// real cluster.
//
// Thread-safe: every function only reads the Store and Registry, which lock themselves.
#pragma once

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
  // On a denial: "RBAC: <errors>" when bindings referred to roles that do not exist, else "".
  std::string reason;
};

// The union of the privileged-group (system:masters) authorizer and RBAC.
Decision Decide(const Store& store, const UserInfo& user, const RequestAttributes& attributes);

// OK, or the 403 Forbidden Status the apiserver answers a denied request with.
absl::Status Authorize(const Store& store, const UserInfo& user,
                       const RequestAttributes& attributes);

// Whether a binding's subjects include the user. `binding_ns` defaults ServiceAccount subjects'
// namespace ("" for ClusterRoleBindings, whose ServiceAccount subjects must name one).
bool BindingAppliesTo(const UserInfo& user, const nlohmann::json& binding,
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
