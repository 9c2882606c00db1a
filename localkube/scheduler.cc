// The scheduling loop (see scheduler.h): caches of nodes and of what each bound pod takes,
// kept from the store's events, and the binding of pending pods.
#include "localkube/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/binding.h"
#include "localkube/events.h"
#include "localkube/kinds.h"
#include "localkube/object_meta.h"
#include "localkube/storage_objects.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kNodesKey[] = "/nodes";
constexpr absl::Duration kMaxBackoff = absl::Seconds(10);

std::string PodKeyOf(const json& object) {
  return absl::StrCat(NamespaceOf(object), "/", NameOf(object));
}

const json& SpecOf(const json& pod) {
  static const json kEmpty = json::object();
  auto it = pod.find("spec");
  return it != pod.end() && it->is_object() ? *it : kEmpty;
}

bool Finished(const json& pod) {
  std::string phase = pod.value("status", json::object()).value("phase", "");
  return phase == "Succeeded" || phase == "Failed";
}

// Whether this scheduler should bind the pod now.
bool WantsScheduling(const json& pod) {
  const json& spec = SpecOf(pod);
  if (!spec.value("nodeName", "").empty()) return false;
  std::string scheduler = spec.value("schedulerName", "");
  if (!scheduler.empty() && scheduler != Scheduler::kName) return false;
  if (pod["metadata"].contains("deletionTimestamp") || Finished(pod)) return false;
  auto gates = spec.find("schedulingGates");
  return gates == spec.end() || !gates->is_array() || gates->empty();
}

// What the filters read of a node: a change to anything else (heartbeats) frees nothing.
std::string Signature(const json& node) {
  json status = node.value("status", json::object());
  json ready;
  for (const json& c : status.value("conditions", json::array())) {
    if (c.value("type", "") == "Ready") ready = c.value("status", "");
  }
  return json{node["metadata"].value("labels", json::object()), node.value("spec", json::object()),
              status.value("allocatable", json::object()), ready}
      .dump();
}

}  // namespace

Scheduler::Scheduler(Api* api) : api_(api) {}

Scheduler::~Scheduler() { Stop(); }

void Scheduler::AddFilter(SchedulerFilter filter) { filters_.push_back(std::move(filter)); }
void Scheduler::AddPreBind(SchedulerPreBind prebind) { prebinds_.push_back(std::move(prebind)); }

void Scheduler::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Scheduler::Loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    Follow();
    Pass();
    // Woken by the next store change; the deadline only bounds how late Stop is noticed and
    // when a failed binding is retried.
    absl::Time deadline = absl::Now() + absl::Milliseconds(200);
    for (const auto& [key, p] : pending_) {
      if (!p.dirty) deadline = std::min(deadline, p.retry_at);
    }
    api_->store()->WaitForChange(cursor_, deadline);
  }
}

bool Scheduler::Follow() {
  if (cursor_ == 0) {
    Resync();
    return true;
  }
  std::vector<StoreEvent> events;
  bool volumes_changed = false;
  int64_t scanned = cursor_;
  absl::Status st = api_->store()->VisitEventsAfter(
      cursor_,
      [&](const StoreEvent& e) {
        if (e.storage_key == kPodsKey || e.storage_key == kNodesKey) {
          events.push_back(e);
        } else if (e.storage_key == kPvcKey || e.storage_key == kPvKey) {
          // A claim bound or a volume made may let a pod that waited on it fit, as
          // kube-scheduler's volume binding requeues pods on claim and volume events.
          volumes_changed = true;
        }
      },
      &scanned);
  if (!st.ok()) {
    Resync();  // history compacted under us
    return true;
  }
  cursor_ = scanned;
  if (volumes_changed) {
    for (auto& [key, p] : pending_) p.dirty = true;
  }
  for (const StoreEvent& e : events) {
    if (e.storage_key == kPodsKey) {
      OnPod(e.type, e.object);
    } else {
      OnNode(e.type, e.object);
    }
  }
  return !events.empty() || volumes_changed;
}

