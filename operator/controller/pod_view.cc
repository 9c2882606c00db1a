#include "operator/controller/pod_view.h"

#include "absl/strings/numbers.h"
#include "operator/api/decode.h"
#include "operator/api/tfjob.h"
#include "operator/kube/informer.h"

namespace kubetrain::controller {

using nlohmann::json;

namespace {

// The pod condition Kubernetes sets on a pod it is about to take away (preemption, eviction,
// taint-based deletion, node shutdown).
constexpr char kDisruptionTarget[] = "DisruptionTarget";

void ReadTermination(const json& status, PodView* view) {
  for (const char* field : {"state", "lastState"}) {
    if (!status.contains(field)) continue;
    const json& state = status[field];
    if (state.contains("terminated") && state["terminated"].contains("exitCode")) {
      view->exit_code = state["terminated"]["exitCode"].get<int>();
      if (view->reason.empty()) view->reason = state["terminated"].value("reason", "");
      const json& message = state["terminated"].value("message", json());
      if (message.is_string()) view->termination_message = message.get<std::string>();
      return;
    }
  }
}

}  // namespace

std::optional<PodView> ViewPod(const json& pod) {
  const json& meta = pod["metadata"];
  const json& labels = meta.value("labels", json::object());
  PodView view;
  // A TFJob's pod carries Kubeflow's labels only (api/tfjob.h); its Master is the chief.
  const bool kubeflow =
      !labels.contains(api::kLabelReplicaType) && labels.contains(api::kKubeflowLabelReplicaType);
  std::string type = labels.value(
      kubeflow ? api::kKubeflowLabelReplicaType : api::kLabelReplicaType, std::string());
  if (kubeflow && type == "master") type = api::TaskType(api::ReplicaType::kChief);
  bool known = false;
  for (api::ReplicaType t : {api::ReplicaType::kChief, api::ReplicaType::kPS,
                             api::ReplicaType::kWorker, api::ReplicaType::kEvaluator}) {
    if (api::TaskType(t) == type) {
      view.type = t;
      known = true;
    }
  }
  const char* index_label = kubeflow ? api::kKubeflowLabelReplicaIndex : api::kLabelReplicaIndex;
  if (!known || !absl::SimpleAtoi(labels.value(index_label, std::string()), &view.index)) {
    return std::nullopt;
  }
  view.name = meta.value("name", "");
  view.uid = meta.value("uid", "");
  view.deleting = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  const json& status = pod.value("status", json::object());
  view.phase = status.value("phase", "Pending");
  view.pod_ip = status.value("podIP", "");
  view.reason = status.value("reason", "");
  if (auto conds = status.find("conditions"); conds != status.end() && conds->is_array()) {
    for (const json& c : *conds) {
      if (api::StringField(c, "type") == kDisruptionTarget &&
          api::StringField(c, "status") == "True") {
        view.disruption = api::StringField(c, "reason", kDisruptionTarget);
      }
    }
  }
  if (view.disruption.empty()) {
    for (const char* reason :
         {"Evicted", "Preempting", "Preempted", "Shutdown", "Terminated", "NodeLost"}) {
      if (view.reason == reason) view.disruption = view.reason;
    }
  }
  const char* container = kubeflow ? api::kTfJobContainerName : api::kDefaultContainerName;
  if (status.contains("containerStatuses") && status["containerStatuses"].is_array()) {
    for (const json& cs : status["containerStatuses"]) {
      if (cs.value("name", "") == container) ReadTermination(cs, &view);
    }
  }
  return view;
}

void StripPodForCache(json& pod) {
  kube::StripForCache(pod);
  if (!pod.is_object()) return;
  if (auto spec = pod.find("spec"); spec != pod.end() && spec->is_object()) {
    json containers = json::array();
    if (auto cs = spec->find("containers"); cs != spec->end() && cs->is_array()) {
      for (const json& c : *cs) {
        if (!c.is_object()) continue;
        json kept = {{"name", c.value("name", "")}};
        if (auto env = c.find("env"); env != c.end() && env->is_array()) {
          for (const json& e : *env) {
            if (e.is_object() && e.value("name", "") == "TF_CONFIG") kept["env"] = json::array({e});
          }
        }
        containers.push_back(std::move(kept));
      }
    }
    *spec = {{"containers", std::move(containers)}};
  }
  if (auto status = pod.find("status"); status != pod.end() && status->is_object()) {
    json kept = json::object();
    for (const char* field : {"phase", "podIP", "reason"}) {
      if (auto v = status->find(field); v != status->end()) kept[field] = *v;
    }
    if (auto conds = status->find("conditions"); conds != status->end() && conds->is_array()) {
      for (const json& c : *conds) {
        if (api::StringField(c, "type") == kDisruptionTarget) {
          kept["conditions"] = json::array({c});
        }
      }
    }
    if (auto cs = status->find("containerStatuses"); cs != status->end() && cs->is_array()) {
      kept["containerStatuses"] = json::array();
      for (const json& c : *cs) {
        if (!c.is_object()) continue;
        json one = json::object();
        for (const char* field : {"name", "state", "lastState"}) {
          if (auto v = c.find(field); v != c.end()) one[field] = *v;
        }
        kept["containerStatuses"].push_back(std::move(one));
      }
    }
    *status = std::move(kept);
  }
}

int EffectiveExitCode(const PodView& pod) { return pod.exit_code.value_or(137); }

}  // namespace kubetrain::controller
