#include "operator/controller/reconciler.h"

#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/api/decode.h"
#include "operator/api/outcome.h"
#include "operator/api/render.h"
#include "operator/api/restart.h"
#include "operator/api/tfjob.h"
#include "operator/api/validation.h"
#include "operator/controller/conditions.h"
#include "operator/controller/elastic_bounds.h"
#include "operator/controller/managed_by.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/progress.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/restart_ledger.h"

namespace kubetrain::controller {

using nlohmann::json;
Reconciler::Reconciler(kube::ApiClient& client, const kube::ObjectCache& jobs,
                       const kube::ObjectCache& pods, const kube::ObjectCache& services,
                       EventRecorder& events, OperatorMetrics* metrics, ProgressPoller* progress,
                       ReconcilerOptions options, const kube::ObjectCache* tfjobs)
    : client_(client),
      jobs_(jobs),
      pods_(pods),
      services_(services),
      tfjobs_(tfjobs),
      events_(events),
      metrics_(metrics),
      progress_(progress),
      options_(std::move(options)),
      clock_(options_.clock != nullptr ? *options_.clock : Clock::Real()) {}

absl::StatusOr<ReconcileResult> Reconciler::Reconcile(const std::string& key) {
  RecordDeferredEvents(key);
  Pass p;
  absl::StatusOr<ReconcileResult> result = RunPass(key, p);
  RecordPassEvents(p, result.ok());
  return result;
}

absl::StatusOr<ReconcileResult> Reconciler::RunPass(const std::string& key, Pass& p) {
  const bool tfjob = absl::StartsWith(key, kTfJobKeyPrefix);
  const kube::ObjectCache* cache = tfjob ? tfjobs_ : &jobs_;
  std::optional<json> object;
  if (cache != nullptr) object = cache->Get(tfjob ? key.substr(strlen(kTfJobKeyPrefix)) : key);
  if (!object) {
    expectations_.Forget(key);
    {
      std::lock_guard<std::mutex> lock(writes_mu_);
      secret_ensured_.erase(key);
      templates_checked_.erase(key);
      podgroup_deleted_.erase(key);
      live_workers_.erase(key);
    }
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_written_.erase(key);
    if (progress_ != nullptr) progress_->Untrack(key);
    return ReconcileResult{};  // deleted: the garbage collector removes what it owned
  }
  std::string cached_version = (*object)["metadata"].value("resourceVersion", "");
  object = expectations_.NewestJob(key, std::move(*object));
  if ((*object)["metadata"].contains("deletionTimestamp")) return ReconcileResult{};
  // Another controller's job (MultiKueue's copy on a manager cluster): no object and no status
  // from this operator, or the job would run twice (docs/architecture.md §10).
  if (ManagedElsewhere(*object, tfjob)) return ReconcileResult{};
  p.key = key;
  p.tfjob = tfjob;
  p.cached_version = cached_version;
  p.object = *object;
  p.now = clock_.Now();
  p.ns = (*object)["metadata"].value("namespace", "default");
  p.name = (*object)["metadata"].value("name", "");
  api::FieldErrors errors;
  api::FieldErrors out_of_bounds;  // an elastic job scaled beyond spec.elastic: not a failure
  // A TFJob is reconciled as the TrainingJob it converts to (docs/decisions/0007).
  p.job = tfjob ? api::DecodeTfJob(*object, &errors)
                : api::DecodeAndValidate(*object, &errors, &out_of_bounds);
  if (!tfjob) KeepValidBounds(p, &errors, &out_of_bounds);
  if (!out_of_bounds.empty()) p.out_of_bounds = out_of_bounds.front();
  p.status = p.job.status;
  ReadLedgerAnnotations(p.object, p.tfjob, &p.status, &p.backoff);
  p.original_status = api::ToJson(p.status);
  if (errors.empty()) ReportRefusedEdit(p);
  if (!errors.empty()) {
    std::string message = std::string(api::ToStatus(errors, "TrainingJob " + p.JobRef()).message());
    if (SetCondition(&p.status, kFailed, true, "InvalidSpec", message, p.now)) {
      events_.Warning(p.object, "InvalidSpec", p.Words(message));
      if (metrics_) metrics_->JobFailed(p.ns);
    }
    RETURN_IF_ERROR(WriteStatus(p));
    // A job marked Failed keeps no pod running (Kubeflow's #1579): its spec cannot be read, so
    // not its cleanPodPolicy either; its running and pending pods go, finished ones stay.
    return StopPodsOfInvalidJob(p);
  }
  if (FindCondition(p.status, kCreated) == nullptr) {
    SetCondition(&p.status, kCreated, true, "TrainingJobCreated",
                 absl::StrCat("TrainingJob ", p.JobRef(), " is created."), p.now);
    p.creating = true;
    WarnIfCheckpointsNotDurable(p);
    if (metrics_) metrics_->JobCreated(p.ns);
  }
  p.status.observed_generation = p.job.metadata.generation;
  p.tasks = api::Tasks(p.job, api::ClusterDnsAddresses(options_.cluster_domain));
  if (tfjob) {
    for (api::Task& t : p.tasks) t.name = api::TfJobTaskName(p.object, t.type, t.index);
  }
  const char* job_label = tfjob ? api::kKubeflowLabelJobName : api::kLabelJobName;
  for (const json& pod : pods_.ListByLabel(p.ns, job_label, p.name)) {
    if (OwnedBy(pod, p.job.metadata.uid)) p.pods[pod["metadata"].value("name", "")] = pod;
  }
  {
    // Pods deleted here that the pod informer has not yet seen go are going: a pass that ran
    // before the cache caught up would otherwise restart (and count) the same failure again.
    std::set<std::string> present;
    for (const auto& [name, pod] : p.pods) present.insert(pod["metadata"].value("uid", ""));
    p.going = expectations_.PodsGoing(key, present);
  }
  RETURN_IF_ERROR(ForceDeleteStuckPods(p));
  for (const auto& [type, rs] : p.job.spec.replica_specs) {
    p.completed[type] = api::ParseIndexSet(p.status.replica_statuses[type].completed_indexes);
  }
  if (IsFinished(p.status)) return FinishedJob(p);
  if (p.job.spec.run_policy.suspend.value_or(false)) {
    RETURN_IF_ERROR(Suspend(p));
    RETURN_IF_ERROR(WriteStatus(p));
    return ReconcileResult{p.requeue};
  }
  if (IsTrue(p.status, kSuspended)) {
    SetCondition(&p.status, kSuspended, false, "TrainingJobResumed",
                 absl::StrCat("TrainingJob ", p.JobRef(), " is resumed."), p.now);
    p.status.start_time.clear();  // the deadline counts from the resume
    events_.Normal(p.object, "JobResumed", p.Words("Resumed TrainingJob job=" + p.JobRef()));
  }
  if (p.status.start_time.empty()) p.status.start_time = kube::FormatTime(p.now);
  RETURN_IF_ERROR(EnsureService(p));
  RETURN_IF_ERROR(EnsureJobSecret(p));
  RETURN_IF_ERROR(EnsureCheckpointClaim(p));
  if (options_.gang_scheduler == "volcano") RETURN_IF_ERROR(EnsurePodGroup(p));
  if (p.Elastic()) {
    RETURN_IF_ERROR(ScaleWorkers(p));
  } else {
    ForgetLiveWorkers(p.key);
    p.status.elastic.reset();
    RemoveCondition(&p.status, kScalingLimited);
  }
  RETURN_IF_ERROR(RestartOnClusterChange(p));
  RETURN_IF_ERROR(SyncTasks(p));
  // Every create this pass needed went through: whatever refused them earlier has cleared.
  if (!IsFinished(p.status)) RemoveCondition(&p.status, kReplicaFailure);
  if (IsFinished(p.status)) return FinishedJob(p);
  if (p.Elastic()) RememberLiveWorkers(p);
  ReadProgress(p);
  RETURN_IF_ERROR(WriteStatus(p));
  return ReconcileResult{p.requeue};
}

absl::StatusOr<ReconcileResult> Reconciler::FinishedJob(Pass& p) {
  if (progress_ != nullptr) progress_->Untrack(p.key);
  ForgetLiveWorkers(p.key);
  p.status.counted_failures.clear();  // a finished job restarts nothing
  p.backoff.clear();
  CountLateCompletions(p);
  ReadFinalSummary(p);
  if (p.finishing) {
    // The outcome first: this pass writes it and nothing else, and the cleanup (pods, Services,
    // a PodGroup) is the next pass's work, in the queue's lower lane, behind every job waiting
    // for a pass: a user waiting on the condition is not paced by other jobs' cleanup writes
    // (docs/architecture.md §10, "The outcome first"). The counts are those after the cleanup,
    // so the cleanup pass has no status to write.
    CountActive(p, /*after_cleanup=*/true);
    RETURN_IF_ERROR(WriteStatus(p));
    return ReconcileResult{.requeue_later = true};
  }
  // The outcome is written even when the cleanup is refused (RBAC without delete, a webhook):
  // the job shows Succeeded or Failed, and the cleanup is retried with backoff.
  absl::Status cleaned = Cleanup(p);
  CountActive(p, /*after_cleanup=*/false);
  RETURN_IF_ERROR(WriteStatus(p));
  RETURN_IF_ERROR(cleaned);
  const auto& ttl = p.job.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl) return ReconcileResult{};
  absl::Time finished = kube::ParseTime(p.status.completion_time);
  if (finished == absl::InfinitePast()) finished = p.now;
  absl::Time expiry = finished + absl::Seconds(*ttl);
  if (p.now < expiry) return ReconcileResult{expiry - p.now};
  absl::Status s =
      client_.Delete(p.JobResource(), p.ns, p.name,
                     {.propagation_policy = "Background", .precondition_uid = p.job.metadata.uid});
  if (!s.ok() && s.code() != absl::StatusCode::kNotFound) return s;
  log::Info(absl::StrCat("Deleted ", p.job.kind, " after its TTL"),
            {{"job", p.JobRef()}, {"ttl_seconds", *ttl}});
  return ReconcileResult{};
}

