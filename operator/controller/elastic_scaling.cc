// Elastic jobs (docs/architecture.md §10): Worker replicas kept within spec.elastic, scaled up
// and down without a restart, and lost Workers (evicted, preempted, deleted) recreated without
// counting against backoffLimit. The membership itself is the parameter servers' to hold.
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/controller/conditions.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {

absl::Status Reconciler::ScaleWorkers(Pass& p) {
  const int target = p.job.spec.replica_specs.at(api::ReplicaType::kWorker).replicas.value_or(1);
  ReportWorkerBounds(p, target);
  RETURN_IF_ERROR(ScaleTo(p, target));
  return RecoverLostWorkers(p, target);
}

void Reconciler::ReportWorkerBounds(Pass& p, int target) {
  if (!p.out_of_bounds) {
    RemoveCondition(&p.status, kScalingLimited);
    return;
  }
  // `kubectl scale` past a bound: reported once per change, and the job stays at the bound.
  const int asked =
      p.object.value(json::json_pointer("/spec/replicaSpecs/Worker/replicas"), target);
  const char* reason = asked > target ? "TooManyReplicas" : "TooFewReplicas";
  std::string message = absl::StrCat("TrainingJob ", p.JobRef(), ": ", p.out_of_bounds->ToString());
  if (SetCondition(&p.status, kScalingLimited, true, reason, message, p.now)) {
    events_.Warning(p.object, reason, message);
  }
}

absl::Status Reconciler::ScaleTo(Pass& p, int target) {
  const bool known = p.status.elastic.has_value();
  api::ElasticStatus& elastic = known ? *p.status.elastic : p.status.elastic.emplace();
  if (known && elastic.target_workers != target) {
    events_.Normal(p.object, "Scaled",
                   absl::StrCat("Scaled Worker replicas ", elastic.target_workers, " → ", target,
                                " job=", p.JobRef()));
    log::Info("Scaled an elastic TrainingJob",
              {{"job", p.JobRef()}, {"from", elastic.target_workers}, {"to", target}});
    elastic.last_scale_time = kube::FormatTime(p.now);
  }
  elastic.target_workers = target;
  // Workers above the count leave: deleted, never counted as failures, and their completions
  // no longer count for the success policy. New indexes are absent tasks that SyncTasks starts.
  std::vector<json> surplus;
  for (const auto& [name, pod] : p.pods) {
    std::optional<PodView> v = p.View(pod);
    if (v && v->type == api::ReplicaType::kWorker && v->index >= target && !v->deleting) {
      surplus.push_back(pod);
    }
  }
  for (const json& pod : surplus) RETURN_IF_ERROR(DeletePod(p, pod, "ScaledDown"));
  std::set<int>& done = p.completed[api::ReplicaType::kWorker];
  done.erase(done.lower_bound(target), done.end());
  return absl::OkStatus();
}

absl::Status Reconciler::RecoverLostWorkers(Pass& p, int target) {
  // Workers taken away while still wanted: an evicted or preempted pod is deleted here, so
  // SyncTasks sees it going (not failed) and recreates it once it is gone; one deleted by
  // someone else is simply absent. Neither counts against backoffLimit or restarts the job.
  std::map<int, std::string> was_live;
  {
    std::lock_guard<std::mutex> lock(writes_mu_);
    auto it = live_workers_.find(p.key);
    if (it != live_workers_.end()) was_live = it->second;
  }
  std::vector<std::string> lost;
  std::set<int> lost_indexes;
  for (const api::Task& t : p.tasks) {
    if (t.type != api::ReplicaType::kWorker) continue;
    auto pod = p.pods.find(t.name);
    std::optional<PodView> v = pod == p.pods.end() ? std::nullopt : ViewPod(pod->second);
    const bool ours = v && p.going.count(v->uid) > 0;  // deleted by this reconciler
    if (v && !v->deleting && !ours && v->phase == "Failed" && !v->disruption.empty()) {
      RETURN_IF_ERROR(DeletePod(p, pod->second, "WorkerLost"));
      lost.push_back(absl::StrCat(t.name, " (", v->disruption, ")"));
      lost_indexes.insert(t.index);
      continue;
    }
    auto seen = was_live.find(t.index);
    if (seen == was_live.end()) continue;
    if (!v || v->uid != seen->second || (v->deleting && !ours)) {
      lost.push_back(
          absl::StrCat(t.name, " (", v && !v->disruption.empty() ? v->disruption : "deleted", ")"));
      lost_indexes.insert(t.index);
    }
  }
  if (lost.empty()) return absl::OkStatus();
  {
    std::lock_guard<std::mutex> lock(writes_mu_);
    for (int index : lost_indexes) live_workers_[p.key].erase(index);  // reported once
  }
  int live = 0;
  for (const api::Task& t : p.tasks) {
    auto pod = p.pods.find(t.name);
    if (t.type != api::ReplicaType::kWorker || pod == p.pods.end()) continue;
    std::optional<PodView> v = p.View(pod->second);
    if (v && Active(*v)) ++live;
  }
  // One event for every Worker lost in this pass (docs/architecture.md §10).
  events_.Normal(p.object, "WorkerLost",
                 absl::StrCat("Lost ", absl::StrJoin(lost, ", "), "; ", live, " of ", target,
                              " workers live, recreating job=", p.JobRef()));
  log::Info("Lost workers of an elastic TrainingJob",
            {{"job", p.JobRef()}, {"lost", absl::StrJoin(lost, ",")}, {"live", live}});
  return absl::OkStatus();
}

void Reconciler::RememberLiveWorkers(const Pass& p) {
  // Only pods the cache showed: one this pass created may not be in the next pass's cache yet,
  // and would look deleted there.
  std::set<std::string> created;
  for (const auto& [kind, name] : p.created) {
    if (kind == "Pod") created.insert(name);
  }
  std::map<int, std::string> live;
  for (const api::Task& t : p.tasks) {
    auto pod = p.pods.find(t.name);
    if (t.type != api::ReplicaType::kWorker || pod == p.pods.end()) continue;
    if (created.count(t.name) > 0) continue;
    std::optional<PodView> v = p.View(pod->second);
    if (v && Active(*v)) live[t.index] = v->uid;
  }
  std::lock_guard<std::mutex> lock(writes_mu_);
  live_workers_[p.key] = std::move(live);
}

void Reconciler::ForgetLiveWorkers(const std::string& key) {
  std::lock_guard<std::mutex> lock(writes_mu_);
  live_workers_.erase(key);
}

}  // namespace kubetrain::controller
