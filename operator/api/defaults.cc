#include "operator/api/defaults.h"

#include "operator/api/checkpoint_storage.h"
#include "operator/api/decode.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

bool HasPortNamed(const json& container, const char* name) {
  if (!container.contains("ports") || !container["ports"].is_array()) return false;
  for (const json& p : container["ports"]) {
    if (p.is_object() && StringField(p, "name") == name) return true;
  }
  return false;
}

void AddPort(json* container, const char* name, int port) {
  if (HasPortNamed(*container, name)) return;
  json& ports = (*container)["ports"];
  if (!ports.is_array()) ports = json::array();
  ports.push_back({{"name", name}, {"containerPort", port}, {"protocol", "TCP"}});
}

void DefaultTemplate(json* pod_template) {
  if (!pod_template->is_object() || !pod_template->contains("spec")) return;
  json& spec = (*pod_template)["spec"];
  if (!spec.is_object() || !spec.contains("containers") || !spec["containers"].is_array()) return;
  json& containers = spec["containers"];
  if (containers.empty() || !containers[0].is_object()) return;
  // An unnamed first container is the training container.
  if (TrainingContainer(*pod_template) == nullptr && !containers[0].contains("name")) {
    containers[0]["name"] = kDefaultContainerName;
  }
  if (json* c = TrainingContainer(pod_template)) {
    AddPort(c, kDefaultPortName, kDefaultPort);
    AddPort(c, kMetricsPortName, kDefaultMetricsPort);
  }
}

}  // namespace

RestartPolicy DefaultRestartPolicy(ReplicaType type) {
  switch (type) {
    case ReplicaType::kChief:
    case ReplicaType::kWorker:
      return RestartPolicy::kExitCode;
    case ReplicaType::kPS:
    case ReplicaType::kEvaluator:
      return RestartPolicy::kOnFailure;
  }
  return RestartPolicy::kOnFailure;
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

const json* TrainingContainer(const json& pod_template) {
  const json* containers = Containers(pod_template);
  if (containers == nullptr) return nullptr;
  for (const json& c : *containers) {
    if (c.is_object() && StringField(c, "name") == kDefaultContainerName) return &c;
  }
  return nullptr;
}

json* TrainingContainer(json* pod_template) {
  return const_cast<json*>(TrainingContainer(std::as_const(*pod_template)));
}

void SetDefaults(TrainingJob* job) {
  for (auto& [type, rs] : job->spec.replica_specs) {
    if (!rs.replicas) rs.replicas = 1;
    if (!rs.restart_policy) rs.restart_policy = DefaultRestartPolicy(type);
    DefaultTemplate(&rs.template_);
  }
  RunPolicy& rp = job->spec.run_policy;
  if (!rp.clean_pod_policy) rp.clean_pod_policy = CleanPodPolicy::kRunning;
  if (!rp.backoff_limit) rp.backoff_limit = kDefaultBackoffLimit;
  if (!rp.restart_scope) rp.restart_scope = RestartScope::kPod;
  if (!rp.suspend) rp.suspend = false;
  if (!job->spec.success_policy) job->spec.success_policy = SuccessPolicy::kChiefOnly;
  if (job->spec.checkpoint) SetCheckpointDefaults(&*job->spec.checkpoint);
}

}  // namespace kubetrain::api