std::vector<api::TaskState> Reconciler::ObserveTasks(const Pass& p,
                                                     std::map<std::string, PodView>* views) const {
  std::vector<api::TaskState> tasks;
  for (const api::Task& t : p.tasks) {
    api::TaskState s{.type = t.type,
                     .index = t.index,
                     .chief = t.chief,
                     .restart_policy = t.restart_policy,
                     .name = t.name};
    auto it = p.pods.find(t.name);
    if (it != p.pods.end()) {
      std::optional<PodView> v = p.View(it->second);
      s.phase = api::TaskPhase::kGoing;  // unreadable, deleting, or a phase such as Unknown
      if (v) {
        s.id = v->uid;
        if (v->deleting) {
          s.phase = api::TaskPhase::kGoing;
        } else if (v->phase == "Pending") {
          s.phase = api::TaskPhase::kPending;
        } else if (v->phase == "Running") {
          s.phase = api::TaskPhase::kRunning;
        } else if (v->phase == "Succeeded") {
          s.phase = api::TaskPhase::kSucceeded;
        } else if (v->phase == "Failed") {
          s.phase = api::TaskPhase::kFailed;
          s.exit_code = EffectiveExitCode(*v);
        }
        views->emplace(t.name, *v);
      }
    }
    tasks.push_back(std::move(s));
  }
  return tasks;
}

