// Test support shared by localkube's API tests: the bearer token the server under test is started
// with (an admin's), and the smallest valid Pod.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

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

}  // namespace kubetrain::localkube::testing
