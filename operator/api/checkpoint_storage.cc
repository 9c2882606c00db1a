#include "operator/api/checkpoint_storage.h"

#include <algorithm>
#include <regex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "operator/api/decode.h"
#include "operator/api/defaults.h"
#include "operator/api/render.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

constexpr char kCheckpointPath[] = "spec.checkpoint";
constexpr char kCheckpointFlag[] = "--checkpoint-dir";

void AddError(FieldErrors* errors, std::string path, std::string message) {
  errors->push_back({std::move(path), std::move(message)});
}

std::string CheckpointField(const std::string& key) {
  return absl::StrCat(kCheckpointPath, ".", key);
}

// RFC 1123 subdomain: dot-separated labels, at most 253 characters (object names).
bool IsDns1123Subdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(s, '.')) {
    if (!IsDns1123Label(label)) return false;
  }
  return true;
}

// A resource.Quantity as the API server parses it: 1Gi, 500M, 1.5e9, 2048.
bool IsQuantity(const std::string& s) {
  static const std::regex kQuantity(
      R"([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?[0-9]+))?)");
  return s.size() <= 64 && std::regex_match(s, kQuantity);
}

bool IsZeroOrNegative(const std::string& s) {
  if (absl::StartsWith(s, "-")) return true;
  for (char c : s) {
    if (c >= '1' && c <= '9') return false;
    if (c != '0' && c != '.' && c != '+') break;
  }
  return true;
}

void ValidateStorage(const json& requests, const std::string& path, FieldErrors* errors) {
  if (!requests.is_object() || !requests.contains("storage")) {
    AddError(errors, path + ".storage", "required: the size of the claim, e.g. \"1Gi\"");
    return;
  }
  const json& storage = requests["storage"];
  std::string text;
  if (storage.is_string()) {
    text = storage.get<std::string>();
  } else if (storage.is_number_integer()) {
    text = storage.dump();
  } else {
    AddError(errors, path + ".storage",
             "must be a quantity such as \"1Gi\", got " + Describe(storage));
    return;
  }
  if (!IsQuantity(text)) {
    AddError(errors, path + ".storage",
             "must be a quantity such as \"1Gi\" or \"500Mi\", got " + Describe(storage));
  } else if (IsZeroOrNegative(text)) {
    AddError(errors, path + ".storage", "must be greater than zero, got " + Describe(storage));
  }
}

void ValidateTemplate(const json& tmpl, FieldErrors* errors) {
  const std::string path = CheckpointField("volumeClaimTemplate");
  if (tmpl.contains("metadata")) {
    const json& meta = tmpl["metadata"];
    if (!meta.is_object()) {
      AddError(errors, path + ".metadata", "must be an object, got " + Describe(meta));
    } else {
      for (const char* key : {"name", "namespace"}) {
        if (meta.contains(key)) {
          AddError(errors, absl::StrCat(path, ".metadata.", key),
                   "not allowed: the claim is <job>-checkpoint in the job's namespace; remove it");
        }
      }
    }
  }
  if (!tmpl.contains("spec")) {
    AddError(errors, path + ".spec",
             "required: a PersistentVolumeClaim spec with resources.requests.storage");
    return;
  }
  const json& spec = tmpl["spec"];
  if (!spec.is_object()) {
    AddError(errors, path + ".spec", "must be an object, got " + Describe(spec));
    return;
  }
  const std::string resources = path + ".spec.resources";
  if (spec.contains("resources") && !spec["resources"].is_object()) {
    AddError(errors, resources, "must be an object, got " + Describe(spec["resources"]));
  } else {
    const json requests =
        spec.contains("resources") ? spec["resources"].value("requests", json()) : json();
    ValidateStorage(requests, resources + ".requests", errors);
  }
  if (!spec.contains("accessModes")) return;
  const json& modes = spec["accessModes"];
  const std::vector<std::string> allowed = {"ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany",
                                            "ReadOnlyMany"};
  if (!modes.is_array()) {
    AddError(errors, path + ".spec.accessModes", "must be a list, got " + Describe(modes));
    return;
  }
  bool writable = false;
  for (size_t i = 0; i < modes.size(); ++i) {
    const json& m = modes[i];
    if (!m.is_string() || std::find(allowed.begin(), allowed.end(), m) == allowed.end()) {
      AddError(errors, absl::StrCat(path, ".spec.accessModes[", i, "]"),
               absl::StrCat("unsupported value ", Describe(m),
                            "; allowed: ", absl::StrJoin(allowed, ", ")));
      return;
    }
    writable |= m != "ReadOnlyMany";
  }
  if (!modes.empty() && !writable) {
    AddError(errors, path + ".spec.accessModes",
             "the chief writes its checkpoints there: include ReadWriteOnce (or ReadWriteOncePod, "
             "ReadWriteMany)");
  }
}