absl::Status Reconciler::SyncTasks(Pass& p) {
  // Observe.
  std::map<std::string, PodView> views;
  std::vector<api::TaskState> tasks = ObserveTasks(p, &views);
  api::JobLedger ledger;
  ledger.completed = p.completed;
  for (const auto& [type, rs] : p.status.replica_statuses) ledger.restarts[type] = rs.restarts;
  ledger.counted = p.status.counted_failures;
  ledger.start = kube::ParseTime(p.status.start_time);
  ledger.backoff = p.backoff;
  // Decide: the job-outcome policy shared with `kubetrain run` (operator/api/outcome.h).
  api::JobDecision d = api::DecideJob(p.job, tasks, ledger, p.now, options_.restart_backoff);
  // Act: status first, so a count is saved before any pod it covers goes.
  p.completed = d.ledger.completed;
  p.backoff = d.ledger.backoff;
  std::map<api::ReplicaType, int32_t> occupying = p.Occupying();
  for (const auto& [type, spec] : p.job.spec.replica_specs) {
    api::ReplicaStatus& out = p.status.replica_statuses[type];
    out.active = occupying[type];  // a pod going still counts: d.active counts live tasks
    out.failed = d.failed[type];
    out.succeeded = static_cast<int32_t>(p.completed[type].size());
    out.completed_indexes = api::FormatIndexSet(p.completed[type]);
  }
  for (const auto& [type, n] : d.ledger.restarts) p.status.replica_statuses[type].restarts = n;
  p.status.counted_failures = d.ledger.counted;
  if (p.status.elastic) p.status.elastic->live_workers = d.active[api::ReplicaType::kWorker];
  auto describe = [&](const api::TaskState& t) {
    auto v = views.find(t.name);
    std::string reason = v == views.end() ? "" : v->second.reason;
    return absl::StrCat("Pod exited pod=", t.name, " exit_code=", t.exit_code,
                        reason.empty() ? "" : " reason=" + reason);
  };
  const int limit = p.job.spec.run_policy.backoff_limit.value_or(api::kDefaultBackoffLimit);
  switch (d.verdict) {
    case api::Verdict::kNone:
      break;
    case api::Verdict::kSucceeded:
      Finish(p, true, "TrainingJobSucceeded",
             absl::StrCat("TrainingJob ", p.JobRef(), " successfully completed."));
      return absl::OkStatus();
    case api::Verdict::kFailed:
      events_.Warning(p.object, "ExitedWithCode", describe(*d.culprit));
      Finish(p, false, "TrainingJobFailed",
             absl::StrCat("TrainingJob ", p.JobRef(), " has failed because pod ", d.culprit->name,
                          " ", api::DescribeExit(d.culprit->exit_code), " and restartPolicy ",
                          api::Name(d.culprit->restart_policy), " does not retry it."));
      return absl::OkStatus();
    case api::Verdict::kBackoffLimitExceeded:
      // A TFJob's reason is Kubeflow's, TFJobFailed, for every failure (pkg/controller.v1/common).
      Finish(p, false, p.tfjob ? "TrainingJobFailed" : "BackoffLimitExceeded",
             absl::StrCat("TrainingJob ", p.JobRef(),
                          " has failed because it has reached the specified backoff limit (", limit,
                          " restarts); last failure: pod ", d.culprit->name, " ",
                          api::DescribeExit(d.culprit->exit_code)));
      return absl::OkStatus();
    case api::Verdict::kDeadlineExceeded:
      Finish(p, false, p.tfjob ? "TrainingJobFailed" : "DeadlineExceeded",
             absl::StrCat("TrainingJob ", p.JobRef(), " was active longer than its ",
                          "activeDeadlineSeconds (",
                          p.job.spec.run_policy.active_deadline_seconds.value_or(0), ")."));
      return absl::OkStatus();
  }
  if (d.deadline) p.Requeue(*d.deadline - p.now);  // fires by itself, without another event
  // A task waiting out its back-off is started by a pass of its own when the back-off ends.
  for (const api::JobDecision::Waiting& w : d.waiting) p.Requeue(w.until - p.now);
  if (!d.restarted.empty()) {
    std::vector<std::string> names;
    for (const api::TaskState& t : d.restarted) names.push_back(t.name);
    const std::vector<std::string> pauses = DescribePauses(d, p.backoff, options_.restart_backoff);
    SetCondition(&p.status, kRestarting, true, "TrainingJobRestarting",
                 absl::StrCat("TrainingJob ", p.JobRef(), " is restarting because ", names.size(),
                              " pod(s) failed: ", absl::StrJoin(names, ", "),
                              pauses.empty() ? "" : "; " + absl::StrJoin(pauses, ", "), "."),
                 p.now);
    RETURN_IF_ERROR(WriteStatus(p));
    for (const api::TaskState& t : d.restarted) {
      events_.Warning(p.object, "ExitedWithCode", describe(t));
    }
    for (const std::string& pause : pauses) {
      // As the kubelet's BackOff event for a container: `kubectl describe` shows the wait.
      events_.Warning(p.object, "BackOff", absl::StrCat("Back-off ", pause, " job=", p.JobRef()));
    }
    if (d.whole_job) {
      events_.Normal(p.object, "RestartedJob",
                     absl::StrCat("Restarted every Pod of the job job=", p.JobRef(),
                                  " failed=", absl::StrJoin(names, ",")));
    } else {
      for (const api::TaskState& t : d.restarted) {
        events_.Normal(p.object, "RestartedPod",
                       absl::StrCat("Restarted Pod pod=", t.name, " exit_code=", t.exit_code,
                                    " restarts=", p.status.replica_statuses[t.type].restarts));
      }
    }
    if (metrics_) metrics_->JobRestarted(p.ns);
  }
  for (const api::TaskState& t : d.stop) {
    RETURN_IF_ERROR(DeletePod(p, p.pods[t.name], d.whole_job ? "RestartScopeJob" : "Restart"));
  }
  for (const api::TaskState& t : d.start) {
    RETURN_IF_ERROR(CreatePod(p, t.type, t.index));
    if (IsFinished(p.status)) return absl::OkStatus();  // a template the server refused
    // Its pod exists now, Pending: the status this pass writes counts it, as the next pass
    // would, so a job's start is one status write, not a second one for the counts.
    ++p.status.replica_statuses[t.type].active;
  }
  if (p.status.elastic) {
    p.status.elastic->live_workers = p.status.replica_statuses[api::ReplicaType::kWorker].active;
  }
  if (d.chief_running && d.stop.empty()) {
    SetCondition(&p.status, kRunning, true, "TrainingJobRunning",
                 absl::StrCat("TrainingJob ", p.JobRef(), " is running."), p.now);
  }
  return absl::OkStatus();
}

