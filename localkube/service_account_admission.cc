// The ServiceAccount admission plugin for pods (see service_account_admission.h).
#include "localkube/service_account_admission.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "localkube/api.h"
#include "localkube/errors.h"
#include "localkube/object_meta.h"
#include "localkube/service_accounts.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// The projected token the admission plugin asks for: an hour plus 7 s, which the apiserver
// recognises as the legacy-compatible kubelet token.
constexpr int64_t kProjectedTokenSeconds = 3607;

}  // namespace

absl::Status AdmitPodServiceAccount(const Store& store, json* pod) {
  json& meta = (*pod)["metadata"];
  if (meta.contains("annotations") && meta["annotations"].is_object() &&
      meta["annotations"].contains("kubernetes.io/config.mirror")) {
    return absl::OkStatus();
  }
  if (!(*pod)["spec"].is_object()) return absl::OkStatus();  // validation reports it
  json& spec = (*pod)["spec"];
  std::string sa_name;
  if (spec.contains("serviceAccountName") && spec["serviceAccountName"].is_string()) {
    sa_name = spec["serviceAccountName"];
  }
  // Defaulting: the deprecated serviceAccount field stands in for an empty serviceAccountName.
  if (sa_name.empty() && spec.contains("serviceAccount") && spec["serviceAccount"].is_string()) {
    sa_name = spec["serviceAccount"];
  }
  if (sa_name.empty()) sa_name = kDefaultServiceAccount;
  spec["serviceAccountName"] = sa_name;
  spec["serviceAccount"] = sa_name;  // written back as the alias of serviceAccountName
  std::string ns = NamespaceOf(*pod);
  auto sa = store.Get(kServiceAccountsKey, ns, sa_name);
  if (!sa) {
    // plugin/pkg/admission/serviceaccount/admission.go: admission.NewForbidden(a,
    // fmt.Errorf("error looking up service account %s/%s: %w", ...)), which names the pod by its
    // generateName when it has no name yet.
    std::string name = meta.value("name", "");
    std::string prefix = meta.value("generateName", "");
    if (!prefix.empty()) {
      // localkube generates the name before admission (the apiserver after): a name that is the
      // prefix plus 5 generated characters was not the client's.
      prefix = prefix.substr(0, 58);
      if (name.empty() || (name.size() == prefix.size() + 5 && absl::StartsWith(name, prefix))) {
        name = meta.value("generateName", "");
      }
    }
    return ApiError(
        403, "Forbidden",
        absl::StrCat("pods \"", name, "\" is forbidden: error looking up service account ", ns, "/",
                     sa_name, ": serviceaccount \"", sa_name, "\" not found"),
        {{"name", name}, {"kind", "pods"}});
  }
  // shouldAutomount: the pod's setting wins over the ServiceAccount's; the default is true.
  bool automount = true;
  if (spec.contains("automountServiceAccountToken") &&
      spec["automountServiceAccountToken"].is_boolean()) {
    automount = spec["automountServiceAccountToken"];
  } else if (sa->contains("automountServiceAccountToken") &&
             (*sa)["automountServiceAccountToken"].is_boolean()) {
    automount = (*sa)["automountServiceAccountToken"];
  }
  if (!automount) return absl::OkStatus();
  // mountServiceAccountToken: reuse an existing kube-api-access-* volume, else a new name.
  std::string volume_name;
  bool has_volume = false;
  if (spec.contains("volumes") && spec["volumes"].is_array()) {
    for (const json& v : spec["volumes"]) {
      if (v.is_object() && v.contains("name") && v["name"].is_string() &&
          absl::StartsWith(v["name"].get<std::string>(), "kube-api-access-")) {
        volume_name = v["name"];
        has_volume = true;
        break;
      }
    }
  }
  if (volume_name.empty()) volume_name = "kube-api-access-" + RandomSuffix();
  json mount = {{"name", volume_name}, {"readOnly", true}, {"mountPath", kServiceAccountMountPath}};
  bool needs_volume = false;
  for (const char* list : {"initContainers", "containers"}) {
    if (!spec.contains(list) || !spec[list].is_array()) continue;
    for (json& c : spec[list]) {
      if (!c.is_object()) continue;
      bool mounted = false;
      if (c.contains("volumeMounts") && c["volumeMounts"].is_array()) {
        for (const json& m : c["volumeMounts"]) {
          if (m.is_object() && m.value("mountPath", json()) == kServiceAccountMountPath) {
            mounted = true;
            break;
          }
        }
      } else {
        c.erase("volumeMounts");
      }
      if (mounted) continue;
      c["volumeMounts"].push_back(mount);
      needs_volume = true;
    }
  }
  if (has_volume || !needs_volume) return absl::OkStatus();
  if (!spec.contains("volumes") || !spec["volumes"].is_array()) spec["volumes"] = json::array();
  spec["volumes"].push_back(json::parse(absl::StrFormat(
      R"({"name":"%s","projected":{"sources":[
          {"serviceAccountToken":{"expirationSeconds":%d,"path":"token"}},
          {"configMap":{"name":"kube-root-ca.crt","items":[{"key":"ca.crt","path":"ca.crt"}]}},
          {"downwardAPI":{"items":[{"path":"namespace",
            "fieldRef":{"apiVersion":"v1","fieldPath":"metadata.namespace"}}]}}],
        "defaultMode":420}})",
      volume_name, kProjectedTokenSeconds)));
  return absl::OkStatus();
}

}  // namespace kubetrain::localkube
