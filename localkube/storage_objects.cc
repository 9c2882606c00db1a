#include "localkube/storage_objects.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

void AddFinalizer(json& object, const char* finalizer) {
  json& list = object["metadata"]["finalizers"];
  if (!list.is_array()) list = json::array();
  if (std::find(list.begin(), list.end(), finalizer) == list.end()) list.push_back(finalizer);
}

std::string StringAt(const json& object, const char* a, const char* b) {
  auto outer = object.find(a);
  if (outer == object.end() || !outer->is_object()) return "";
  auto inner = outer->find(b);
  return inner != outer->end() && inner->is_string() ? inner->get<std::string>() : "";
}

std::string StrOr(const json& object, const char* key, const char* fallback) {
  std::string s = Str(object, key);
  return s.empty() ? fallback : s;
}

bool IsDefaultClass(const json& sc) {
  const json& annotations = Meta(sc).value("annotations", json::object());
  return annotations.is_object() && Str(annotations, kDefaultClassAnnotation) == "true";
}

std::string ShownPhase(const json& object) {
  if (IsDeleting(object)) return "Terminating";
  return StringAt(object, "status", "phase");
}

std::string StorageOf(const json& object, const char* part, const char* field) {
  auto p = object.find(part);
  if (p == object.end() || !p->is_object() || !p->contains(field)) return "";
  const json& list = (*p)[field];
  return list.is_object() && list.contains("storage") && list["storage"].is_string()
             ? list["storage"].get<std::string>()
             : "";
}

std::string VolumeMode(const json& object) {
  std::string mode = StringAt(object, "spec", "volumeMode");
  return mode.empty() ? "<unset>" : mode;
}

std::string AttributesClass(const json& object) {
  std::string name = StringAt(object, "spec", "volumeAttributesClassName");
  return name.empty() ? "<unset>" : name;
}

constexpr char kNameDescription[] = "Name must be unique within a namespace.";
constexpr char kAgeDescription[] = "CreationTimestamp of the object.";

}  // namespace

const json& ObjectOrEmpty(const json& object, const char* key) {
  static const json kEmpty = json::object();
  const json& v = Field(object, key);
  return v.is_object() ? v : kEmpty;
}

std::string ClaimClassName(const json& claim) {
  std::string beta =
      Str(ObjectOrEmpty(Meta(claim), "annotations"), "volume.beta.kubernetes.io/storage-class");
  return !beta.empty() ? beta : Str(ObjectOrEmpty(claim, "spec"), "storageClassName");
}

bool PodFinished(const json& pod) {
  std::string phase = Str(ObjectOrEmpty(pod, "status"), "phase");
  return phase == "Succeeded" || phase == "Failed";
}

void StorageClassDefaults(json& object) {
  if (!object.contains("reclaimPolicy")) object["reclaimPolicy"] = "Delete";
  if (!object.contains("volumeBindingMode")) object["volumeBindingMode"] = "Immediate";
}

void PersistentVolumeDefaults(json& object) {
  if (!object["spec"].is_object()) object["spec"] = json::object();
  json& spec = object["spec"];
  if (!spec.contains("persistentVolumeReclaimPolicy")) {
    spec["persistentVolumeReclaimPolicy"] = "Retain";
  }
  if (!spec.contains("volumeMode")) spec["volumeMode"] = "Filesystem";
  object["status"] = {{"phase", "Pending"}};
  AddFinalizer(object, kPvProtectionFinalizer);
}

void PersistentVolumeClaimDefaults(json& object) {
  if (!object["spec"].is_object()) object["spec"] = json::object();
  json& spec = object["spec"];
  if (!spec.contains("volumeMode")) spec["volumeMode"] = "Filesystem";
  object["status"] = {{"phase", "Pending"}};
  AddFinalizer(object, kPvcProtectionFinalizer);
}

std::string DefaultStorageClassName(const Store& store) {
  int64_t revision = 0;
  std::string name, newest;
  for (const json& sc : store.List(kStorageClassKey, "", &revision)) {
    std::string created = Meta(sc).value("creationTimestamp", "");
    if (IsDefaultClass(sc) && (name.empty() || created > newest)) {
      name = NameOf(sc);
      newest = created;
    }
  }
  return name;
}

absl::Status AdmitPersistentVolumeClaim(const Store& store, json* claim, const json* old) {
  if (old != nullptr) return absl::OkStatus();
  json& spec = (*claim)["spec"];
  if (!spec.is_object()) spec = json::object();
  std::vector<Cause> causes;
  if (!spec.contains("accessModes") || !spec["accessModes"].is_array() ||
      spec["accessModes"].empty()) {
    causes.push_back({"FieldValueRequired", "Required value: at least 1 access mode is required",
                      "spec.accessModes"});
  }
  if (StorageOf(spec, "resources", "requests").empty()) {
    causes.push_back({"FieldValueRequired", "Required value", "spec.resources[storage]"});
  }
  if (!causes.empty()) return InvalidError("PersistentVolumeClaim", NameOf(*claim), causes);
  // DefaultStorageClass: only an absent field is defaulted; "" asks for no class.
  const json& annotations = Meta(*claim).value("annotations", json::object());
  bool beta_class =
      annotations.is_object() && annotations.contains("volume.beta.kubernetes.io/storage-class");
  if (!spec.contains("storageClassName") && !beta_class) {
    std::string name = DefaultStorageClassName(store);
    if (!name.empty()) spec["storageClassName"] = name;
  }
  return absl::OkStatus();
}