void Reconciler::Finish(Pass& p, bool succeeded, const std::string& reason,
                        const std::string& message) {
  if (!SetCondition(&p.status, succeeded ? kSucceeded : kFailed, true, reason, message, p.now)) {
    return;
  }
  p.finishing = true;
  p.status.completion_time = kube::FormatTime(p.now);
  std::string cleanup = CleanupWords(p);
  if (succeeded) {
    p.job_events.push_back(
        {false, "JobSucceeded", p.Words("TrainingJob succeeded job=" + p.JobRef()) + cleanup});
    if (metrics_) metrics_->JobSucceeded(p.ns);
  } else {
    p.job_events.push_back({true, "JobFailed",
                            p.Words(absl::StrCat("TrainingJob failed job=", p.JobRef(),
                                                 " reason=", reason, ": ", message)) +
                                cleanup});
    if (metrics_) metrics_->JobFailed(p.ns);
  }
  log::Info(succeeded ? "TrainingJob succeeded" : "TrainingJob failed",
            {{"job", p.JobRef()}, {"reason", reason}, {"message", message}});
}

void Reconciler::CountLateCompletions(Pass& p) {
  for (const auto& [name, pod] : p.pods) {
    std::optional<PodView> v = p.View(pod);
    if (!v || v->phase != "Succeeded" || !p.job.spec.replica_specs.count(v->type)) continue;
    if (!p.completed[v->type].insert(v->index).second) continue;
    api::ReplicaStatus& rs = p.status.replica_statuses[v->type];
    rs.succeeded = static_cast<int32_t>(p.completed[v->type].size());
    rs.completed_indexes = api::FormatIndexSet(p.completed[v->type]);
  }
}

