// TFJob → TrainingJob (docs/decisions/0007-kubeflow-tfjob.md): ConvertTfJob, the operator's
// DecodeTfJob, and a status written back in Kubeflow's terms (TfJobStatus) and read again. The
// objects the operator makes for a TFJob (TF_CONFIG, pods, Services) are in tfjob_objects.cc.
#include "operator/api/tfjob.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/tfjob_internal.h"
#include "operator/api/types.h"
#include "operator/api/validation.h"

namespace kubetrain::api {

using nlohmann::json;

namespace tfjob_internal {
namespace {

// Kubeflow's replica types; a key is matched without regard to case, as its defaulting does
// ("worker" is Worker).
const std::vector<std::string>& TfJobReplicaTypes() {
  static const std::vector<std::string> kTypes = {"Chief", "Master", "PS", "Worker", "Evaluator"};
  return kTypes;
}

}  // namespace

std::string CanonicalType(const std::string& key) {
  for (const std::string& t : TfJobReplicaTypes()) {
    if (absl::EqualsIgnoreCase(key, t)) return t;
  }
  return "";
}

ReplicaSpecMap ReplicaSpecs(const json& tfjob) {
  ReplicaSpecMap out;
  if (!tfjob.is_object()) return out;
  auto spec = tfjob.find("spec");
  if (spec == tfjob.end() || !spec->is_object()) return out;
  auto specs = spec->find("tfReplicaSpecs");
  if (specs == spec->end() || !specs->is_object()) return out;
  for (const auto& [key, rs] : specs->items()) {
    std::string type = CanonicalType(key);
    if (!type.empty() && !out.count(type)) out[type] = {key, &rs};
  }
  return out;
}

std::string CanonicalKey(const ReplicaSpecMap& specs, ReplicaType type) {
  if (type == ReplicaType::kChief && specs.count("Master") && !specs.count("Chief")) {
    return "Master";
  }
  return Name(type);
}

}  // namespace tfjob_internal

namespace {

using tfjob_internal::CanonicalKey;
using tfjob_internal::CanonicalType;
using tfjob_internal::ReplicaSpecs;

constexpr char kReplicaSpecsPath[] = "spec.tfReplicaSpecs";

void Error(FieldErrors* errors, std::string path, std::string message) {
  errors->push_back({std::move(path), std::move(message)});
}

// Refuses every key of `obj` not in `known`: a misspelt field is never silently dropped.
void OnlyKnown(const json& obj, const std::string& path, const std::set<std::string>& known,
               FieldErrors* errors) {
  for (const auto& [key, _] : obj.items()) {
    if (!known.count(key)) {
      std::string allowed;
      for (const std::string& k : known) absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", k);
      Error(errors, path.empty() ? key : absl::StrCat(path, ".", key),
            absl::StrCat("unknown field (a TFJob has ", allowed, " here)"));
    }
  }
}

// The tensorflow container becomes the training container ("kubetrain"), its tfjob-port the
// port peers dial ("kubetrain"): names only, nothing else of the template changes.
void ConvertTemplate(json* pod_template, const std::string& path, FieldErrors* errors) {
  const std::string containers_path = path + ".spec.containers";
  json* containers = Containers(pod_template);
  if (containers == nullptr || containers->empty()) {
    Error(errors, containers_path, "required: at least one container, named \"tensorflow\"");
    return;
  }
  json* training = nullptr;
  for (json& c : *containers) {
    if (!c.is_object()) continue;
    std::string name = StringField(c, "name");
    if (name == kTfJobContainerName) training = &c;
    if (name == kDefaultContainerName) {
      Error(errors, containers_path,
            absl::StrCat("a container named \"", kDefaultContainerName,
                         "\" clashes with the name the \"tensorflow\" container takes; rename it"));
      return;
    }
  }
  if (training == nullptr) {
    Error(errors, containers_path,
          "no container named \"tensorflow\": Kubeflow gives TF_CONFIG to the container of that "
          "name, and so does kubetrain");
    return;
  }
  (*training)["name"] = kDefaultContainerName;
  if (training->contains("ports") && (*training)["ports"].is_array()) {
    for (json& p : (*training)["ports"]) {
      if (p.is_object() && StringField(p, "name") == kTfJobPortName) p["name"] = kDefaultPortName;
    }
  }
}

void ConvertReplicaSpecs(const json& specs, json* out, std::vector<std::string>* notes,
                         FieldErrors* errors) {
  if (!specs.is_object() || specs.empty()) {
    Error(errors, kReplicaSpecsPath, "required: a map of replica type to its spec");
    return;
  }
  std::map<std::string, std::string> seen;  // canonical type → key written
  for (const auto& [key, rs] : specs.items()) {
    const std::string path = absl::StrCat(kReplicaSpecsPath, ".", key);
    std::string type = CanonicalType(key);
    if (type.empty()) {
      Error(errors, path,
            "unknown replica type (a TFJob has Chief, Master, PS, Worker, Evaluator)");
      continue;
    }
    if (seen.count(type)) {
      Error(errors, path, absl::StrCat("repeats ", seen[type], " (replica types ignore case)"));
      continue;
    }
    seen[type] = key;
    if (!rs.is_object()) {
      Error(errors, path, absl::StrCat("must be an object, got ", Describe(rs)));
      continue;
    }
    OnlyKnown(rs, path, {"replicas", "restartPolicy", "template"}, errors);
    json converted = json::object();
    // Kubeflow's defaults, written out where kubetrain's differ (restartPolicy: ExitCode or
    // OnFailure there, Never here).
    converted["replicas"] = rs.contains("replicas") ? rs["replicas"] : json(1);
    converted["restartPolicy"] = rs.contains("restartPolicy") ? rs["restartPolicy"] : json("Never");
    converted["template"] = rs.contains("template") ? rs["template"] : json::object();
    ConvertTemplate(&converted["template"], path + ".template", errors);
    (*out)[type == "Master" ? "Chief" : type] = std::move(converted);
  }
  if (seen.count("Chief") && seen.count("Master")) {
    Error(errors, kReplicaSpecsPath,
          absl::StrCat("has both ", seen["Chief"], " and ", seen["Master"],
                       ": they are one role (at most one Chief or Master)"));
  }
  if (seen.count("Master")) {
    notes->push_back(absl::StrCat(kReplicaSpecsPath, ".", seen["Master"],
                                  ": becomes the Chief; TF_CONFIG names its task type \"chief\", "
                                  "not \"master\""));
  }
}

void ConvertRunPolicy(const json& rp, json* out, std::vector<std::string>* notes,
                      FieldErrors* errors) {
  const std::string path = "spec.runPolicy";
  if (!rp.is_object()) {
    Error(errors, path, absl::StrCat("must be an object, got ", Describe(rp)));
    return;
  }
  OnlyKnown(rp, path,
            {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
             "schedulingPolicy", "suspend", "managedBy"},
            errors);
  *out = json::object();
  for (const char* field : {"ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
                            "suspend", "cleanPodPolicy"}) {
    if (rp.contains(field)) (*out)[field] = rp[field];
  }
  // Kubeflow's own value means "this operator"; another controller's (Kueue's MultiKueue)
  // carries over, so the converted job is left to that controller too.
  if (rp.contains("managedBy")) {
    if (rp["managedBy"].is_string() && rp["managedBy"] != kManagedByKubeflow &&
        !rp["managedBy"].get<std::string>().empty()) {
      (*out)["managedBy"] = rp["managedBy"];
    } else {
      notes->push_back(path + ".managedBy: dropped; the kubetrain operator manages the job");
    }
  }
  if (!rp.contains("schedulingPolicy")) return;
  const json& sp = rp["schedulingPolicy"];
  const std::string sp_path = path + ".schedulingPolicy";
  if (!sp.is_object()) {
    Error(errors, sp_path, absl::StrCat("must be an object, got ", Describe(sp)));
    return;
  }
  OnlyKnown(sp, sp_path,
            {"minAvailable", "queue", "minResources", "priorityClass", "scheduleTimeoutSeconds"},
            errors);
  json& converted = (*out)["schedulingPolicy"] = json::object();
  for (const char* field : {"minAvailable", "queue", "priorityClass"}) {
    if (sp.contains(field)) converted[field] = sp[field];
  }
  for (const char* field : {"minResources", "scheduleTimeoutSeconds"}) {
    if (sp.contains(field)) {
      notes->push_back(absl::StrCat(sp_path, ".", field,
                                    ": dropped; kubetrain's Volcano PodGroup takes minAvailable, "
                                    "queue and priorityClass"));
    }
  }
}

// A condition's reason or message with one kind's name for the other's.
json Reworded(const json& text, const std::string& from, const std::string& to) {
  if (!text.is_string()) return text;
  return absl::StrReplaceAll(text.get<std::string>(), {{from, to}});
}

// A TFJob status (TfJobStatus) as the TrainingJob model's: Master's counts are the Chief's.
json ModelStatus(const json& status) {
  json out = status;
  if (out.contains("conditions") && out["conditions"].is_array()) {
    for (json& c : out["conditions"]) {
      if (!c.is_object()) continue;
      for (const char* field : {"reason", "message"}) {
        if (c.contains(field)) c[field] = Reworded(c[field], "TFJob", "TrainingJob");
      }
    }
  }
  if (out.contains("replicaStatuses") && out["replicaStatuses"].is_object()) {
    json by_type = json::object();
    for (const auto& [key, rs] : out["replicaStatuses"].items()) {
      std::string canonical = CanonicalType(key);
      by_type[canonical == "Master" ? "Chief" : canonical.empty() ? key : canonical] = rs;
    }
    out["replicaStatuses"] = std::move(by_type);
  }
  return out;
}

}  // namespace

bool IsTfJob(const json& doc) {
  return doc.is_object() && StringField(doc, "apiVersion") == kTfJobApiVersion &&
         StringField(doc, "kind") == kTfJobKind;
}

TfJobConversion ConvertTfJob(const json& tfjob, FieldErrors* errors) {
  TfJobConversion result;
  json& out = result.training_job;
  out = {{"apiVersion", kApiVersion}, {"kind", kKind}, {"metadata", json::object()}};
  if (!IsTfJob(tfjob)) {
    Error(errors, "", "not a TFJob: apiVersion must be kubeflow.org/v1 and kind TFJob");
    return result;
  }
  OnlyKnown(tfjob, "", {"apiVersion", "kind", "metadata", "spec", "status"}, errors);
  // A new manifest: what a user writes of metadata, never what the API server set.
  if (tfjob.contains("metadata") && tfjob["metadata"].is_object()) {
    for (const char* field : {"name", "generateName", "namespace", "labels", "annotations"}) {
      if (tfjob["metadata"].contains(field)) out["metadata"][field] = tfjob["metadata"][field];
    }
  }
  if (!tfjob.contains("spec") || !tfjob["spec"].is_object()) {
    Error(errors, "spec", "required: an object with tfReplicaSpecs");
    return result;
  }
  const json& spec = tfjob["spec"];
  OnlyKnown(spec, "spec", {"runPolicy", "successPolicy", "tfReplicaSpecs", "enableDynamicWorker"},
            errors);
  json& out_spec = out["spec"] = json::object();
  json& replica_specs = out_spec["replicaSpecs"] = json::object();
  ConvertReplicaSpecs(spec.value("tfReplicaSpecs", json()), &replica_specs, &result.notes, errors);
  json run_policy = json::object();
  if (spec.contains("runPolicy")) {
    ConvertRunPolicy(spec["runPolicy"], &run_policy, &result.notes, errors);
  }
  // Kubeflow's defaults where kubetrain's differ: pods are kept after the job (None), and
  // without a backoffLimit Kubeflow restarts without end.
  if (!run_policy.contains("cleanPodPolicy")) run_policy["cleanPodPolicy"] = "None";
  if (!run_policy.contains("backoffLimit")) {
    result.notes.push_back(absl::StrCat(
        "spec.runPolicy.backoffLimit: unset, which Kubeflow takes as no limit; the TrainingJob "
        "gets kubetrain's default of ",
        kDefaultBackoffLimit, " restarts (set it to allow more)"));
  }
  out_spec["runPolicy"] = std::move(run_policy);
  if (spec.contains("successPolicy")) {
    const json& sp = spec["successPolicy"];
    const bool chief = replica_specs.contains("Chief");
    if (sp == "") {
      out_spec["successPolicy"] = "ChiefOnly";
    } else if (sp == "AllWorkers" && chief) {
      // Kubeflow's status rule: with a Chief or Master the job succeeds when it does, and the
      // success policy is not read.
      out_spec["successPolicy"] = "ChiefOnly";
      result.notes.push_back(
          "spec.successPolicy: AllWorkers counts in Kubeflow only without a Chief or Master; "
          "this job succeeds when its Chief does (ChiefOnly), as it would there");
    } else if (sp == "AllWorkers") {
      out_spec["successPolicy"] = "AllWorkers";
    } else {
      Error(errors, "spec.successPolicy",
            absl::StrCat("must be \"\" or \"AllWorkers\", got ", Describe(sp)));
    }
  }
  if (spec.contains("enableDynamicWorker")) {
    const json& dynamic = spec["enableDynamicWorker"];
    if (!dynamic.is_boolean()) {
      Error(errors, "spec.enableDynamicWorker",
            absl::StrCat("must be true or false, got ", Describe(dynamic)));
    } else if (dynamic.get<bool>()) {
      // Its sparse TF_CONFIG (a worker sees only the ps and itself) is not one kubetrain-worker
      // can train with, and the job would still fail with its first lost worker.
      Error(errors, "spec.enableDynamicWorker",
            "true is not supported: kubetrain's programs need the whole cluster in TF_CONFIG, "
            "which Kubeflow's dynamic workers do not get; remove it (or set false), or, for "
            "workers that may come and go while the job trains, run it as a kubetrain "
            "TrainingJob with spec.elastic (kubetrain convert, then add spec.elastic)");
    }
  }
  return result;
}

std::string TfJobPath(const json& tfjob, const std::string& path) {
  const std::string prefix = "spec.replicaSpecs";
  if (!absl::StartsWith(path, prefix)) return path;
  std::string rest = path.substr(prefix.size());  // ".Chief.template..." or ""
  if (rest.empty() || rest[0] != '.') return kReplicaSpecsPath + rest;
  size_t end = rest.find('.', 1);
  std::string type = rest.substr(1, end == std::string::npos ? std::string::npos : end - 1);
  std::string tail = end == std::string::npos ? "" : rest.substr(end);
  auto specs = ReplicaSpecs(tfjob);
  std::string key = type;
  if (auto it = specs.find(type); it != specs.end()) {
    key = it->second.first;
  } else if (type == "Chief") {
    if (auto master = specs.find("Master"); master != specs.end()) key = master->second.first;
  }
  return absl::StrCat(kReplicaSpecsPath, ".", key, tail);
}

TrainingJob DecodeTfJob(const json& tfjob, FieldErrors* errors) {
  const size_t before = errors->size();
  TfJobConversion c = ConvertTfJob(tfjob, errors);
  json doc = std::move(c.training_job);
  if (tfjob.contains("metadata") && tfjob["metadata"].is_object()) {
    doc["metadata"] = tfjob["metadata"];
  }
  if (tfjob.contains("status") && tfjob["status"].is_object()) {
    doc["status"] = ModelStatus(tfjob["status"]);
  }
  TrainingJob job;
  if (errors->size() == before) {
    job = DecodeAndValidate(doc, errors);
    for (size_t i = before; i < errors->size(); ++i) {
      (*errors)[i].path = TfJobPath(tfjob, (*errors)[i].path);
    }
  } else {
    // A spec that does not convert: the job's metadata and status are still read, so that the
    // operator can fail it with the reason in its status.
    FieldErrors ignored;
    doc.erase("spec");
    job = Decode(doc, &ignored);
  }
  job.api_version = kTfJobApiVersion;
  job.kind = kTfJobKind;
  return job;
}

json TfJobStatus(const TrainingJobStatus& status, const json& tfjob) {
  json out = ToJson(status);
  if (out.contains("conditions")) {
    for (json& c : out["conditions"]) {
      for (const char* field : {"reason", "message"}) {
        if (c.contains(field)) c[field] = Reworded(c[field], "TrainingJob", "TFJob");
      }
    }
  }
  if (out.contains("replicaStatuses") && out["replicaStatuses"].contains("Chief")) {
    const std::string key = CanonicalKey(ReplicaSpecs(tfjob), ReplicaType::kChief);
    if (key != "Chief") {
      out["replicaStatuses"][key] = std::move(out["replicaStatuses"]["Chief"]);
      out["replicaStatuses"].erase("Chief");
    }
  }
  return out;
}

}  // namespace kubetrain::api