std::string AccessModesString(const json& modes) {
  std::vector<std::string> out;
  auto has = [&](const char* mode) {
    return modes.is_array() && std::find(modes.begin(), modes.end(), mode) != modes.end();
  };
  for (const auto& [mode, abbreviation] :
       std::vector<std::pair<const char*, const char*>>{{"ReadWriteOnce", "RWO"},
                                                        {"ReadOnlyMany", "ROX"},
                                                        {"ReadWriteMany", "RWX"},
                                                        {"ReadWriteOncePod", "RWOP"}}) {
    if (has(mode)) out.push_back(abbreviation);
  }
  return absl::StrJoin(out, ",");
}

std::optional<std::vector<PrinterColumn>> StorageTableColumns(const ResourceType& type) {
  auto col = [](const char* name, const char* description, int priority = 0) {
    return PrinterColumn{name, "string", "", description, "", priority};
  };
  PrinterColumn name{"Name", "string", "name", kNameDescription, "", 0};
  if (type.StorageKey() == kStorageClassKey) {
    return std::vector<PrinterColumn>{
        name,
        col("Provisioner", "provisioner indicates the type of the provisioner."),
        col("ReclaimPolicy",
            "reclaimPolicy controls the reclaimPolicy for dynamically "
            "provisioned PersistentVolumes of this storage class."),
        col("VolumeBindingMode",
            "volumeBindingMode indicates how PersistentVolumeClaims should "
            "be provisioned and bound."),
        col("AllowVolumeExpansion",
            "allowVolumeExpansion shows whether the storage class allow "
            "volume expand."),
        col("Age", kAgeDescription)};
  }
  if (type.StorageKey() == kPvKey) {
    return std::vector<PrinterColumn>{
        name,
        col("Capacity",
            "capacity is the description of the persistent volume's resources and "
            "capacity."),
        col("Access Modes", "accessModes contains all ways the volume can be mounted."),
        col("Reclaim Policy",
            "persistentVolumeReclaimPolicy defines what happens to a "
            "persistent volume when released from its claim."),
        col("Status",
            "phase indicates if a volume is available, bound to a claim, or released "
            "by a claim."),
        col("Claim",
            "claimRef is part of a bi-directional binding between PersistentVolume and "
            "PersistentVolumeClaim."),
        col("StorageClass", "StorageClass of the pv"),
        col("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
        col("Reason", "reason is a brief CamelCase string that describes any failure."),
        col("Age", kAgeDescription),
        col("VolumeMode",
            "volumeMode defines if a volume is intended to be used with a "
            "formatted filesystem or to remain in raw block state.",
            1)};
  }
  if (type.StorageKey() == kPvcKey) {
    return std::vector<PrinterColumn>{
        name,
        col("Status", "phase represents the current phase of PersistentVolumeClaim."),
        col("Volume",
            "volumeName is the binding reference to the PersistentVolume backing this "
            "claim."),
        col("Capacity", "capacity represents the actual resources of the underlying volume."),
        col("Access Modes",
            "accessModes contains the actual access modes the volume backing "
            "the PVC has."),
        col("StorageClass", "StorageClass of the pvc"),
        col("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
        col("Age", kAgeDescription),
        col("VolumeMode", "volumeMode defines what type of volume is required by the claim.", 1)};
  }
  return std::nullopt;
}

json StorageTableCells(const ResourceType& type, const json& o, const std::string& age) {
  const json spec = o.contains("spec") && o["spec"].is_object() ? o["spec"] : json::object();
  if (type.StorageKey() == kStorageClassKey) {
    std::string name = NameOf(o);
    if (IsDefaultClass(o)) name += " (default)";
    return {
        name,
        Str(o, "provisioner"),
        StrOr(o, "reclaimPolicy", "Delete"),
        StrOr(o, "volumeBindingMode", "Immediate"),
        o.contains("allowVolumeExpansion") && o["allowVolumeExpansion"] == true ? "true" : "false",
        age};
  }
  if (type.StorageKey() == kPvKey) {
    std::string claim;
    if (spec.contains("claimRef") && spec["claimRef"].is_object()) {
      claim = Str(spec["claimRef"], "namespace") + "/" + Str(spec["claimRef"], "name");
    }
    return {NameOf(o),
            StorageOf(o, "spec", "capacity"),
            AccessModesString(spec.value("accessModes", json::array())),
            Str(spec, "persistentVolumeReclaimPolicy"),
            ShownPhase(o),
            claim,
            Str(spec, "storageClassName"),
            AttributesClass(o),
            StringAt(o, "status", "reason"),
            age,
            VolumeMode(o)};
  }
  if (type.StorageKey() == kPvcKey) {
    std::string volume = Str(spec, "volumeName");
    std::string capacity, modes;
    if (!volume.empty()) {
      capacity = StorageOf(o, "status", "capacity");
      const json& status = o.contains("status") ? o["status"] : json::object();
      modes = AccessModesString(status.is_object() ? status.value("accessModes", json()) : json());
    }
    return {NameOf(o),          ShownPhase(o), volume,
            capacity,           modes,         Str(spec, "storageClassName"),
            AttributesClass(o), age,           VolumeMode(o)};
  }
  return nullptr;
}

}  // namespace kubetrain::localkube