void Reconciler::CountActive(Pass& p, bool after_cleanup) {
  for (auto& [type, rs] : p.status.replica_statuses) rs.active = 0;
  // Running and All leave no pod active.
  if (!after_cleanup || p.CleanPodPolicy() == api::CleanPodPolicy::kNone) {
    for (const auto& [name, pod] : p.pods) {
      std::optional<PodView> v = p.View(pod);
      if (v && Active(*v)) ++p.status.replica_statuses[v->type].active;
    }
  }
  if (p.status.elastic) {
    p.status.elastic->live_workers = p.status.replica_statuses[api::ReplicaType::kWorker].active;
  }
}

absl::Status Reconciler::WriteStatus(Pass& p) {
  NameCreatedObjects(p);
  json status = api::ToJson(p.status);
  std::map<std::string, std::string> annotations = LedgerAnnotations(p.status, p.backoff, p.tfjob);
  if (p.remember_bounds) annotations[kElasticBoundsAnnotation] = ElasticBoundsAnnotation(p.job);
  std::optional<json> ledger = LedgerPatch(p.object, annotations);
  if (status == p.original_status && !ledger) return absl::OkStatus();
  std::set<std::string> older = {p.cached_version,
                                 p.object["metadata"].value("resourceVersion", "")};
  if (ledger) {
    // Annotations do not move through /status: the ledger goes first, in a write of its own,
    // conditional on p.object's version as the PUT is, so it is saved before any pod it covers
    // goes (restart_ledger.h).
    absl::StatusOr<json> patched =
        client_.Patch(p.JobResource(), p.ns, p.name, kube::PatchType::kMerge, ledger->dump());
    RETURN_IF_ERROR(patched.status(), "saving the restart ledger of ", p.JobRef());
    kube::StripForCache(*patched);
    p.object["metadata"]["annotations"] = (*patched)["metadata"].value("annotations", json());
    p.object["metadata"]["resourceVersion"] = (*patched)["metadata"].value("resourceVersion", "");
    if (status == p.original_status) {
      expectations_.StatusWritten(p.key, older, p.object);
      return absl::OkStatus();
    }
    older.insert(p.object["metadata"].value("resourceVersion", ""));
  }
  p.status.last_reconcile_time = kube::FormatTime(p.now);
  json object = p.object;
  object["status"] = p.tfjob ? api::TfJobStatus(p.status, p.object) : api::ToJson(p.status);
  // PUT with the cached resourceVersion: a stale cache gets 409 and the job is retried.
  absl::StatusOr<json> written = client_.UpdateStatus(p.JobResource(), p.ns, object);
  RETURN_IF_ERROR(written.status(), "updating the status of ", p.JobRef());
  kube::StripForCache(*written);  // held until the cache catches up: no bigger than its copy
  // The PUT was conditional on p.object's version, so every version seen so far is older.
  expectations_.StatusWritten(p.key, older, *written);
  p.object = *written;
  p.original_status = api::ToJson(p.status);
  if (p.creating) p.created_named = p.created.size();
  return absl::OkStatus();
}

}  // namespace kubetrain::controller