void Scheduler::Resync() {
  int64_t nodes_at = 0, pods_at = 0;
  std::vector<json> nodes = api_->store()->List(kNodesKey, "", &nodes_at);
  std::vector<json> pods = api_->store()->List(kPodsKey, "", &pods_at);
  // Events after the older list replay harmlessly (they restate state).
  std::map<std::string, Pending> old_pending = std::move(pending_);
  pods_.clear();
  pending_.clear();
  nodes_.clear();
  node_signature_.clear();
  usage_.clear();
  cursor_ = std::min(nodes_at, pods_at);
  for (const json& n : nodes) OnNode("ADDED", n);
  for (const json& p : pods) OnPod("ADDED", p);
  for (auto& [key, p] : pending_) {
    auto it = old_pending.find(key);
    if (it != old_pending.end()) p.last_message = it->second.last_message;
  }
}

void Scheduler::Account(const std::string& key, const PodEntry& entry, int sign) {
  (void)key;
  if (!entry.counts) return;
  NodeUsage& u = usage_[entry.node];
  u.pods += sign;
  for (const auto& [k, v] : entry.requests) u.requested[k] += sign * v;
}

void Scheduler::OnPod(const std::string& type, const json& pod) {
  std::string key = PodKeyOf(pod);
  bool freed = false;
  auto it = pods_.find(key);
  if (it != pods_.end()) {
    Account(key, it->second, -1);
    freed = it->second.counts;
    pods_.erase(it);
  }
  if (type == "DELETED") {
    pending_.erase(key);
    events_.erase(pod["metadata"].value("uid", ""));
  } else {
    PodEntry entry;
    entry.node = SpecOf(pod).value("nodeName", "");
    entry.requests = PodRequests(pod);
    entry.counts = !entry.node.empty() && !Finished(pod);
    Account(key, entry, +1);
    if (freed && entry.counts) freed = false;  // still there (requests do not change in place)
    pods_[key] = std::move(entry);
    if (WantsScheduling(pod)) {
      auto p = pending_.find(key);
      if (p == pending_.end()) {
        pending_[key].pod = pod;
      } else if (p->second.pod["spec"] != pod["spec"] ||
                 p->second.pod["metadata"].value("uid", "") != pod["metadata"].value("uid", "")) {
        p->second.pod = pod;
        p->second.dirty = true;
      } else {
        p->second.pod = pod;
      }
    } else {
      pending_.erase(key);
    }
  }
  if (freed) {
    for (auto& [k, p] : pending_) p.dirty = true;
  }
}

void Scheduler::OnNode(const std::string& type, const json& node) {
  std::string name = NameOf(node);
  std::string signature = type == "DELETED" ? "" : Signature(node);
  if (type == "DELETED") {
    nodes_.erase(name);
  } else {
    nodes_[name] = node;
  }
  if (node_signature_[name] == signature) return;
  node_signature_[name] = signature;
  for (auto& [k, p] : pending_) p.dirty = true;
}

void Scheduler::Pass() {
  absl::Time now = absl::Now();
  std::vector<std::pair<std::tuple<int64_t, std::string, std::string>, std::string>> order;
  for (auto& [key, p] : pending_) {
    if (!p.dirty && now < p.retry_at) continue;
    const json& spec = SpecOf(p.pod);
    int64_t priority = spec.contains("priority") && spec["priority"].is_number_integer()
                           ? spec["priority"].get<int64_t>()
                           : 0;
    order.push_back({{-priority, p.pod["metadata"].value("creationTimestamp", ""), key}, key});
  }
  std::sort(order.begin(), order.end());
  for (const auto& [rank, key] : order) {
    auto it = pending_.find(key);
    if (it == pending_.end()) continue;
    it->second.dirty = false;
    it->second.retry_at = absl::InfiniteFuture();
    ScheduleOne(key, it->second);
  }
}

