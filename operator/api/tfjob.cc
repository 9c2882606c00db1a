#include "operator/api/tfjob.h"

#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/job_secret_env.h"
#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/types.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

constexpr char kReplicaSpecsPath[] = "spec.tfReplicaSpecs";

// Kubeflow's replica types; a key is matched without regard to case, as its defaulting does
// ("worker" is Worker).
const std::vector<std::string>& TfJobReplicaTypes() {
  static const std::vector<std::string> kTypes = {"Chief", "Master", "PS", "Worker", "Evaluator"};
  return kTypes;
}

std::string CanonicalType(const std::string& key) {
  for (const std::string& t : TfJobReplicaTypes()) {
    if (absl::EqualsIgnoreCase(key, t)) return t;
  }
  return "";
}

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

// The TFJob's replica specs by canonical type, each with the key it was written under.
std::map<std::string, std::pair<std::string, const json*>> ReplicaSpecs(const json& tfjob) {
  std::map<std::string, std::pair<std::string, const json*>> out;
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

int Replicas(const json& rs) {
  if (rs.is_object() && rs.contains("replicas") && rs["replicas"].is_number_integer()) {
    return rs["replicas"].get<int>();
  }
  return 1;  // Kubeflow's default
}

const json* Containers(const json& pod_template) {
  if (!pod_template.is_object()) return nullptr;
  auto spec = pod_template.find("spec");
  if (spec == pod_template.end() || !spec->is_object()) return nullptr;
  auto containers = spec->find("containers");
  if (containers == spec->end() || !containers->is_array()) return nullptr;
  return &*containers;
}

json* Containers(json* pod_template) {
  return const_cast<json*>(Containers(std::as_const(*pod_template)));
}

// The containerPort of the tensorflow container's tfjob-port, else 2222 (GetPortFromTFJob).
int TfJobPort(const json& rs) {
  if (!rs.is_object() || !rs.contains("template")) return kDefaultPort;
  const json* containers = Containers(rs["template"]);
  if (containers == nullptr) return kDefaultPort;
  for (const json& c : *containers) {
    if (!c.is_object() || StringField(c, "name") != kTfJobContainerName) continue;
    if (!c.contains("ports") || !c["ports"].is_array()) continue;
    for (const json& p : c["ports"]) {
      if (p.is_object() && StringField(p, "name") == kTfJobPortName &&
          p.contains("containerPort") && p["containerPort"].is_number_integer()) {
        return p["containerPort"].get<int>();
      }
    }
  }
  return kDefaultPort;
}

// Kubeflow's GenGeneralName: <job>-<type>-<index>, any "/" made "-".
std::string GeneralName(const std::string& job, const std::string& rt, int index) {
  return absl::StrReplaceAll(absl::StrCat(job, "-", rt, "-", index), {{"/", "-"}});
}

// The template's container Kubeflow's defaulting gives tfjob-port: "tensorflow", else the first.
json* DefaultContainer(json* pod_template) {
  json* containers = Containers(pod_template);
  if (containers == nullptr || containers->empty()) return nullptr;
  for (json& c : *containers) {
    if (c.is_object() && StringField(c, "name") == kTfJobContainerName) return &c;
  }
  return &(*containers)[0];
}

// Kubeflow's cluster spec of a TFJob, built once for all its tasks' TF_CONFIGs.
struct KubeflowCluster {
  std::map<std::string, std::vector<std::string>> addresses;  // by lower-case type, sorted
  bool distributed = false;                                   // more than one replica in all
  bool dynamic = false;  // enableDynamicWorker: the sparse form
};

KubeflowCluster ClusterOf(const json& tfjob, const std::string& cluster_domain) {
  KubeflowCluster c;
  auto specs = ReplicaSpecs(tfjob);
  int total = 0;
  for (const auto& [_, entry] : specs) total += Replicas(*entry.second);
  c.distributed = total != 1;
  c.dynamic = tfjob.contains("spec") && tfjob["spec"].is_object() &&
              tfjob["spec"].value("enableDynamicWorker", false) == true;
  const json meta = tfjob.value("metadata", json::object());
  const std::string name = StringField(meta, "name");
  const std::string ns = StringField(meta, "namespace", "default");
  for (const auto& [canonical, entry] : specs) {
    const std::string rt = absl::AsciiStrToLower(canonical);
    const int port = TfJobPort(*entry.second);
    std::vector<std::string>& addresses = c.addresses[rt];
    for (int i = 0; i < Replicas(*entry.second); ++i) {
      std::string host = absl::StrCat(GeneralName(name, rt, i), ".", ns, ".svc");
      if (!cluster_domain.empty()) absl::StrAppend(&host, ".", cluster_domain);
      addresses.push_back(absl::StrCat(host, ":", port));
    }
  }
  return c;
}

// One task's TF_CONFIG in `cluster` (KubeflowTfConfig).
std::string TfConfigIn(const KubeflowCluster& cluster, const std::string& type, int index) {
  if (!cluster.distributed) return "";  // Kubeflow sets no TF_CONFIG
  const std::string task_type = absl::AsciiStrToLower(type);
  nlohmann::ordered_json doc;
  nlohmann::ordered_json task = {{"type", task_type}, {"index", index}};
  if (!cluster.dynamic) {
    doc["cluster"] = nlohmann::ordered_json::object();
    for (const auto& [rt, addresses] : cluster.addresses) doc["cluster"][rt] = addresses;
    doc["task"] = std::move(task);
    doc["environment"] = "cloud";
    return doc.dump();
  }
  // The sparse form: a worker knows every ps and itself, a ps itself, any other task nothing.
  static const std::vector<std::string> kNone;
  auto list = [&](const std::string& rt) -> const std::vector<std::string>& {
    auto it = cluster.addresses.find(rt);
    return it == cluster.addresses.end() ? kNone : it->second;
  };
  auto own = [&](const std::string& rt) {
    const std::vector<std::string>& l = list(rt);
    return index >= 0 && static_cast<size_t>(index) < l.size() ? l[index] : std::string();
  };
  nlohmann::ordered_json workers = nlohmann::ordered_json::object();
  nlohmann::ordered_json ps = nlohmann::ordered_json::array();
  if (task_type == "ps") {
    ps.push_back(own("ps"));
  } else if (task_type == "worker") {
    for (const std::string& a : list("ps")) ps.push_back(a);
    workers[std::to_string(index)] = own("worker");
  }
  doc["cluster"] = {{"worker", std::move(workers)}, {"ps", std::move(ps)}};
  doc["task"] = std::move(task);
  return doc.dump();
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

// The tfReplicaSpecs type (canonical) a TrainingJob replica type came from: its own name
// (api::Name), but Master for a Chief written as Master.
std::string CanonicalKey(const std::map<std::string, std::pair<std::string, const json*>>& specs,
                         ReplicaType type) {
  if (type == ReplicaType::kChief && specs.count("Master") && !specs.count("Chief")) {
    return "Master";
  }
  return Name(type);
}

// The TrainingJob replica type of a canonical tfReplicaSpecs type: a Master is the Chief.
ReplicaType ModelType(const std::string& canonical) {
  ReplicaType type = ReplicaType::kChief;
  if (canonical != "Master") Parse(canonical, &type);
  return type;
}

json KubeflowLabels(const std::string& job, const std::string& rt, int index) {
  return {{kKubeflowLabelOperatorName, kKubeflowOperatorName},
          {kKubeflowLabelJobName, absl::StrReplaceAll(job, {{"/", "-"}})},
          {kKubeflowLabelReplicaType, rt},
          {kKubeflowLabelReplicaIndex, std::to_string(index)}};
}

// A replica's pod template as Kubeflow's defaulting leaves it: tfjob-port 2222 on the default
// container when it has none.
json Prepared(const json& rs) {
  json pod_template = rs.is_object() ? rs.value("template", json::object()) : json::object();
  if (!pod_template.is_object()) pod_template = json::object();
  if (json* c = DefaultContainer(&pod_template)) {
    bool has_port = false;
    if (c->contains("ports") && (*c)["ports"].is_array()) {
      for (const json& p : (*c)["ports"]) has_port |= StringField(p, "name") == kTfJobPortName;
    } else {
      (*c)["ports"] = json::array();
    }
    if (!has_port) (*c)["ports"].push_back({{"name", kTfJobPortName}, {"containerPort", 2222}});
  }
  return pod_template;
}

// The TFJob (its metadata `job_meta`) as the controller owner of an object made for it, once the
// API server has given it a uid: the garbage collector deletes the object with the job.
void SetOwner(const json& job_meta, json* object_meta) {
  const std::string uid = StringField(job_meta, "uid");
  if (uid.empty()) return;
  (*object_meta)["ownerReferences"] = json::array({{{"apiVersion", kTfJobApiVersion},
                                                    {"kind", kTfJobKind},
                                                    {"name", StringField(job_meta, "name")},
                                                    {"uid", uid},
                                                    {"controller", true},
                                                    {"blockOwnerDeletion", true}}});
}

// The tensorflow container of a pod spec; null when it has none.
json* TensorflowContainer(json* pod_spec) {
  if (!pod_spec->contains("containers") || !(*pod_spec)["containers"].is_array()) return nullptr;
  for (json& c : (*pod_spec)["containers"]) {
    if (c.is_object() && StringField(c, "name") == kTfJobContainerName) return &c;
  }
  return nullptr;
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

std::string KubeflowTfConfig(const json& tfjob, const std::string& type, int index,
                             const std::string& cluster_domain) {
  return TfConfigIn(ClusterOf(tfjob, cluster_domain), type, index);
}

std::string TfJobReplicaName(const json& tfjob, ReplicaType type) {
  return absl::AsciiStrToLower(CanonicalKey(ReplicaSpecs(tfjob), type));
}

std::string TfJobTaskName(const json& tfjob, ReplicaType type, int index) {
  return GeneralName(StringField(tfjob.value("metadata", json::object()), "name"),
                     TfJobReplicaName(tfjob, type), index);
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

json TfJobPod(const json& tfjob, ReplicaType type, int index, const std::string& cluster_domain) {
  const json meta_in = tfjob.value("metadata", json::object());
  const std::string name = StringField(meta_in, "name");
  const auto specs = ReplicaSpecs(tfjob);
  const std::string canonical = CanonicalKey(specs, type);
  const std::string rt = absl::AsciiStrToLower(canonical);
  const json pod_template = Prepared(*specs.at(canonical).second);
  json meta = pod_template.value("metadata", json::object());
  if (!meta.is_object()) meta = json::object();
  meta["name"] = GeneralName(name, rt, index);
  meta["namespace"] = StringField(meta_in, "namespace", "default");
  json labels = meta.value("labels", json::object());
  if (!labels.is_object()) labels = json::object();
  const json kubeflow_labels = KubeflowLabels(name, rt, index);
  for (const auto& [k, v] : kubeflow_labels.items()) labels[k] = v;
  const bool has_chief = specs.count("Chief") || specs.count("Master");
  const bool master_role =
      has_chief ? type == ReplicaType::kChief : (type == ReplicaType::kWorker && index == 0);
  if (master_role) labels[kKubeflowLabelJobRole] = "master";
  labels[kLabelManagedBy] = kManagedByValue;
  meta["labels"] = std::move(labels);
  SetOwner(meta_in, &meta);
  json spec = pod_template.value("spec", json::object());
  // The operator decides every restart (docs/decisions/0007): the kubelet restarts nothing in
  // place, so each one is counted against backoffLimit.
  spec["restartPolicy"] = "Never";
  const std::string tf_config = TfConfigIn(ClusterOf(tfjob, cluster_domain), rt, index);
  if (json* c = TensorflowContainer(&spec)) {
    if (!tf_config.empty()) SetContainerEnv(c, {{"name", "TF_CONFIG"}, {"value", tf_config}});
    json secret_ref = {{"name", JobSecretName(name)}, {"key", kJobSecretKey}};
    SetContainerEnv(c, {{"name", kJobSecretEnv}, {"valueFrom", {{"secretKeyRef", secret_ref}}}});
    // As on a TrainingJob's pods (render.cc): checkpoints and metrics are the job's own.
    SetContainerEnv(c, {{"name", "KUBETRAIN_JOB_NAME"}, {"value", name}});
  }
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
}

std::vector<json> TfJobServices(const json& tfjob) {
  const json meta = tfjob.value("metadata", json::object());
  const std::string name = StringField(meta, "name");
  const std::string ns = StringField(meta, "namespace", "default");
  std::vector<json> services;
  for (const auto& [canonical, entry] : ReplicaSpecs(tfjob)) {
    const std::string rt = absl::AsciiStrToLower(canonical);
    json pod_spec = Prepared(*entry.second).value("spec", json::object());
    std::map<std::string, json> by_name;  // sorted: Go ranges over a map of them
    if (const json* c = TensorflowContainer(&pod_spec)) {
      if (c->contains("ports") && (*c)["ports"].is_array()) {
        for (const json& p : (*c)["ports"]) {
          if (p.is_object() && p.contains("containerPort")) {
            by_name[StringField(p, "name")] = p["containerPort"];
          }
        }
      }
    }
    json ports = json::array();
    for (const auto& [port_name, port] : by_name) {
      ports.push_back({{"name", port_name}, {"port", port}});
    }
    for (int i = 0; i < Replicas(*entry.second); ++i) {
      json labels = KubeflowLabels(name, rt, i);
      json svc_labels = labels;
      svc_labels[kLabelManagedBy] = kManagedByValue;
      json svc_meta = {
          {"name", GeneralName(name, rt, i)}, {"namespace", ns}, {"labels", svc_labels}};
      SetOwner(meta, &svc_meta);
      services.push_back(
          {{"apiVersion", "v1"},
           {"kind", "Service"},
           {"metadata", std::move(svc_meta)},
           {"spec", {{"clusterIP", "None"}, {"selector", labels}, {"ports", ports}}}});
    }
  }
  return services;
}

std::vector<json> RenderTfJob(const json& tfjob, const std::string& ns,
                              const std::string& cluster_domain) {
  json job = tfjob;
  if (!job.contains("metadata") || !job["metadata"].is_object()) job["metadata"] = json::object();
  if (StringField(job["metadata"], "namespace").empty()) {
    job["metadata"]["namespace"] = ns.empty() ? "default" : ns;
  }
  std::vector<json> objects = TfJobServices(job);
  for (const auto& [canonical, entry] : ReplicaSpecs(job)) {
    for (int i = 0; i < Replicas(*entry.second); ++i) {
      objects.push_back(TfJobPod(job, ModelType(canonical), i, cluster_domain));
    }
  }
  return objects;
}

}  // namespace kubetrain::api
