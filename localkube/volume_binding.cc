#include "localkube/volume_binding.h"

#include <algorithm>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "localkube/json_fields.h"
#include "localkube/kinds.h"
#include "localkube/object_meta.h"
#include "localkube/storage_objects.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kVolumeNodesKey[] = "/nodes";

// One node selector requirement against a value (nullopt: the key is absent).
bool NodeRequirementMet(const json& req, const std::optional<std::string>& value) {
  std::string op = Str(req, "operator");
  std::vector<std::string> values;
  if (req.contains("values") && req["values"].is_array()) {
    for (const json& v : req["values"]) {
      if (v.is_string()) values.push_back(v.get<std::string>());
    }
  }
  bool listed = value && std::find(values.begin(), values.end(), *value) != values.end();
  if (op == "In") return listed;
  if (op == "NotIn") return !listed;
  if (op == "Exists") return value.has_value();
  if (op == "DoesNotExist") return !value.has_value();
  if ((op == "Gt" || op == "Lt") && value && values.size() == 1) {
    int64_t have = 0, bound = 0;
    if (!absl::SimpleAtoi(*value, &have) || !absl::SimpleAtoi(values[0], &bound)) return false;
    return op == "Gt" ? have > bound : have < bound;
  }
  return false;
}

bool TermMatches(const json& term, const json& node) {
  const json& labels = ObjectOrEmpty(Meta(node), "labels");
  bool any = false;
  if (term.contains("matchExpressions") && term["matchExpressions"].is_array()) {
    for (const json& req : term["matchExpressions"]) {
      std::string key = Str(req, "key");
      std::optional<std::string> value;
      if (labels.contains(key) && labels[key].is_string()) value = labels[key].get<std::string>();
      if (!NodeRequirementMet(req, value)) return false;
      any = true;
    }
  }
  if (term.contains("matchFields") && term["matchFields"].is_array()) {
    for (const json& req : term["matchFields"]) {
      std::optional<std::string> value;
      if (Str(req, "key") == "metadata.name") value = NameOf(node);
      if (!NodeRequirementMet(req, value)) return false;
      any = true;
    }
  }
  return any;  // an empty term matches nothing
}

std::string BindingReason(const Store& store, const json& pod, const json& node) {
  const std::string ns = NamespaceOf(pod);
  for (const std::string& name : PodClaimNames(pod)) {
    std::optional<json> claim = store.Get(kPvcKey, ns, name);
    if (!claim) return absl::StrCat("persistentvolumeclaim \"", name, "\" not found");
    if (Str(ObjectOrEmpty(*claim, "status"), "phase") == "Lost") {
      return absl::StrCat("persistentvolumeclaim \"", name,
                          "\" bound to non-existent persistentvolume \"",
                          Str(ObjectOrEmpty(*claim, "spec"), "volumeName"), "\"");
    }
    if (IsDeleting(*claim))
      return absl::StrCat("persistentvolumeclaim \"", name, "\" is being deleted");
  }
  for (const std::string& name : PodClaimNames(pod)) {
    std::optional<json> got = store.Get(kPvcKey, ns, name);
    if (!got) return absl::StrCat("persistentvolumeclaim \"", name, "\" not found");
    const json& claim = *got;
    std::string volume = Str(ObjectOrEmpty(claim, "spec"), "volumeName");
    if (!volume.empty()) {
      std::optional<json> pv = store.Get(kPvKey, "", volume);
      if (!pv) return "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
      if (!VolumeNodeAffinityMatches(*pv, node)) return "node(s) had volume node affinity conflict";
      continue;
    }
    std::string class_name = ClaimClassName(claim);
    std::optional<json> sc =
        class_name.empty() ? std::nullopt : store.Get(kStorageClassKey, "", class_name);
    if (!class_name.empty() && !sc) {
      return absl::StrCat("storageclass.storage.k8s.io \"", class_name, "\" not found");
    }
    if (!sc || Str(*sc, "volumeBindingMode") != "WaitForFirstConsumer") {
      return "pod has unbound immediate PersistentVolumeClaims";
    }
    std::string selected = Str(ObjectOrEmpty(Meta(claim), "annotations"), kSelectedNodeAnnotation);
    if (!selected.empty() && selected != NameOf(node)) {
      return "node(s) didn't find available persistent volumes to bind";
    }
  }
  return "";
}

std::string RestrictionsReason(const Store& store, const json& pod) {
  const std::string ns = NamespaceOf(pod);
  std::vector<std::string> once_pod;
  for (const std::string& name : PodClaimNames(pod)) {
    std::optional<json> claim = store.Get(kPvcKey, ns, name);
    if (!claim) continue;
    const json& spec = ObjectOrEmpty(*claim, "spec");
    if (spec.contains("accessModes") && spec["accessModes"].is_array() &&
        std::find(spec["accessModes"].begin(), spec["accessModes"].end(), "ReadWriteOncePod") !=
            spec["accessModes"].end()) {
      once_pod.push_back(name);
    }
  }
  if (once_pod.empty()) return "";
  int64_t revision = 0;
  for (const json& other : store.List(kPodsKey, ns, &revision)) {
    if (UidOf(other) == UidOf(pod) || PodFinished(other)) continue;
    if (Str(ObjectOrEmpty(other, "spec"), "nodeName").empty()) continue;
    for (const std::string& name : PodClaimNames(other)) {
      if (std::find(once_pod.begin(), once_pod.end(), name) != once_pod.end()) {
        return "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod "
               "access mode";
      }
    }
  }
  return "";
}

}  // namespace

std::vector<std::string> PodClaimNames(const json& pod) {
  std::vector<std::string> names;
  const json& spec = ObjectOrEmpty(pod, "spec");
  if (!spec.contains("volumes") || !spec["volumes"].is_array()) return names;
  for (const json& v : spec["volumes"]) {
    if (!v.is_object()) continue;
    std::string claim = Str(ObjectOrEmpty(v, "persistentVolumeClaim"), "claimName");
    if (!claim.empty()) names.push_back(claim);
  }
  return names;
}

bool VolumeNodeAffinityMatches(const json& pv, const json& node) {
  const json& required =
      ObjectOrEmpty(ObjectOrEmpty(ObjectOrEmpty(pv, "spec"), "nodeAffinity"), "required");
  if (!required.contains("nodeSelectorTerms") || !required["nodeSelectorTerms"].is_array()) {
    return true;
  }
  for (const json& term : required["nodeSelectorTerms"]) {
    if (term.is_object() && TermMatches(term, node)) return true;
  }
  return false;
}

json NodeOrConvention(const Store& store, const std::string& name) {
  if (std::optional<json> node = store.Get(kVolumeNodesKey, "", name)) return *node;
  return {{"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}}};
}

SchedulerFilter VolumeBindingFilter(const Store* store) {
  return [store](const json& pod, const json& node) { return BindingReason(*store, pod, node); };
}

SchedulerFilter VolumeRestrictionsFilter(const Store* store) {
  return [store](const json& pod, const json&) { return RestrictionsReason(*store, pod); };
}

}  // namespace kubetrain::localkube
