// The node lifecycle controller's pod side: taint-based eviction (the taint eviction
// controller) and the pod garbage collector's node checks (see node_lifecycle.h).
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/default_tolerations.h"
#include "localkube/events.h"
#include "localkube/kinds.h"
#include "localkube/node_lifecycle.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// v1.Toleration.ToleratesTaint.
bool ToleratesTaint(const json& toleration, const json& taint) {
  if (!toleration.is_object()) return false;
  std::string effect = toleration.value("effect", "");
  if (!effect.empty() && effect != taint.value("effect", "")) return false;
  std::string key = toleration.value("key", "");
  if (!key.empty() && key != taint.value("key", "")) return false;
  std::string op = toleration.value("operator", "Equal");
  if (op == "Exists") return true;
  return op == "Equal" && toleration.value("value", "") == taint.value("value", "");
}

bool NodeReady(const json& node) {
  for (const json& c : node.value("status", json::object()).value("conditions", json::array())) {
    if (c.is_object() && c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

}  // namespace

void NodeLifecycleController::EvictForTaints(const json& pod, const json& taints, absl::Time now,
                                             absl::Time* next) {
  if (IsDeleting(pod)) return;
  const json tolerations = pod.value("spec", json::object()).value("tolerations", json::array());
  // The earliest time a used toleration runs out; InfiniteFuture: all tolerate forever.
  absl::Time due = absl::InfiniteFuture();
  for (const json& taint : taints) {
    const json* used = nullptr;
    for (const json& t : tolerations) {
      if (ToleratesTaint(t, taint)) {
        used = &t;
        break;
      }
    }
    if (!used) {
      due = absl::InfinitePast();
      break;
    }
    if (!used->contains("tolerationSeconds") || !(*used)["tolerationSeconds"].is_number()) {
      continue;
    }
    int64_t seconds = (*used)["tolerationSeconds"].get<int64_t>();
    absl::Time added = now;
    if (taint.contains("timeAdded") && taint["timeAdded"].is_string()) {
      (void)absl::ParseTime(absl::RFC3339_full, taint["timeAdded"].get<std::string>(), &added,
                            nullptr);
    }
    due = std::min(due, seconds <= 0 ? absl::InfinitePast() : added + absl::Seconds(seconds));
  }
  if (due == absl::InfiniteFuture()) return;
  if (due > now) {
    *next = std::min(*next, due);
    return;
  }
  const std::string who = absl::StrCat(NamespaceOf(pod), "/", NameOf(pod));
  log::Info("Evicting pod from tainted node",
            {{"pod", who}, {"node", pod["spec"].value("nodeName", "")}});
  RecordEvent(pod, "Normal", "TaintManagerEviction", absl::StrCat("Marking for deletion Pod ", who),
              "taint-eviction-controller");
  DeletePod(pod, "DeletionByTaintManager", "Taint manager: deleting due to NoExecute taint",
            /*fail=*/false, std::nullopt);
}

void NodeLifecycleController::CollectPod(const json& pod, const json* node, absl::Time now,
                                         absl::Time* next) {
  const std::string node_name = pod["spec"].value("nodeName", "");
  if (!node) {
    // gcOrphaned: the node is gone; after the quarantine the pod goes too.
    auto [it, inserted] = missing_since_.emplace(node_name, now);
    absl::Time due = it->second + options_.orphan_quarantine;
    if (due > now) {
      *next = std::min(*next, due);
      return;
    }
    log::Info("Deleting pod of a deleted node",
              {{"pod", absl::StrCat(NamespaceOf(pod), "/", NameOf(pod))}, {"node", node_name}});
    DeletePod(pod, "DeletionByPodGC", "PodGC: node no longer exists", /*fail=*/true, 0);
    return;
  }
  // gcTerminating: a terminating pod on a node declared out of service is not waited for.
  if (!IsDeleting(pod) || NodeReady(*node)) return;
  for (const json& t : node->value("spec", json::object()).value("taints", json::array())) {
    if (t.is_object() && t.value("key", "") == kTaintOutOfService &&
        t.value("effect", "") == "NoExecute") {
      log::Info("Force-deleting terminating pod on an out-of-service node",
                {{"pod", absl::StrCat(NamespaceOf(pod), "/", NameOf(pod))}, {"node", node_name}});
      DeletePod(pod, "", "", /*fail=*/true, 0);
      return;
    }
  }
}

void NodeLifecycleController::DeletePod(const json& pod, const std::string& reason,
                                        const std::string& message, bool fail,
                                        std::optional<int64_t> grace) {
  const std::string ns = NamespaceOf(pod), name = NameOf(pod);
  (void)api_->Mutate(kPodsKey, ns, name, [&](json& live) {
    if (UidOf(live) != UidOf(pod)) return false;
    bool changed = false;
    json& status = live["status"];
    if (!status.is_object()) status = json::object();
    std::string phase = status.value("phase", "");
    if (fail && phase != "Succeeded" && phase != "Failed") {
      status["phase"] = "Failed";
      changed = true;
    }
    if (!reason.empty()) {
      json& conditions = status["conditions"];
      if (!conditions.is_array()) conditions = json::array();
      bool has = false;
      for (const json& c : conditions) {
        has |= c.is_object() && c.value("type", "") == "DisruptionTarget";
      }
      if (!has) {
        conditions.push_back({{"type", "DisruptionTarget"},
                              {"status", "True"},
                              {"reason", reason},
                              {"message", message},
                              {"lastProbeTime", nullptr},
                              {"lastTransitionTime", NowTimestamp()}});
        changed = true;
      }
    }
    return changed;
  });
  DeleteOptions options;
  options.grace_seconds = grace;
  options.precondition_uid = UidOf(pod);
  ResourceTypePtr pods = api_->registry()->Find("", "v1", "pods");
  absl::StatusOr<json> deleted = api_->Delete(Target{pods, ns, name, ""}, options);
  if (!deleted.ok() && !absl::IsNotFound(deleted.status())) {
    log::Warn("Could not delete pod", {{"pod", absl::StrCat(ns, "/", name)},
                                       {"error", std::string(deleted.status().message())}});
  }
}

void NodeLifecycleController::RecordEvent(const json& object, const std::string& type,
                                          const std::string& reason, const std::string& message,
                                          const std::string& component) {
  InvolvedObject about = InvolvedObjectOf(object, NamespaceOf(object).empty() ? "Node" : "Pod");
  about.resource_version.clear();
  absl::StatusOr<std::string> posted =
      PostEvent(*api_, about, type, reason, message, {.component = component});
  if (!posted.ok()) {
    log::Warn("Could not record an event",
              {{"reason", reason}, {"error", std::string(posted.status().message())}});
  }
}

}  // namespace kubetrain::localkube
