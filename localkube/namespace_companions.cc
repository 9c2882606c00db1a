// What every namespace gets from the serviceaccounts controller and the root-ca-cert-publisher
// (see namespace_companions.h).
#include "localkube/namespace_companions.h"

#include <cstdint>

#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/kinds.h"
#include "localkube/object_meta.h"
#include "localkube/service_accounts.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kConfigMapsKey[] = "/configmaps";

json DefaultServiceAccount(const std::string& ns) {
  return {{"apiVersion", "v1"},
          {"kind", "ServiceAccount"},
          {"metadata", {{"name", kDefaultServiceAccount}, {"namespace", ns}}}};
}

}  // namespace

json RootCaConfigMap(const std::string& ns, const std::string& ca_pem) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata",
           {{"name", kRootCaConfigMap},
            {"namespace", ns},
            {"annotations",
             {{"kubernetes.io/description",
               "Contains a CA bundle that can be used to verify the kube-apiserver when using "
               "internal endpoints such as the internal service IP or "
               "kubernetes.default.svc. No other usage is guaranteed across distributions of "
               "Kubernetes clusters."}}}}},
          {"data", {{"ca.crt", ca_pem}}}};
}

std::vector<json> NamespaceCompanions(const Store& store, const json& ns_object) {
  std::string ns = NameOf(ns_object);
  std::vector<json> out = {DefaultServiceAccount(ns)};
  // The certificate lives in every namespace's ConfigMap; kube-system's is the one published.
  if (auto published = store.Get(kConfigMapsKey, "kube-system", kRootCaConfigMap)) {
    json data = Field(*published, "data");
    if (data.is_object() && data.contains("ca.crt") && data["ca.crt"].is_string()) {
      out.push_back(RootCaConfigMap(ns, data["ca.crt"]));
    }
  }
  return out;
}

absl::Status PublishRootCa(Api* api, const std::string& ca_pem) {
  ResourceTypePtr namespaces = api->registry()->Find("", "v1", "namespaces");
  ResourceTypePtr configmaps = api->registry()->Find("", "v1", "configmaps");
  ResourceTypePtr serviceaccounts = api->registry()->Find("", "v1", "serviceaccounts");
  if (!namespaces || !configmaps || !serviceaccounts) {
    return absl::InternalError("core types missing from the registry");
  }
  // kube-system first: namespaces created meanwhile copy its certificate.
  std::vector<std::string> names = {"kube-system"};
  int64_t revision = 0;
  for (const json& n : api->store()->List(kNamespacesKey, "", &revision)) {
    if (NameOf(n) != "kube-system" && !IsDeleting(n)) names.push_back(NameOf(n));
  }
  for (const std::string& ns : names) {
    bool ignored = false;
    absl::StatusOr<json> cm = api->Update(Target{configmaps, ns, kRootCaConfigMap, ""},
                                          RootCaConfigMap(ns, ca_pem), WriteOptions{}, &ignored);
    if (!cm.ok() && HttpCode(cm.status()) == 404) {
      cm = api->Create(Target{configmaps, ns, "", ""}, RootCaConfigMap(ns, ca_pem), WriteOptions{});
    }
    // A namespace being terminated (403) or gone meanwhile (404) needs none.
    if (!cm.ok() && HttpCode(cm.status()) != 403 && HttpCode(cm.status()) != 404 &&
        HttpCode(cm.status()) != 409) {
      return cm.status();
    }
    if (!api->store()->Get(kServiceAccountsKey, ns, kDefaultServiceAccount)) {
      (void)api->Create(Target{serviceaccounts, ns, "", ""}, DefaultServiceAccount(ns),
                        WriteOptions{});
    }
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