void ValidateMountPath(const std::string& mount_path, FieldErrors* errors) {
  const std::string path = CheckpointField("mountPath");
  if (!absl::StartsWith(mount_path, "/") || mount_path == "/") {
    AddError(errors, path,
             absl::StrCat("must be an absolute path below /, e.g. ", kDefaultCheckpointMountPath,
                          ", got ", Describe(mount_path)));
    return;
  }
  for (absl::string_view part : absl::StrSplit(mount_path, '/')) {
    if (part == "..")
      AddError(errors, path, "must not contain \"..\", got " + Describe(mount_path));
    if (part == "..") return;
  }
}

// The chief's training container and its pod spec against the mount the operator adds.
void ValidateChiefTemplate(const TrainingJob& job, const CheckpointStorage& storage,
                           FieldErrors* errors) {
  ReplicaType chief = job.spec.replica_specs.count(ReplicaType::kChief) ? ReplicaType::kChief
                                                                        : ReplicaType::kWorker;
  auto it = job.spec.replica_specs.find(chief);
  if (it == job.spec.replica_specs.end()) return;
  const json& tmpl = it->second.template_;
  if (!tmpl.is_object() || !tmpl.contains("spec") || !tmpl["spec"].is_object()) return;
  const json& spec = tmpl["spec"];
  const std::string base = absl::StrCat("spec.replicaSpecs.", Name(chief), ".template.spec");
  if (spec.contains("volumes") && spec["volumes"].is_array()) {
    for (size_t i = 0; i < spec["volumes"].size(); ++i) {
      if (StringField(spec["volumes"][i], "name") == kCheckpointVolumeName) {
        AddError(errors, absl::StrCat(base, ".volumes[", i, "].name"),
                 absl::StrCat("\"", kCheckpointVolumeName,
                              "\" is the volume the operator adds for spec.checkpoint; rename it"));
      }
    }
  }
  if (!spec.contains("containers") || !spec["containers"].is_array()) return;
  const json& containers = spec["containers"];
  for (size_t i = 0; i < containers.size(); ++i) {
    const json& c = containers[i];
    if (StringField(c, "name") != kDefaultContainerName) continue;
    const std::string at = absl::StrCat(base, ".containers[", i, "]");
    if (ContainerCheckpointDir(c)) {
      AddError(
          errors, at,
          absl::StrCat(
              "sets the checkpoint directory (", kCheckpointFlag, " or ", kCheckpointDirEnv,
              "), which spec.checkpoint sets to ",
              CheckpointDirOnClaim(storage.mount_path, job.metadata.name),
              " on the claim; remove it, or remove spec.checkpoint and mount a volume yourself"));
    }
    if (!c.contains("volumeMounts") || !c["volumeMounts"].is_array()) continue;
    for (size_t m = 0; m < c["volumeMounts"].size(); ++m) {
      std::string mounted(absl::StripSuffix(StringField(c["volumeMounts"][m], "mountPath"), "/"));
      if (mounted == absl::StripSuffix(storage.mount_path, "/")) {
        AddError(errors, absl::StrCat(at, ".volumeMounts[", m, "].mountPath"),
                 absl::StrCat("spec.checkpoint.mountPath mounts the checkpoint claim at ", mounted,
                              "; mount this volume elsewhere or change spec.checkpoint.mountPath"));
      }
    }
  }
}

const json* FindContainer(const json& pod_spec, const std::string& name) {
  if (!pod_spec.is_object() || !pod_spec.contains("containers")) return nullptr;
  const json& containers = pod_spec["containers"];
  if (!containers.is_array()) return nullptr;
  for (const json& c : containers) {
    if (c.is_object() && StringField(c, "name") == name) return &c;
  }
  return nullptr;
}

// Whether `volume` (an entry of a pod's volumes) keeps its data when the pod goes.
bool IsDurableVolume(const json& volume) {
  return volume.is_object() && (volume.contains("persistentVolumeClaim") || volume.contains("nfs"));
}

bool AtOrUnder(absl::string_view dir, absl::string_view mount) {
  dir = absl::StripSuffix(dir, "/");
  mount = absl::StripSuffix(mount, "/");
  return dir == mount ||
         (absl::StartsWith(dir, mount) && dir.size() > mount.size() && dir[mount.size()] == '/') ||
         mount.empty();
}

}  // namespace

