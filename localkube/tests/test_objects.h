// Test support shared by localkube's API tests: the bearer token the server under test is started
// with (an admin's), the smallest valid Pod, RBAC roles and bindings, and the wait for a pod the
// kubelet runs to reach a state.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

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
