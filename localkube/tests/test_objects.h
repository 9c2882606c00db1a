// Test support shared by localkube's API tests: the bearer token the server under test is started
// with (an admin's), the smallest valid Pod, RBAC roles and bindings, CustomResourceDefinitions,
// and the wait for a pod the kubelet runs to reach a state.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/time/time.h"
#include "common/testing/eventually.h"
#include "localkube/api.h"

namespace kubetrain::localkube::testing {

inline constexpr char kAdminToken[] = "admin-token";

// A one-container busybox Pod named `name`, owned by `owner_refs` when given.
inline nlohmann::json Pod(const std::string& name, nlohmann::json owner_refs = nullptr) {
  nlohmann::json pod = {{"apiVersion", "v1"},
                        {"kind", "Pod"},
                        {"metadata", {{"name", name}}},
                        {"spec", {{"containers", {{{"name", "c"}, {"image", "busybox"}}}}}}};
  if (!owner_refs.is_null()) pod["metadata"]["ownerReferences"] = owner_refs;
  return pod;
}

// A Role in `ns` granting `rules`; a ClusterRole when `ns` is empty.
inline nlohmann::json Role(const std::string& ns, const std::string& name, nlohmann::json rules) {
  nlohmann::json role = {{"apiVersion", "rbac.authorization.k8s.io/v1"},
                         {"kind", ns.empty() ? "ClusterRole" : "Role"},
                         {"metadata", {{"name", name}}},
                         {"rules", rules}};
  if (!ns.empty()) role["metadata"]["namespace"] = ns;
  return role;
}

// A binding of `role_kind`/`role` to `subjects`; a RoleBinding in `ns`, a ClusterRoleBinding when
// `ns` is empty.
inline nlohmann::json Binding(const std::string& ns, const std::string& name,
                              const std::string& role_kind, const std::string& role,
                              nlohmann::json subjects) {
  nlohmann::json b = {
      {"apiVersion", "rbac.authorization.k8s.io/v1"},
      {"kind", ns.empty() ? "ClusterRoleBinding" : "RoleBinding"},
      {"metadata", {{"name", name}}},
      {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", role_kind}, {"name", role}}},
      {"subjects", subjects}};
  if (!ns.empty()) b["metadata"]["namespace"] = ns;
  return b;
}

// A namespaced CustomResourceDefinition of `kind` (plural `plural`, singular `kind` in lower case)
// in `group`, serving and storing the one version `version`. `version_fields` (subresources, a
// schema, printer columns) go into that version, whose schema otherwise keeps every field.
inline nlohmann::json Crd(const std::string& group, const std::string& version,
                          const std::string& kind, const std::string& plural,
                          const nlohmann::json& version_fields = nlohmann::json::object()) {
  nlohmann::json served = {
      {"name", version},
      {"served", true},
      {"storage", true},
      {"schema",
       {{"openAPIV3Schema",
         {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}}};
  served.update(version_fields);
  return {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", plural + "." + group}}},
      {"spec",
       {{"group", group},
        {"scope", "Namespaced"},
        {"names", {{"plural", plural}, {"singular", absl::AsciiStrToLower(kind)}, {"kind", kind}}},
        {"versions", nlohmann::json::array({served})}}}};
}

// The pod `target` names once `done` holds for it (null when it did not within `timeout`).
inline nlohmann::json WaitForPod(const Api& api, const Target& target,
                                 const std::function<bool(const nlohmann::json&)>& done,
                                 absl::Duration timeout) {
  nlohmann::json found;
  ::kubetrain::testing::Eventually(
      [&] {
        auto pod = api.Get(target);
        if (pod.ok() && done(*pod)) found = *pod;
        return !found.is_null();
      },
      timeout);
  return found;
}

}  // namespace kubetrain::localkube::testing