void Scheduler::ScheduleOne(const std::string& key, Pending& pending) {
  const json& pod = pending.pod;
  std::vector<FitResult> results;
  std::string best;
  int64_t best_score = 0;
  int best_pods = 0;
  for (const auto& [name, node] : nodes_) {
    const NodeUsage& usage = usage_[name];
    FitResult fit = Fits(pod, node, usage);
    if (fit.reasons.empty()) {
      for (const SchedulerFilter& filter : filters_) {
        std::string reason = filter(pod, node);
        if (!reason.empty()) {
          fit.reasons.push_back(reason);
          fit.resolvable = false;
          break;
        }
      }
    }
    if (!fit.reasons.empty()) {
      results.push_back(std::move(fit));
      continue;
    }
    int64_t score = Score(pod, node, usage);
    // Ties (a big node's score moves little per pod) go to the node running fewest pods, as
    // kube-scheduler's default topology spread would spread them; then by name (nodes_ is).
    if (best.empty() || score > best_score || (score == best_score && usage.pods < best_pods)) {
      best = name;
      best_score = score;
      best_pods = usage.pods;
    }
  }
  if (best.empty()) {
    Unschedulable(pending, "Unschedulable", FitErrorMessage(results));
    return;
  }
  auto retry = [&](const std::string& message) {
    Unschedulable(pending, "SchedulerError", message);
    pending.retry_at = absl::Now() + pending.backoff;
    pending.backoff = std::min(pending.backoff * 2, kMaxBackoff);
  };
  for (const SchedulerPreBind& prebind : prebinds_) {
    absl::Status st = prebind(pod, best);
    if (!st.ok()) return retry(std::string(st.message()));
  }
  std::string ns = NamespaceOf(pod), name = NameOf(pod);
  json binding = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata", {{"name", name}, {"namespace", ns}, {"uid", pod["metadata"].value("uid", "")}}},
      {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", best}}}};
  absl::StatusOr<json> bound = BindPod(*api_, ns, name, binding, /*dry_run=*/false);
  if (!bound.ok()) {
    // Gone, bound by someone else or gated since: the store's event says what became of it.
    if (absl::IsNotFound(bound.status()) || absl::IsAborted(bound.status())) return;
    if (bound.status().raw_code() == static_cast<int>(absl::StatusCode::kAlreadyExists)) return;
    return retry(std::string(bound.status().message()));
  }
  log::Info("Scheduled Pod", {{"pod", key}, {"node", best}});
  RecordEvent(pod, "Normal", "Scheduled",
              absl::StrCat("Successfully assigned ", key, " to ", best));
  // Taken at once, before the store's event says so (which then restates it).
  auto it = pods_.find(key);
  if (it != pods_.end()) Account(key, it->second, -1);
  PodEntry entry{best, PodRequests(pod), true};
  Account(key, entry, +1);
  pods_[key] = std::move(entry);
  pending_.erase(key);
}

void Scheduler::Unschedulable(Pending& pending, const std::string& reason,
                              const std::string& message) {
  if (pending.last_message == reason + "\n" + message) return;
  pending.last_message = reason + "\n" + message;
  const json& pod = pending.pod;
  std::string uid = pod["metadata"].value("uid", "");
  std::string now = KubeTime(absl::Now());
  (void)api_->Mutate(kPodsKey, NamespaceOf(pod), NameOf(pod), [&](json& live) {
    if (live["metadata"].value("uid", "") != uid || !WantsScheduling(live)) return false;
    json& status = live["status"];
    if (!status.is_object()) status = json::object();
    json conditions = status.value("conditions", json::array());
    json condition = {{"type", "PodScheduled"},    {"status", "False"}, {"lastProbeTime", nullptr},
                      {"lastTransitionTime", now}, {"reason", reason},  {"message", message}};
    bool found = false;
    for (json& c : conditions) {
      if (c.value("type", "") != "PodScheduled") continue;
      if (c.value("status", "") == "False") {
        condition["lastTransitionTime"] = c.value("lastTransitionTime", now);
      }
      c = condition;
      found = true;
    }
    if (!found) conditions.push_back(condition);
    status["conditions"] = conditions;
    return true;
  });
  RecordEvent(pod, "Warning", "FailedScheduling", message);
  log::Info("Pod unschedulable", {{"pod", PodKeyOf(pod)}, {"message", message}});
}

// An Event about the pod from default-scheduler; a repeat of the same reason and message raises
// the count of the first.
void Scheduler::RecordEvent(const json& pod, const std::string& type, const std::string& reason,
                            const std::string& message) {
  InvolvedObject about = InvolvedObjectOf(pod, "Pod");
  std::map<std::string, std::string>& seen = events_[about.uid];
  auto it = seen.find(reason + "\n" + message);
  if (it != seen.end() && RepeatEvent(*api_, about.ns, it->second).ok()) return;
  absl::StatusOr<std::string> name =
      PostEvent(*api_, about, type, reason, message,
                {.component = kName,
                 .reporting_instance = absl::StrCat(kName, "-localkube"),
                 .action = "Scheduling"});
  if (name.ok()) seen[reason + "\n" + message] = *name;
}

}  // namespace kubetrain::localkube
