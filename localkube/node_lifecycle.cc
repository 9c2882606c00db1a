// The node lifecycle controller: node health and the controller's taints (see node_lifecycle.h).
// Taint eviction and pod GC are in pod_eviction.cc.
#include "localkube/node_lifecycle.h"

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/default_tolerations.h"
#include "localkube/kinds.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// The kubelet's conditions the controller sets Unknown when the kubelet goes silent.
constexpr const char* kKubeletConditions[] = {"Ready", "MemoryPressure", "DiskPressure",
                                              "PIDPressure"};

std::optional<absl::Time> ParseTimestamp(const json& object, const char* field) {
  if (!object.is_object() || !object.contains(field) || !object[field].is_string()) {
    return std::nullopt;
  }
  absl::Time t;
  if (!absl::ParseTime(absl::RFC3339_full, object[field].get<std::string>(), &t, nullptr)) {
    return std::nullopt;
  }
  return t;
}

const json* Condition(const json& node, const std::string& type) {
  auto status = node.find("status");
  if (status == node.end() || !status->is_object()) return nullptr;
  auto it = status->find("conditions");
  if (it == status->end() || !it->is_array()) return nullptr;
  for (const json& c : *it) {
    if (c.is_object() && c.value("type", "") == type) return &c;
  }
  return nullptr;
}

std::string ConditionStatus(const json& node, const std::string& type) {
  const json* c = Condition(node, type);
  return c ? c->value("status", "Unknown") : "Unknown";
}

// Whether the relevant kinds changed after `after` (or the history to tell is gone).
bool Relevant(const StoreEvent& e) {
  return e.storage_key == kNodesKey || e.storage_key == kPodsKey ||
         (e.storage_key == kLeasesKey && NamespaceOf(e.object) == kNodeLeaseNamespace);
}

}  // namespace

NodeLifecycleController::NodeLifecycleController(Api* api, NodeLifecycleOptions options)
    : api_(api), options_(std::move(options)) {}

NodeLifecycleController::~NodeLifecycleController() { Stop(); }

void NodeLifecycleController::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void NodeLifecycleController::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void NodeLifecycleController::Loop() {
  Store* store = api_->store();
  int64_t after = store->Revision();
  absl::Time due = SyncOnce();
  while (!stop_) {
    // Wake for a change, for the next deadline, or every 250 ms to notice Stop.
    absl::Duration until_due = due - Now();
    absl::Time wake = absl::Now() + std::min(until_due, absl::Milliseconds(250));
    if (!store->WaitForChange(after, wake)) return;
    bool changed = false;
    int64_t scanned = after;
    absl::Status history = store->VisitEventsAfter(
        after, [&](const StoreEvent& e) { changed |= Relevant(e); }, &scanned);
    after = scanned;
    if (!history.ok()) {
      changed = true;
      after = store->Revision();
    }
    if (changed || Now() >= due) due = SyncOnce();
  }
}

