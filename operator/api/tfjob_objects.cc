// What the kubetrain operator makes for a TFJob, as Kubeflow's training-operator makes it
// (docs/decisions/0007-kubeflow-tfjob.md): TF_CONFIG byte for byte, the pods' and Services'
// names and labels, and `kubetrain render` of a TFJob. Its conversion to a TrainingJob is in
// tfjob.cc.
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/job_secret_env.h"
#include "operator/api/checkpoint_storage.h"
#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/tfjob.h"
#include "operator/api/tfjob_internal.h"
#include "operator/api/types.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;
using tfjob_internal::CanonicalKey;
using tfjob_internal::ReplicaSpecs;

int Replicas(const json& rs) {
  if (rs.is_object() && rs.contains("replicas") && rs["replicas"].is_number_integer()) {
    return rs["replicas"].get<int>();
  }
  return 1;  // Kubeflow's default
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

}  // namespace

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
  // Kubeflow's CRD would prune spec.checkpoint: the chief mounts the claim the annotation names
  // (operator/api/checkpoint_storage.h), else the volumes its template mounts are all it has.
  const std::string claim =
      StringField(meta_in.value("annotations", json::object()), kCheckpointClaimAnnotation);
  if (master_role && !claim.empty()) {
    MountCheckpointClaim(&spec, kTfJobContainerName, claim, kDefaultCheckpointMountPath,
                         CheckpointDirOnClaim(kDefaultCheckpointMountPath, name));
  }
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
  if (master_role) MarkCheckpointDurability(&pod, kTfJobContainerName, /*unset_is_in_pod=*/false);
  return pod;
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
