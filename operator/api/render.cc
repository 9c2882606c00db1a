#include "operator/api/render.h"

#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/job_secret_env.h"
#include "operator/api/checkpoint_storage.h"
#include "operator/api/decode.h"
#include "operator/api/defaults.h"

namespace kubetrain::api {

using nlohmann::json;

void SetContainerEnv(json* container, json entry) {
  json& env = (*container)["env"];
  if (!env.is_array()) env = json::array();
  for (json& e : env) {
    if (e.is_object() && StringField(e, "name") == StringField(entry, "name")) {
      e = std::move(entry);
      return;
    }
  }
  env.push_back(std::move(entry));
}

json JobOwnerReferences(const TrainingJob& job) {
  // The job's own apiVersion and kind: a TFJob (api/tfjob.h) owns what is made for it.
  return json::array({{{"apiVersion", job.api_version},
                       {"kind", job.kind},
                       {"name", job.metadata.name},
                       {"uid", job.metadata.uid},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

namespace {

json ObjectMetadata(const TrainingJob& job, const std::string& name,
                    std::map<std::string, std::string> labels) {
  json meta = {{"name", name}, {"namespace", Namespace(job)}, {"labels", labels}};
  // Owner references need the job's uid, which the API server assigns on create.
  if (!job.metadata.uid.empty()) meta["ownerReferences"] = JobOwnerReferences(job);
  return meta;
}

void SetEnv(json* container, const std::string& name, const std::string& value) {
  SetContainerEnv(container, {{"name", name}, {"value", value}});
}

// Sets env var `name` from a key of a Secret.
void SetEnvSecretRef(json* container, const std::string& name, const std::string& secret,
                     const std::string& key) {
  SetContainerEnv(container, {{"name", name},
                              {"valueFrom", {{"secretKeyRef", {{"name", secret}, {"key", key}}}}}});
}

template <typename Map>
void MergeInto(json* target, const Map& entries) {
  if (!target->is_object()) *target = json::object();
  for (const auto& [k, v] : entries) (*target)[k] = v;
}

}  // namespace

std::string ClusterDnsAddresses::Address(const TrainingJob& job, ReplicaType type,
                                         int index) const {
  std::string host =
      absl::StrCat(TaskName(job, type, index), ".", job.metadata.name, ".", Namespace(job), ".svc");
  if (!cluster_domain_.empty()) absl::StrAppend(&host, ".", cluster_domain_);
  return absl::StrCat(host, ":", ContainerPort(job, type, kDefaultPortName, kDefaultPort));
}

std::string LoopbackAddresses::Address(const TrainingJob&, ReplicaType type, int index) const {
  return absl::StrCat(host_, ":", port_of_(type, index));
}

std::string Namespace(const TrainingJob& job) {
  return job.metadata.namespace_.empty() ? "default" : job.metadata.namespace_;
}

std::string TaskName(const TrainingJob& job, ReplicaType type, int index) {
  return absl::StrCat(job.metadata.name, "-", TaskType(type), "-", index);
}

int ContainerPort(const TrainingJob& job, ReplicaType type, const char* port_name, int fallback) {
  auto it = job.spec.replica_specs.find(type);
  if (it == job.spec.replica_specs.end()) return fallback;
  const json* c = TrainingContainer(it->second.template_);
  if (c == nullptr || !c->contains("ports") || !(*c)["ports"].is_array()) return fallback;
  for (const json& p : (*c)["ports"]) {
    if (p.is_object() && StringField(p, "name") == port_name && p.contains("containerPort") &&
        p["containerPort"].is_number_integer()) {
      return p["containerPort"].get<int>();
    }
  }
  return fallback;
}

bool IsChief(const TrainingJob& job, ReplicaType type, int index) {
  if (index != 0) return false;
  if (job.spec.replica_specs.count(ReplicaType::kChief)) return type == ReplicaType::kChief;
  return type == ReplicaType::kWorker;
}

std::vector<Task> Tasks(const TrainingJob& job, const AddressScheme& addresses) {
  std::vector<Task> tasks;
  for (const auto& [type, rs] : job.spec.replica_specs) {
    for (int i = 0; i < rs.replicas.value_or(1); ++i) {
      tasks.push_back({type, i, TaskName(job, type, i), addresses.Address(job, type, i),
                       IsChief(job, type, i),
                       rs.restart_policy.value_or(DefaultRestartPolicy(type))});
    }
  }
  return tasks;
}

TfConfig TfConfigFor(const TrainingJob& job, const AddressScheme& addresses, ReplicaType type,
                     int index) {
  TfConfig config;
  for (const auto& [t, rs] : job.spec.replica_specs) {
    if (t == ReplicaType::kEvaluator) continue;
    std::vector<std::string>& list = config.cluster[TaskType(t)];
    for (int i = 0; i < rs.replicas.value_or(1); ++i) list.push_back(addresses.Address(job, t, i));
  }
  config.task_type = TaskType(type);
  config.task_index = index;
  return config;
}

std::map<std::string, std::string> JobLabels(const TrainingJob& job) {
  return {{kLabelJobName, job.metadata.name}, {kLabelManagedBy, kManagedByValue}};
}

json BuildService(const TrainingJob& job) {
  json ports = json::array();
  std::set<int> seen;
  for (const auto& [type, rs] : job.spec.replica_specs) {
    int port = ContainerPort(job, type, kDefaultPortName, kDefaultPort);
    if (!seen.insert(port).second) continue;
    std::string name = port == kDefaultPort ? kDefaultPortName : absl::StrCat("kubetrain-", port);
    ports.push_back({{"name", name}, {"port", port}, {"targetPort", port}, {"protocol", "TCP"}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", ObjectMetadata(job, job.metadata.name, JobLabels(job))},
          {"spec",
           {{"clusterIP", "None"},
            // Peers must resolve each other before they are ready: training starts by dialing.
            {"publishNotReadyAddresses", true},
            {"selector", {{kLabelJobName, job.metadata.name}}},
            {"ports", ports}}}};
}

std::string JobSecretName(const std::string& job_name) { return job_name + "-job-secret"; }
std::string JobSecretName(const TrainingJob& job) { return JobSecretName(job.metadata.name); }

json BuildJobSecret(const TrainingJob& job, const std::string& secret) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", ObjectMetadata(job, JobSecretName(job), JobLabels(job))},
          {"type", "Opaque"},
          {"data", {{kJobSecretKey, absl::Base64Escape(secret)}}}};
}

json BuildPod(const TrainingJob& job, ReplicaType type, int index, const AddressScheme& addresses) {
  const ReplicaSpec& rs = job.spec.replica_specs.at(type);
  json tmpl = rs.template_.is_object() ? rs.template_ : json::object();
  std::string name = TaskName(job, type, index);

  std::map<std::string, std::string> labels = JobLabels(job);
  labels[kLabelReplicaType] = TaskType(type);
  labels[kLabelReplicaIndex] = std::to_string(index);
  if (IsChief(job, type, index)) labels[kLabelJobRole] = "chief";

  json meta =
      tmpl.contains("metadata") && tmpl["metadata"].is_object() ? tmpl["metadata"] : json::object();
  MergeInto(&meta["labels"], labels);
  int metrics_port = ContainerPort(job, type, kMetricsPortName, kDefaultMetricsPort);
  MergeInto(&meta["annotations"],
            std::map<std::string, std::string>{{"prometheus.io/scrape", "true"},
                                               {"prometheus.io/port", std::to_string(metrics_port)},
                                               {"prometheus.io/path", "/metrics"}});
  json object_meta = ObjectMetadata(job, name, {});
  meta["name"] = object_meta["name"];
  meta["namespace"] = object_meta["namespace"];
  if (object_meta.contains("ownerReferences"))
    meta["ownerReferences"] = object_meta["ownerReferences"];

  json spec = tmpl.contains("spec") && tmpl["spec"].is_object() ? tmpl["spec"] : json::object();
  spec["hostname"] = name;
  spec["subdomain"] = job.metadata.name;
  // The operator decides every restart (counted in the job's status, kept across pod
  // recreation), so the kubelet never restarts a container in place.
  spec["restartPolicy"] = "Never";
  std::string tf_config = ToJsonString(TfConfigFor(job, addresses, type, index));
  if (spec.contains("containers") && spec["containers"].is_array()) {
    for (json& c : spec["containers"]) {
      SetEnv(&c, "TF_CONFIG", tf_config);
      SetEnv(&c, "KUBETRAIN_JOB_NAME", job.metadata.name);
      SetEnv(&c, "KUBETRAIN_REPLICA_TYPE", TaskType(type));
      SetEnv(&c, "KUBETRAIN_REPLICA_INDEX", std::to_string(index));
      if (job.spec.backup_workers) {
        SetEnv(&c, "KUBETRAIN_BACKUP_WORKERS", std::to_string(*job.spec.backup_workers));
      }
      if (job.spec.gradient_compression) {
        SetEnv(&c, "KUBETRAIN_GRADIENT_COMPRESSION", Name(*job.spec.gradient_compression));
      }
      // The worker takes its membership from the ps, not from TF_CONFIG's worker count, which
      // is the job's size when this pod was created (docs/architecture.md §4, §5.10, §10).
      if (job.spec.elastic) {
        SetEnv(&c, "KUBETRAIN_ELASTIC", "1");
        // The smallest the job may get, in training workers: the chief trains too.
        auto chief = job.spec.replica_specs.find(ReplicaType::kChief);
        const int chiefs =
            chief != job.spec.replica_specs.end() ? chief->second.replicas.value_or(0) : 0;
        SetEnv(&c, "KUBETRAIN_ELASTIC_MIN_WORKERS",
               std::to_string(job.spec.elastic->min_replicas.value_or(1) + chiefs));
      }
      SetEnvSecretRef(&c, kJobSecretEnv, JobSecretName(job), kJobSecretKey);
      // No bind address: every pod has a network namespace of its own (localkube's too), so
      // servers bind the wildcard, as any cluster workload does.
    }
  }
  if (IsChief(job, type, index)) {
    // Only the chief reads and writes checkpoints (operator/api/checkpoint_storage.h).
    if (const auto& storage = job.spec.checkpoint) {
      MountCheckpointClaim(&spec, kDefaultContainerName, CheckpointClaimName(job),
                           storage->mount_path,
                           CheckpointDirOnClaim(storage->mount_path, job.metadata.name));
    }
  }
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
  if (IsChief(job, type, index)) {
    MarkCheckpointDurability(&pod, kDefaultContainerName, /*unset_is_in_pod=*/true);
  }
  return pod;
}

std::vector<json> RenderObjects(const TrainingJob& job, const AddressScheme& addresses,
                                const std::string& secret) {
  std::vector<json> objects = {BuildJobSecret(job, secret), BuildService(job)};
  if (job.spec.checkpoint && job.spec.checkpoint->volume_claim_template) {
    objects.push_back(BuildCheckpointClaim(job));
  }
  for (const Task& t : Tasks(job, addresses)) {
    objects.push_back(BuildPod(job, t.type, t.index, addresses));
  }
  return objects;
}

}  // namespace kubetrain::api