std::optional<CheckpointStorage> DecodeCheckpoint(const json& v, FieldErrors* errors) {
  if (!v.is_object()) {
    AddError(errors, kCheckpointPath, "must be an object, got " + Describe(v));
    return std::nullopt;
  }
  CheckpointStorage s;
  const std::vector<std::string> known = {"claimName", "volumeClaimTemplate", "mountPath",
                                          "reclaimPolicy"};
  for (const auto& [key, value] : v.items()) {
    const std::string path = CheckpointField(key);
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      AddError(errors, path, "unknown field; allowed: " + absl::StrJoin(known, ", "));
    } else if (key == "volumeClaimTemplate") {
      if (value.is_object()) {
        s.volume_claim_template = value;
      } else {
        AddError(errors, path, "must be an object, got " + Describe(value));
      }
    } else if (!value.is_string()) {
      AddError(errors, path, "must be a string, got " + Describe(value));
    } else if (key == "claimName") {
      s.claim_name = value.get<std::string>();
    } else if (key == "mountPath") {
      s.mount_path = value.get<std::string>();
    } else {
      ReclaimPolicy policy;
      if (Parse(value.get<std::string>(), &policy)) {
        s.reclaim_policy = policy;
      } else {
        AddError(errors, path,
                 absl::StrCat("unsupported value ", Describe(value),
                              "; allowed: ", absl::StrJoin(ReclaimPolicyNames(), ", ")));
      }
    }
  }
  return s;
}

json ToJson(const CheckpointStorage& s) {
  json out = json::object();
  if (!s.claim_name.empty()) out["claimName"] = s.claim_name;
  if (s.volume_claim_template) out["volumeClaimTemplate"] = *s.volume_claim_template;
  if (!s.mount_path.empty()) out["mountPath"] = s.mount_path;
  if (s.reclaim_policy) out["reclaimPolicy"] = Name(*s.reclaim_policy);
  return out;
}

void SetCheckpointDefaults(CheckpointStorage* s) {
  if (s->mount_path.empty()) s->mount_path = kDefaultCheckpointMountPath;
  if (s->volume_claim_template && !s->reclaim_policy) s->reclaim_policy = ReclaimPolicy::kDelete;
}

void ValidateCheckpoint(const TrainingJob& job, FieldErrors* errors) {
  if (!job.spec.checkpoint) return;
  const CheckpointStorage& s = *job.spec.checkpoint;
  const bool claim = !s.claim_name.empty();
  if (!claim && !s.volume_claim_template) {
    AddError(
        errors, kCheckpointPath,
        "set claimName (an existing PersistentVolumeClaim) or volumeClaimTemplate (a claim the "
        "operator creates, named <job>-checkpoint)");
  } else if (claim && s.volume_claim_template) {
    AddError(errors, CheckpointField("claimName"),
             "set claimName or volumeClaimTemplate, not both: claimName mounts an existing claim, "
             "volumeClaimTemplate makes one for the job");
  }
  if (claim && !IsDns1123Subdomain(s.claim_name)) {
    AddError(
        errors, CheckpointField("claimName"),
        "must be a PersistentVolumeClaim name (lower-case letters, digits, '-' and '.'), got " +
            Describe(s.claim_name));
  }
  if (claim && !s.volume_claim_template && s.reclaim_policy == ReclaimPolicy::kDelete) {
    AddError(errors, CheckpointField("reclaimPolicy"),
             "Delete applies to a claim the operator creates (volumeClaimTemplate); the claim "
             "claimName names is never deleted: remove reclaimPolicy or set Retain");
  }
  if (s.volume_claim_template) ValidateTemplate(*s.volume_claim_template, errors);
  ValidateMountPath(s.mount_path.empty() ? kDefaultCheckpointMountPath : s.mount_path, errors);
  ValidateChiefTemplate(job, s, errors);
}

std::string CheckpointClaimName(const TrainingJob& job) {
  if (job.spec.checkpoint && !job.spec.checkpoint->claim_name.empty()) {
    return job.spec.checkpoint->claim_name;
  }
  return job.metadata.name + "-checkpoint";
}

std::string CheckpointDirOnClaim(const std::string& mount_path, const std::string& job_name) {
  return absl::StrCat(absl::StripSuffix(mount_path, "/"), "/", job_name);
}

