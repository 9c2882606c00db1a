// What kube-controller-manager's serviceaccounts controller and root-ca-cert-publisher give every
// namespace: its `default` ServiceAccount and its `kube-root-ca.crt` ConfigMap. localkube makes
// both in the same write as the namespace (so a pod created right after its namespace is
// admitted) and at start-up for the namespaces that exist; RootCaPublisher (root_ca_publisher.h)
// then keeps the ConfigMap as the publisher does.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "localkube/api.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

inline constexpr char kRootCaConfigMap[] = "kube-root-ca.crt";

// What the controllers make for a new namespace `ns_object`: its `default` ServiceAccount, and its
// kube-root-ca.crt ConfigMap carrying the certificate PublishRootCa published (none before).
std::vector<nlohmann::json> NamespaceCompanions(const Store& store,
                                                const nlohmann::json& ns_object);

// The root-ca-cert-publisher's ConfigMap for namespace `ns`: data {"ca.crt": ca_pem} and the
// kubernetes.io/description annotation it also sets.
nlohmann::json RootCaConfigMap(const std::string& ns, const std::string& ca_pem);

// Publishes `ca_pem` as key ca.crt of the kube-root-ca.crt ConfigMap in every namespace and makes
// sure each has its `default` ServiceAccount; namespaces created later get both at once.
absl::Status PublishRootCa(Api* api, const std::string& ca_pem);

}  // namespace kubetrain::localkube
