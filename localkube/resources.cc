#include "localkube/resources.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::localkube {
namespace {

struct BuiltinSpec {
  const char* group;
  const char* kind;
  const char* plural;
  bool namespaced;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  bool status = false;
  bool scale = false;
  bool generation = true;
};

ResourceTypePtr MakeBuiltin(const BuiltinSpec& spec) {
  auto type = std::make_shared<ResourceType>();
  type->group = spec.group;
  type->version = "v1";
  type->kind = spec.kind;
  type->plural = spec.plural;
  type->singular = absl::AsciiStrToLower(spec.kind);
  type->list_kind = std::string(spec.kind) + "List";
  type->namespaced = spec.namespaced;
  type->short_names = spec.short_names;
  type->categories = spec.categories;
  type->status_subresource = spec.status;
  type->scale_subresource = spec.scale;
  type->has_generation = spec.generation;
  if (spec.scale) {
    type->spec_replicas_path = ".spec.replicas";
    type->status_replicas_path = ".status.replicas";
  }
  if (type->kind == "Lease") {
    type->unconditional_update = false;
    type->create_on_update = true;
  }
  return type;
}

std::vector<ResourceTypePtr> Builtins() {
  const std::vector<BuiltinSpec> specs = {
      {"", "Namespace", "namespaces", false, {"ns"}, {}, true},
      {"", "Pod", "pods", true, {"po"}, {"all"}, true},
      {"", "Service", "services", true, {"svc"}, {"all"}, true},
      {"", "Endpoints", "endpoints", true, {"ep"}, {}},
      {"", "Event", "events", true, {"ev"}, {}},
      {"", "ConfigMap", "configmaps", true, {"cm"}, {}, false, false, false},
      {"", "Secret", "secrets", true, {}, {}, false, false, false},
      {"", "ServiceAccount", "serviceaccounts", true, {"sa"}, {}},
      {"", "PersistentVolumeClaim", "persistentvolumeclaims", true, {"pvc"}, {}, true},
      {"", "PersistentVolume", "persistentvolumes", false, {"pv"}, {}, true},
      {"", "Node", "nodes", false, {"no"}, {}, true},
      {"apps", "Deployment", "deployments", true, {"deploy"}, {"all"}, true, true},
      {"apps", "StatefulSet", "statefulsets", true, {"sts"}, {"all"}, true, true},
      {"apps", "ReplicaSet", "replicasets", true, {"rs"}, {"all"}, true, true},
      {"batch", "Job", "jobs", true, {}, {"all"}, true},
      {"coordination.k8s.io", "Lease", "leases", true, {}, {}},
      {"events.k8s.io", "Event", "events", true, {"ev"}, {}},
      {"storage.k8s.io", "StorageClass", "storageclasses", false, {"sc"}, {}, false, false, false},
      {"rbac.authorization.k8s.io", "Role", "roles", true, {}, {}},
      {"rbac.authorization.k8s.io", "RoleBinding", "rolebindings", true, {}, {}},
      {"rbac.authorization.k8s.io", "ClusterRole", "clusterroles", false, {}, {}},
      {"rbac.authorization.k8s.io", "ClusterRoleBinding", "clusterrolebindings", false, {}, {}},
      {"policy", "PodDisruptionBudget", "poddisruptionbudgets", true, {"pdb"}, {}, true},
      {"apiextensions.k8s.io",
       "CustomResourceDefinition",
       "customresourcedefinitions",
       false,
       {"crd", "crds"},
       {},
       true},
  };
  std::vector<ResourceTypePtr> types;
  for (const BuiltinSpec& spec : specs) types.push_back(MakeBuiltin(spec));
  return types;
}

std::vector<PrinterColumn> ColumnsOf(const nlohmann::json& version) {
  std::vector<PrinterColumn> columns;
  for (const auto& c : version.value("additionalPrinterColumns", nlohmann::json::array())) {
    PrinterColumn col;
    col.name = c.value("name", "");
    col.type = c.value("type", "string");
    col.format = c.value("format", "");
    col.description = c.value("description", "");
    col.json_path = c.value("jsonPath", "");
    col.priority = c.value("priority", 0);
    columns.push_back(col);
  }
  return columns;
}

std::vector<std::string> Strings(const nlohmann::json& names, const char* key) {
  std::vector<std::string> out;
  for (const auto& s : names.value(key, nlohmann::json::array())) out.push_back(s);
  return out;
}

}  // namespace