absl::Time NodeLifecycleController::SyncOnce() {
  const absl::Time now = Now();
  absl::Time next = absl::InfiniteFuture();
  Store* store = api_->store();
  int64_t revision = 0;
  std::map<std::string, json> leases;
  for (json& lease : store->List(kLeasesKey, kNodeLeaseNamespace, &revision)) {
    std::string name = NameOf(lease);  // before the move: the right side is evaluated first
    leases[name] = std::move(lease);
  }
  std::map<std::string, json> nodes;
  for (json& node : store->List(kNodesKey, "", &revision)) {
    auto lease = leases.find(NameOf(node));
    std::string name = NameOf(node);
    nodes[name] = MonitorHealth(std::move(node), lease == leases.end() ? nullptr : &lease->second,
                                now, &next);
  }
  // Master disruption: with every node not Ready nothing is evicted.
  bool all_down = !nodes.empty() && std::none_of(nodes.begin(), nodes.end(), [](const auto& n) {
    return ConditionStatus(n.second, "Ready") == "True";
  });
  for (const auto& [name, node] : nodes) {
    std::string ready = ConditionStatus(node, "Ready");
    auto seen = observed_ready_.find(name);
    if (ready != "True" && seen != observed_ready_.end() && seen->second == "True") {
      RecordEvent(node, "Normal", "NodeNotReady",
                  absl::StrCat("Node ", name, " status is now: NodeNotReady"), "node-controller");
      MarkPodsNotReady(name, now);
    }
    observed_ready_[name] = ready;
    SyncTaints(node, !all_down, now);
  }
  for (auto it = observed_ready_.begin(); it != observed_ready_.end();) {
    it = nodes.count(it->first) ? std::next(it) : observed_ready_.erase(it);
  }
  // Taint eviction and pod GC work from the nodes as they stand after the taints changed.
  std::map<std::string, json> tainted;  // node -> its NoExecute taints
  for (auto& [name, node] : nodes) {
    if (auto fresh = store->Get(kNodesKey, "", name)) node = *std::move(fresh);
    json no_execute = json::array();
    for (const json& t : node.value("spec", json::object()).value("taints", json::array())) {
      if (t.is_object() && t.value("effect", "") == "NoExecute") no_execute.push_back(t);
    }
    if (!no_execute.empty()) tainted[name] = std::move(no_execute);
  }
  std::set<std::string> named_missing;
  for (const json& pod : store->List(kPodsKey, "", &revision)) {
    if (stop_) break;
    std::string node_name = pod.value("spec", json::object()).value("nodeName", "");
    if (node_name.empty()) continue;
    auto node = nodes.find(node_name);
    if (node == nodes.end()) named_missing.insert(node_name);
    CollectPod(pod, node == nodes.end() ? nullptr : &node->second, now, &next);
    auto taints = tainted.find(node_name);
    if (taints != tainted.end()) EvictForTaints(pod, taints->second, now, &next);
  }
  for (auto it = missing_since_.begin(); it != missing_since_.end();) {
    it = named_missing.count(it->first) ? std::next(it) : missing_since_.erase(it);
  }
  return next;
}

json NodeLifecycleController::MonitorHealth(json node, const json* lease, absl::Time now,
                                            absl::Time* next) {
  std::optional<absl::Time> heartbeat;
  if (lease) heartbeat = ParseTimestamp(lease->value("spec", json::object()), "renewTime");
  if (const json* ready = Condition(node, "Ready")) {
    std::optional<absl::Time> posted = ParseTimestamp(*ready, "lastHeartbeatTime");
    if (posted && (!heartbeat || *posted > *heartbeat)) heartbeat = posted;
  }
  if (!heartbeat) heartbeat = ParseTimestamp(Meta(node), "creationTimestamp");
  if (!heartbeat) heartbeat = now;
  const absl::Time expires = *heartbeat + options_.monitor_grace_period;
  if (now <= expires) {
    // A microsecond past the expiry, so that the pass then sees it expired.
    *next = std::min(*next, expires + absl::Microseconds(1));
    return node;
  }
  bool needs_update = false;
  for (const char* type : kKubeletConditions) {
    const json* c = Condition(node, type);
    if (!c || c->value("status", "") != "Unknown") needs_update = true;
  }
  if (!needs_update) return node;
  const std::string stamp = KubeTime(now);
  (void)api_->Mutate(kNodesKey, "", NameOf(node), [&](json& live) {
    json& conditions = live["status"]["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    for (const char* type : kKubeletConditions) {
      json* found = nullptr;
      for (json& c : conditions) {
        if (c.is_object() && c.value("type", "") == type) found = &c;
      }
      if (!found) {
        conditions.push_back({{"type", type},
                              {"status", "Unknown"},
                              {"reason", "NodeStatusNeverUpdated"},
                              {"message", "Kubelet never posted node status."},
                              {"lastHeartbeatTime", KubeTime(*heartbeat)},
                              {"lastTransitionTime", stamp}});
      } else if (found->value("status", "") != "Unknown") {
        (*found)["status"] = "Unknown";
        (*found)["reason"] = "NodeStatusUnknown";
        (*found)["message"] = "Kubelet stopped posting node status.";
        (*found)["lastTransitionTime"] = stamp;
      }
    }
    node = live;
    return true;
  });
  log::Warn("Node stopped posting status",
            {{"node", NameOf(node)}, {"last_heartbeat", KubeTime(*heartbeat)}});
  return node;
}