json BuildCheckpointClaim(const TrainingJob& job) {
  const CheckpointStorage& s = *job.spec.checkpoint;
  const json tmpl = s.volume_claim_template.value_or(json::object());
  json meta =
      tmpl.contains("metadata") && tmpl["metadata"].is_object() ? tmpl["metadata"] : json::object();
  json labels =
      meta.contains("labels") && meta["labels"].is_object() ? meta["labels"] : json::object();
  for (const auto& [k, v] : JobLabels(job)) labels[k] = v;
  meta["labels"] = labels;
  meta["name"] = CheckpointClaimName(job);
  meta["namespace"] = Namespace(job);
  // Retain: no owner, so the garbage collector leaves the claim (and its checkpoints) when the
  // job is deleted, and a later job of the same name mounts it and resumes.
  if (s.reclaim_policy.value_or(ReclaimPolicy::kDelete) == ReclaimPolicy::kDelete &&
      !job.metadata.uid.empty()) {
    meta["ownerReferences"] = JobOwnerReferences(job);
  }
  json spec = tmpl.contains("spec") && tmpl["spec"].is_object() ? tmpl["spec"] : json::object();
  if (!spec.contains("accessModes")) spec["accessModes"] = json::array({"ReadWriteOnce"});
  return {
      {"apiVersion", "v1"}, {"kind", "PersistentVolumeClaim"}, {"metadata", meta}, {"spec", spec}};
}

void MountCheckpointClaim(json* pod_spec, const std::string& container, const std::string& claim,
                          const std::string& mount_path, const std::string& dir) {
  json& volumes = (*pod_spec)["volumes"];
  if (!volumes.is_array()) volumes = json::array();
  volumes.push_back(
      {{"name", kCheckpointVolumeName}, {"persistentVolumeClaim", {{"claimName", claim}}}});
  if (!pod_spec->contains("containers") || !(*pod_spec)["containers"].is_array()) return;
  for (json& c : (*pod_spec)["containers"]) {
    if (!c.is_object() || StringField(c, "name") != container) continue;
    json& mounts = c["volumeMounts"];
    if (!mounts.is_array()) mounts = json::array();
    mounts.push_back({{"name", kCheckpointVolumeName}, {"mountPath", mount_path}});
    SetContainerEnv(&c, {{"name", kCheckpointDirEnv}, {"value", dir}});
  }
}

std::optional<std::string> ContainerCheckpointDir(const json& container) {
  for (const char* list : {"command", "args"}) {
    if (!container.contains(list) || !container[list].is_array()) continue;
    const json& args = container[list];
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_string()) continue;
      const std::string& a = args[i].get_ref<const std::string&>();
      absl::string_view value = a;
      if (absl::ConsumePrefix(&value, absl::StrCat(kCheckpointFlag, "=")))
        return std::string(value);
      if (a == kCheckpointFlag && i + 1 < args.size() && args[i + 1].is_string()) {
        return args[i + 1].get<std::string>();
      }
    }
  }
  if (container.contains("env") && container["env"].is_array()) {
    for (const json& e : container["env"]) {
      if (StringField(e, "name") == kCheckpointDirEnv && e.contains("value")) {
        return StringField(e, "value");
      }
    }
  }
  return std::nullopt;
}

bool CheckpointsOutlivePod(const json& pod, const std::string& container, bool unset_is_in_pod) {
  const json spec = pod.is_object() ? pod.value("spec", json::object()) : json::object();
  const json* c = FindContainer(spec, container);
  if (c == nullptr) return false;
  std::optional<std::string> dir = ContainerCheckpointDir(*c);
  if (!dir && unset_is_in_pod) return false;
  if (!c->contains("volumeMounts") || !(*c)["volumeMounts"].is_array()) return false;
  const json volumes = spec.value("volumes", json::array());
  for (const json& m : (*c)["volumeMounts"]) {
    if (!m.is_object() || m.value("readOnly", false) == true) continue;
    const std::string mount_path = StringField(m, "mountPath");
    if (mount_path.empty() || (dir && !AtOrUnder(*dir, mount_path))) continue;
    if (!volumes.is_array()) return false;
    for (const json& v : volumes) {
      if (StringField(v, "name") == StringField(m, "name") && IsDurableVolume(v)) return true;
    }
  }
  return false;
}

void MarkCheckpointDurability(json* pod, const std::string& container, bool unset_is_in_pod) {
  const bool durable = CheckpointsOutlivePod(*pod, container, unset_is_in_pod);
  json& spec = (*pod)["spec"];
  if (!spec.is_object() || !spec.contains("containers") || !spec["containers"].is_array()) return;
  for (json& c : spec["containers"]) {
    if (!c.is_object() || StringField(c, "name") != container) continue;
    SetContainerEnv(&c, {{"name", kCheckpointDurableEnv}, {"value", durable ? "true" : "false"}});
  }
}

bool MarkedDurable(const json& pod, const std::string& container) {
  const json spec = pod.is_object() ? pod.value("spec", json::object()) : json::object();
  const json* c = FindContainer(spec, container);
  if (c == nullptr || !c->contains("env") || !(*c)["env"].is_array()) return true;
  for (const json& e : (*c)["env"]) {
    if (StringField(e, "name") == kCheckpointDurableEnv) return StringField(e, "value") != "false";
  }
  return true;
}

}  // namespace kubetrain::api