Registry::Registry() : types_(Builtins()) {}

ResourceTypePtr Registry::Find(absl::string_view group, absl::string_view version,
                               absl::string_view plural) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& t : types_) {
    if (t->group == group && t->version == version && t->plural == plural) return t;
  }
  return nullptr;
}

ResourceTypePtr Registry::FindByKind(absl::string_view api_version, absl::string_view kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& t : types_) {
    if (t->GroupVersion() == api_version && t->kind == kind) return t;
  }
  return nullptr;
}

std::vector<ResourceTypePtr> Registry::All() const {
  std::lock_guard<std::mutex> lock(mu_);
  return types_;
}

std::vector<std::pair<std::string, std::string>> Registry::GroupVersions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& t : types_) {
    std::pair<std::string, std::string> gv(t->group, t->version);
    if (std::find(out.begin(), out.end(), gv) == out.end()) out.push_back(gv);
  }
  return out;
}

absl::Status Registry::RegisterCrd(const nlohmann::json& crd) {
  const nlohmann::json& spec = crd.value("spec", nlohmann::json::object());
  const nlohmann::json& names = spec.value("names", nlohmann::json::object());
  std::vector<ResourceTypePtr> added;
  for (const auto& v : spec.value("versions", nlohmann::json::array())) {
    if (!v.value("served", true)) continue;
    auto type = std::make_shared<ResourceType>();
    type->group = spec.value("group", "");
    type->version = v.value("name", "");
    type->kind = names.value("kind", "");
    type->plural = names.value("plural", "");
    type->singular = names.value("singular", absl::AsciiStrToLower(type->kind));
    type->list_kind = names.value("listKind", type->kind + "List");
    type->namespaced = spec.value("scope", "Namespaced") == "Namespaced";
    type->short_names = Strings(names, "shortNames");
    type->categories = Strings(names, "categories");
    const nlohmann::json sub = v.value("subresources", nlohmann::json::object());
    type->status_subresource = sub.contains("status");
    if (sub.contains("scale")) {
      type->scale_subresource = true;
      type->spec_replicas_path = sub["scale"].value("specReplicasPath", "");
      type->status_replicas_path = sub["scale"].value("statusReplicasPath", "");
      type->label_selector_path = sub["scale"].value("labelSelectorPath", "");
    }
    type->custom = true;
    type->unconditional_update = false;
    if (v.contains("schema")) type->schema = v["schema"].value("openAPIV3Schema", nlohmann::json());
    type->columns = ColumnsOf(v);
    added.push_back(type);
  }
  std::string name = crd["metadata"].value("name", "");
  std::lock_guard<std::mutex> lock(mu_);
  auto owned = [&](const ResourceTypePtr& t) {
    return std::any_of(crd_owner_.begin(), crd_owner_.end(), [&](const auto& o) {
      return o.first == name && o.second == t->StorageKey();
    });
  };
  types_.erase(std::remove_if(types_.begin(), types_.end(), owned), types_.end());
  crd_owner_.erase(std::remove_if(crd_owner_.begin(), crd_owner_.end(),
                                  [&](const auto& o) { return o.first == name; }),
                   crd_owner_.end());
  for (auto& t : added) {
    crd_owner_.emplace_back(name, t->StorageKey());
    types_.push_back(std::move(t));
  }
  ++generation_;
  return absl::OkStatus();
}

void Registry::UnregisterCrd(absl::string_view crd_name) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> keys;
  for (const auto& o : crd_owner_) {
    if (o.first == crd_name) keys.push_back(o.second);
  }
  types_.erase(std::remove_if(types_.begin(), types_.end(),
                              [&](const ResourceTypePtr& t) {
                                return t->custom && std::find(keys.begin(), keys.end(),
                                                              t->StorageKey()) != keys.end();
                              }),
               types_.end());
  crd_owner_.erase(std::remove_if(crd_owner_.begin(), crd_owner_.end(),
                                  [&](const auto& o) { return o.first == crd_name; }),
                   crd_owner_.end());
  ++generation_;
}

int64_t Registry::Generation() const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_;
}

}  // namespace kubetrain::localkube