void NodeLifecycleController::SyncTaints(const json& node, bool no_execute, absl::Time now) {
  // The taints this controller owns, and which of them the node's state asks for.
  struct Managed {
    std::string key, effect;
    bool wanted;
  };
  const std::string ready = ConditionStatus(node, "Ready");
  const bool unschedulable = node.value("spec", json::object()).value("unschedulable", false);
  std::vector<Managed> managed = {
      {kTaintNotReady, "NoSchedule", ready == "False"},
      {kTaintUnreachable, "NoSchedule", ready == "Unknown"},
      {kTaintNotReady, "NoExecute", no_execute && ready == "False"},
      {kTaintUnreachable, "NoExecute", no_execute && ready == "Unknown"},
      {kTaintUnschedulable, "NoSchedule", unschedulable},
      {"node.kubernetes.io/memory-pressure", "NoSchedule",
       ConditionStatus(node, "MemoryPressure") == "True"},
      {"node.kubernetes.io/disk-pressure", "NoSchedule",
       ConditionStatus(node, "DiskPressure") == "True"},
      {"node.kubernetes.io/pid-pressure", "NoSchedule",
       ConditionStatus(node, "PIDPressure") == "True"},
      {"node.kubernetes.io/network-unavailable", "NoSchedule",
       ConditionStatus(node, "NetworkUnavailable") == "True"},
  };
  auto same = [](const json& t, const Managed& m) {
    return t.is_object() && t.value("key", "") == m.key && t.value("effect", "") == m.effect;
  };
  const json taints = node.value("spec", json::object()).value("taints", json::array());
  bool differs = false;
  for (const Managed& m : managed) {
    bool present =
        std::any_of(taints.begin(), taints.end(), [&](const json& t) { return same(t, m); });
    differs |= present != m.wanted;
  }
  if (!differs) return;
  (void)api_->Mutate(kNodesKey, "", NameOf(node), [&](json& live) {
    if (!live["spec"].is_object()) live["spec"] = json::object();
    json kept = json::array();
    for (const json& t : live["spec"].value("taints", json::array())) {
      bool drop = std::any_of(managed.begin(), managed.end(),
                              [&](const Managed& m) { return !m.wanted && same(t, m); });
      if (!drop) kept.push_back(t);
    }
    for (const Managed& m : managed) {
      if (!m.wanted) continue;
      if (std::any_of(kept.begin(), kept.end(), [&](const json& t) { return same(t, m); })) {
        continue;
      }
      kept.push_back({{"key", m.key}, {"effect", m.effect}, {"timeAdded", KubeTime(now)}});
    }
    if (kept.empty()) {
      live["spec"].erase("taints");
    } else {
      live["spec"]["taints"] = kept;
    }
    return true;
  });
}

void NodeLifecycleController::MarkPodsNotReady(const std::string& node, absl::Time now) {
  int64_t revision = 0;
  for (const json& pod : api_->store()->List(kPodsKey, "", &revision)) {
    if (pod.value("spec", json::object()).value("nodeName", "") != node) continue;
    bool changed = false;
    (void)api_->Mutate(kPodsKey, NamespaceOf(pod), NameOf(pod), [&](json& live) {
      if (UidOf(live) != UidOf(pod)) return false;
      json& conditions = live["status"]["conditions"];
      if (!conditions.is_array()) return false;
      for (json& c : conditions) {
        if (!c.is_object() || c.value("type", "") != "Ready") continue;
        if (c.value("status", "") == "False") return false;
        c["status"] = "False";
        c["lastTransitionTime"] = KubeTime(now);
        changed = true;
        return true;
      }
      return false;
    });
    if (changed)
      RecordEvent(pod, "Warning", "NodeNotReady", "Node is not ready", "node-controller");
  }
}

}  // namespace kubetrain::localkube
