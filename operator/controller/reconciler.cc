#include "operator/controller/reconciler.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/job_secret_env.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/restart.h"
#include "operator/api/tf_config.h"
#include "operator/api/validation.h"
#include "operator/controller/conditions.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/progress.h"

namespace kubetrain::controller {

using nlohmann::json;

struct Reconciler::Pass {
  std::string key;
  std::string ns;
  std::string name;
  json object;                 // the job as cached, or as last written by us (NewestJob)
  std::string cached_version;  // the resourceVersion the job informer held
  api::TrainingJob job;
  api::TrainingJobStatus status;
  json original_status;
  std::map<std::string, json> pods;  // this job's pods, by name
  std::map<api::ReplicaType, std::set<int>> completed;
  std::vector<PodView> failed;  // failed pods whose restart policy retries them
  std::optional<absl::Duration> requeue;
  absl::Time now;
  bool finishing = false;  // this pass ended the job

  std::string JobRef() const { return ns + "/" + name; }
  void Requeue(absl::Duration d) {
    if (!requeue || d < *requeue) requeue = std::max(d, absl::Milliseconds(10));
  }
};

namespace {

bool OwnedBy(const json& pod, const std::string& uid) {
  if (uid.empty()) return true;
  const json& refs = pod["metadata"].value("ownerReferences", json::array());
  for (const json& ref : refs) {
    if (ref.value("uid", "") == uid && ref.value("controller", false)) return true;
  }
  return false;
}

int TotalRestarts(const api::TrainingJobStatus& status) {
  int total = 0;
  for (const auto& [type, rs] : status.replica_statuses) total += rs.restarts;
  return total;
}

bool Active(const PodView& v) {
  return !v.deleting && (v.phase == "Pending" || v.phase == "Running");
}

// The API server's words in an error from kube::Client ("POST /api/v1/...: <message> (Reason,
// HTTP 403)"), without the request line.
std::string ApiMessage(const absl::Status& error) {
  absl::string_view m = error.message();
  size_t colon = m.find(": ");
  if (absl::StartsWith(m, "POST ") && colon != absl::string_view::npos) m.remove_prefix(colon + 2);
  return std::string(m);
}

// Lines of the chief's log searched for its summary when it left no termination message.
constexpr int kSummaryLogLines = 20;

// The cluster part of the TF_CONFIG a pod was created with; nullopt when it has none.
std::optional<std::map<std::string, std::vector<std::string>>> PodCluster(const json& pod) {
  const json& containers = pod.value("spec", json::object()).value("containers", json::array());
  if (!containers.is_array()) return std::nullopt;
  for (const json& c : containers) {
    if (!c.is_object() || !c.contains("env") || !c["env"].is_array()) continue;
    for (const json& e : c["env"]) {
      if (!e.is_object() || e.value("name", "") != "TF_CONFIG") continue;
      absl::StatusOr<api::TfConfig> tf = api::ParseTfConfig(e.value("value", ""));
      if (tf.ok()) return tf->cluster;
    }
  }
  return std::nullopt;
}

// "ps=1,worker=2": the shape of a cluster, for events and messages.
std::string Shape(const std::map<std::string, std::vector<std::string>>& cluster) {
  std::vector<std::string> parts;
  for (const auto& [type, addresses] : cluster) {
    parts.push_back(absl::StrCat(type, "=", addresses.size()));
  }
  return parts.empty() ? "(none)" : absl::StrJoin(parts, ",");
}

}  // namespace

Reconciler::Reconciler(kube::Client& client, kube::Informer& jobs, kube::Informer& pods,
                       kube::Informer& services, EventRecorder& events, OperatorMetrics* metrics,
                       ProgressPoller* progress, ReconcilerOptions options)
    : client_(client),
      jobs_(jobs),
      pods_(pods),
      services_(services),
      events_(events),
      metrics_(metrics),
      progress_(progress),
      options_(std::move(options)) {}

absl::StatusOr<ReconcileResult> Reconciler::Reconcile(const std::string& key) {
  std::optional<json> object = jobs_.Get(key);
  if (!object) {
    {
      std::lock_guard<std::mutex> lock(writes_mu_);
      own_writes_.erase(key);
      deleted_pods_.erase(key);
      secret_ensured_.erase(key);
      templates_checked_.erase(key);
    }
    std::lock_guard<std::mutex> lock(progress_mu_);
    progress_written_.erase(key);
    if (progress_ != nullptr) progress_->Untrack(key);
    return ReconcileResult{};  // deleted: the garbage collector removes what it owned
  }
  std::string cached_version = (*object)["metadata"].value("resourceVersion", "");
  object = NewestJob(key, std::move(*object));
  if ((*object)["metadata"].contains("deletionTimestamp")) return ReconcileResult{};
  Pass p;
  p.key = key;
  p.cached_version = cached_version;
  p.object = *object;
  p.now = absl::Now();
  p.ns = (*object)["metadata"].value("namespace", "default");
  p.name = (*object)["metadata"].value("name", "");
  api::FieldErrors errors;
  p.job = api::DecodeAndValidate(*object, &errors);
  p.status = p.job.status;
  p.original_status = api::ToJson(p.status);
  if (!errors.empty()) {
    std::string message = std::string(api::ToStatus(errors, "TrainingJob " + p.JobRef()).message());
    if (SetCondition(&p.status, kFailed, true, "InvalidSpec", message, p.now)) {
      events_.Warning(p.object, "InvalidSpec", message);
      if (metrics_) metrics_->JobFailed(p.ns);
    }
    RETURN_IF_ERROR(WriteStatus(p));
    return ReconcileResult{};
  }
  if (FindCondition(p.status, kCreated) == nullptr) {
    SetCondition(&p.status, kCreated, true, "TrainingJobCreated",
                 absl::StrCat("TrainingJob ", p.JobRef(), " is created."), p.now);
    if (metrics_) metrics_->JobCreated(p.ns);
  }
  p.status.observed_generation = p.job.metadata.generation;
  for (const json& pod : pods_.ListByLabel(p.ns, api::kLabelJobName, p.name)) {
    if (OwnedBy(pod, p.job.metadata.uid)) p.pods[pod["metadata"].value("name", "")] = pod;
  }
  {
    // Pods this reconciler deleted that the pod informer has not yet seen go: treat them as
    // going, or a pass that runs first would restart (and count) the same failure again.
    std::lock_guard<std::mutex> lock(writes_mu_);
    std::set<std::string>& deleted = deleted_pods_[key];
    std::set<std::string> still_cached;
    for (auto& [name, pod] : p.pods) {
      std::string uid = pod["metadata"].value("uid", "");
      if (!deleted.count(uid)) continue;
      still_cached.insert(uid);
      if (!pod["metadata"].contains("deletionTimestamp")) {
        pod["metadata"]["deletionTimestamp"] = kube::FormatTime(p.now);
      }
    }
    deleted = std::move(still_cached);
  }
  {
    // Counted failures of pods that are gone can never be seen again.
    std::set<std::string> present;
    for (const auto& [name, pod] : p.pods) present.insert(pod["metadata"].value("uid", ""));
    std::vector<std::string>& counted = p.status.counted_failures;
    counted.erase(std::remove_if(counted.begin(), counted.end(),
                                 [&](const std::string& uid) { return !present.count(uid); }),
                  counted.end());
  }
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
    events_.Normal(p.object, "JobResumed", "Resumed TrainingJob job=" + p.JobRef());
  }
  if (p.status.start_time.empty()) p.status.start_time = kube::FormatTime(p.now);
  RETURN_IF_ERROR(EnsureService(p));
  RETURN_IF_ERROR(EnsureJobSecret(p));
  if (options_.gang_scheduler == "volcano") RETURN_IF_ERROR(EnsurePodGroup(p));
  RETURN_IF_ERROR(RestartOnClusterChange(p));
  RETURN_IF_ERROR(SyncTasks(p));
  // Every create this pass needed went through: whatever refused them earlier has cleared.
  if (!IsFinished(p.status)) RemoveCondition(&p.status, kReplicaFailure);
  RETURN_IF_ERROR(HandleRestarts(p));
  CheckSuccess(p);
  CheckDeadline(p);
  if (IsFinished(p.status)) return FinishedJob(p);
  ReadProgress(p);
  RETURN_IF_ERROR(WriteStatus(p));
  return ReconcileResult{p.requeue};
}

absl::StatusOr<ReconcileResult> Reconciler::FinishedJob(Pass& p) {
  if (progress_ != nullptr) progress_->Untrack(p.key);
  ReadFinalSummary(p);
  RETURN_IF_ERROR(Cleanup(p));
  CountActive(p);
  RETURN_IF_ERROR(WriteStatus(p));
  const auto& ttl = p.job.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl) return ReconcileResult{};
  absl::Time finished = kube::ParseTime(p.status.completion_time);
  if (finished == absl::InfinitePast()) finished = p.now;
  absl::Time expiry = finished + absl::Seconds(*ttl);
  if (p.now < expiry) return ReconcileResult{expiry - p.now};
  absl::Status s =
      client_.Delete(kube::Resource::TrainingJobs(), p.ns, p.name,
                     {.propagation_policy = "Background", .precondition_uid = p.job.metadata.uid});
  if (!s.ok() && s.code() != absl::StatusCode::kNotFound) return s;
  log::Info("Deleted TrainingJob after its TTL", {{"job", p.JobRef()}, {"ttl_seconds", *ttl}});
  return ReconcileResult{};
}

absl::Status Reconciler::EnsureService(Pass& p) {
  if (services_.Get(p.key)) return absl::OkStatus();
  json svc = api::BuildService(p.job);
  absl::StatusOr<json> created = client_.Create(kube::Resource::Services(), p.ns, svc);
  if (created.status().code() == absl::StatusCode::kAlreadyExists) return absl::OkStatus();
  if (!created.ok()) {
    return CreateRefused(p, "FailedCreateService", "Service", p.name, created.status());
  }
  events_.Normal(p.object, "CreatedService", "Created Service service=" + p.name);
  return absl::OkStatus();
}

absl::Status Reconciler::EnsureJobSecret(Pass& p) {
  {
    std::lock_guard<std::mutex> lock(writes_mu_);
    auto it = secret_ensured_.find(p.key);
    if (it != secret_ensured_.end() && it->second == p.job.metadata.uid) return absl::OkStatus();
  }
  const std::string name = api::JobSecretName(p.job);
  absl::StatusOr<json> created = client_.Create(kube::Resource::Secrets(), p.ns,
                                                api::BuildJobSecret(p.job, GenerateJobSecret()));
  if (created.ok()) {
    events_.Normal(p.object, "CreatedSecret", "Created Secret secret=" + name);
  } else if (created.status().code() == absl::StatusCode::kAlreadyExists) {
    // Ours from an earlier pass (or operator), or a deleted namesake's that the garbage
    // collector has not removed yet: its pods would lose their secret when it goes.
    ASSIGN_OR_RETURN(json existing, client_.Get(kube::Resource::Secrets(), p.ns, name),
                     "reading the Secret of ", p.JobRef());
    if (!OwnedBy(existing, p.job.metadata.uid)) {
      return absl::UnavailableError(absl::StrCat(
          "Secret ", p.ns, "/", name, " belongs to another object (an earlier job of this name, ",
          "still being deleted?); waiting for it to go before creating the job's pods"));
    }
  } else {
    return CreateRefused(p, "FailedCreateSecret", "Secret", name, created.status());
  }
  std::lock_guard<std::mutex> lock(writes_mu_);
  secret_ensured_[p.key] = p.job.metadata.uid;
  return absl::OkStatus();
}

absl::Status Reconciler::EnsurePodGroup(Pass& p) {
  int total = 0;
  for (const auto& [type, rs] : p.job.spec.replica_specs) total += rs.replicas.value_or(1);
  const auto& sp = p.job.spec.run_policy.scheduling_policy;
  int min_member = sp && sp->min_available ? *sp->min_available : total;
  json group = {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                {"kind", "PodGroup"},
                {"metadata",
                 {{"name", p.name},
                  {"namespace", p.ns},
                  {"labels", api::JobLabels(p.job)},
                  {"ownerReferences", json::array({{{"apiVersion", api::kApiVersion},
                                                    {"kind", api::kKind},
                                                    {"name", p.name},
                                                    {"uid", p.job.metadata.uid},
                                                    {"controller", true},
                                                    {"blockOwnerDeletion", true}}})}}},
                {"spec", {{"minMember", min_member}}}};
  if (sp && !sp->queue.empty()) group["spec"]["queue"] = sp->queue;
  if (sp && !sp->priority_class.empty()) group["spec"]["priorityClassName"] = sp->priority_class;
  absl::StatusOr<json> created = client_.Create(kube::Resource::PodGroups(), p.ns, group);
  if (created.ok() || created.status().code() == absl::StatusCode::kAlreadyExists) {
    return absl::OkStatus();
  }
  return Annotate(created.status(), "creating the PodGroup (is Volcano installed?)");
}

json Reconciler::PodFor(const Pass& p, api::ReplicaType type, int index) const {
  api::ClusterDnsAddresses addresses(options_.cluster_domain);
  json pod = api::BuildPod(p.job, type, index, addresses);
  if (options_.gang_scheduler == "volcano") {
    pod["spec"]["schedulerName"] = "volcano";
    pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = p.name;
  }
  return pod;
}

absl::StatusOr<bool> Reconciler::CheckTemplates(Pass& p) {
  const std::string checked = absl::StrCat(p.job.metadata.uid, "/", p.job.metadata.generation);
  {
    std::lock_guard<std::mutex> lock(writes_mu_);
    auto it = templates_checked_.find(p.key);
    if (it != templates_checked_.end() && it->second == checked) return true;
  }
  for (const auto& [type, spec] : p.job.spec.replica_specs) {
    json pod = PodFor(p, type, 0);
    absl::StatusOr<json> admitted =
        client_.Create(kube::Resource::Pods(), p.ns, pod, {.dry_run = true});
    if (admitted.ok() || admitted.status().code() == absl::StatusCode::kAlreadyExists) continue;
    if (admitted.status().code() == absl::StatusCode::kInvalidArgument) {
      // The API server's own pod validation refused the template: no retry can succeed, so the
      // job fails now, with the server's words, instead of retrying for ever.
      std::string message =
          absl::StrCat("TrainingJob ", p.JobRef(), " has an invalid ", api::Name(type),
                       " pod template: ", ApiMessage(admitted.status()));
      events_.Warning(p.object, "InvalidSpec", message);
      Finish(p, false, "InvalidSpec", message);
      return false;
    }
    return CreateRefused(p, "FailedCreatePod", "Pod", pod["metadata"].value("name", ""),
                         admitted.status());
  }
  std::lock_guard<std::mutex> lock(writes_mu_);
  templates_checked_[p.key] = checked;
  return true;
}

absl::Status Reconciler::CreateRefused(Pass& p, const std::string& reason, const std::string& kind,
                                       const std::string& name, const absl::Status& error) {
  absl::Status annotated = internal::WithContext(error, "creating ", kind, " ", name);
  switch (error.code()) {
    case absl::StatusCode::kInvalidArgument:     // 400/422: core/v1 validation, a webhook
    case absl::StatusCode::kPermissionDenied:    // 403: Pod Security, ResourceQuota, RBAC
    case absl::StatusCode::kFailedPrecondition:  // admission that wants something first
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnauthenticated:
      break;
    default:
      return annotated;  // the API server is unreachable or busy: nothing to report yet
  }
  std::string message = absl::StrCat("Error creating ", kind, " ", name, ": ", ApiMessage(error));
  events_.Warning(p.object, reason, message);
  SetCondition(&p.status, kReplicaFailure, true, reason, message, p.now);
  // What this pass learned is saved even though the pass stops here: Created, the
  // ReplicaFailure condition with the server's reason, counts.
  absl::Status written = WriteStatus(p);
  if (!written.ok()) {
    log::Warn("Could not record a refused create in status",
              {{"job", p.JobRef()}, {"error", written}});
  }
  return annotated;
}

absl::Status Reconciler::CreatePod(Pass& p, api::ReplicaType type, int index) {
  ASSIGN_OR_RETURN(bool valid, CheckTemplates(p));
  if (!valid) return absl::OkStatus();  // the job failed as InvalidSpec
  json pod = PodFor(p, type, index);
  std::string pod_name = pod["metadata"]["name"];
  absl::StatusOr<json> created = client_.Create(kube::Resource::Pods(), p.ns, pod);
  // Deterministic names: a pod created by an earlier pass (or operator) is simply there.
  if (created.status().code() == absl::StatusCode::kAlreadyExists) return absl::OkStatus();
  if (!created.ok()) return CreateRefused(p, "FailedCreatePod", "Pod", pod_name, created.status());
  p.pods[pod_name] = *created;
  events_.Normal(p.object, "CreatedPod", "Created Pod pod=" + pod_name);
  return absl::OkStatus();
}

absl::Status Reconciler::DeletePod(Pass& p, const json& pod, const std::string& why) {
  std::string name = pod["metadata"].value("name", "");
  absl::Status s = client_.Delete(
      kube::Resource::Pods(), p.ns, name,
      {.propagation_policy = "Background", .precondition_uid = pod["metadata"].value("uid", "")});
  if (s.code() == absl::StatusCode::kNotFound) return absl::OkStatus();
  RETURN_IF_ERROR(s, "deleting Pod ", name);
  p.pods[name]["metadata"]["deletionTimestamp"] = kube::FormatTime(p.now);  // once per pass
  {
    std::lock_guard<std::mutex> lock(writes_mu_);
    deleted_pods_[p.key].insert(pod["metadata"].value("uid", ""));
  }
  events_.Normal(p.object, "DeletedPod", absl::StrCat("Deleted Pod pod=", name, " reason=", why));
  return absl::OkStatus();
}

absl::Status Reconciler::Cleanup(Pass& p) {
  api::CleanPodPolicy policy =
      p.job.spec.run_policy.clean_pod_policy.value_or(api::CleanPodPolicy::kRunning);
  if (policy == api::CleanPodPolicy::kNone) return absl::OkStatus();
  std::map<std::string, json> pods = p.pods;
  for (const auto& [name, pod] : pods) {
    std::optional<PodView> v = ViewPod(pod);
    if (!v || v->deleting) continue;
    if (policy == api::CleanPodPolicy::kAll || Active(*v)) {
      RETURN_IF_ERROR(DeletePod(p, pod, "JobFinished"));
    }
  }
  if (p.finishing && options_.gang_scheduler == "volcano") {
    // A finished job needs no gang: its PodGroup would hold the queue's minMember reservation
    // until the job itself is deleted (Kubeflow's operator deletes it here too).
    absl::Status s = client_.Delete(kube::Resource::PodGroups(), p.ns, p.name);
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      return Annotate(s, "deleting the PodGroup of " + p.JobRef());
    }
  }
  // The Service goes whatever the pods' phases: nothing dials a finished job.
  if (services_.Get(p.key)) {
    absl::Status s = client_.Delete(kube::Resource::Services(), p.ns, p.name);
    if (s.ok()) events_.Normal(p.object, "DeletedService", "Deleted Service service=" + p.name);
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) return s;
  }
  return absl::OkStatus();
}

absl::Status Reconciler::Suspend(Pass& p) {
  if (progress_ != nullptr) progress_->Untrack(p.key);
  std::map<std::string, json> pods = p.pods;
  for (const auto& [name, pod] : pods) {
    std::optional<PodView> v = ViewPod(pod);
    if (v && !v->deleting && Active(*v)) RETURN_IF_ERROR(DeletePod(p, pod, "Suspended"));
  }
  if (SetCondition(&p.status, kSuspended, true, "TrainingJobSuspended",
                   absl::StrCat("TrainingJob ", p.JobRef(), " is suspended."), p.now)) {
    events_.Normal(p.object, "JobSuspended", "Suspended TrainingJob job=" + p.JobRef());
  }
  for (auto& [type, rs] : p.status.replica_statuses) rs.active = 0;
  return absl::OkStatus();
}

absl::Status Reconciler::SyncTasks(Pass& p) {
  api::ClusterDnsAddresses addresses(options_.cluster_domain);
  std::map<api::ReplicaType, api::ReplicaStatus> counts;
  bool chief_running = false;
  for (const api::Task& t : api::Tasks(p.job, addresses)) {
    api::ReplicaStatus& rs = counts[t.type];
    std::set<int>& done = p.completed[t.type];
    auto it = p.pods.find(t.name);
    if (it == p.pods.end()) {
      // A replica that already succeeded is never run again, even after its pod was collected.
      if (!done.count(t.index)) RETURN_IF_ERROR(CreatePod(p, t.type, t.index));
      if (IsFinished(p.status)) return absl::OkStatus();  // a template the server refused
      continue;
    }
    std::optional<PodView> v = ViewPod(it->second);
    if (!v || v->deleting) continue;  // a replacement waits until the old pod is gone
    if (v->phase == "Succeeded") {
      done.insert(t.index);
    } else if (v->phase == "Failed") {
      ++rs.failed;
      int code = EffectiveExitCode(*v);
      switch (api::DecideExit(t.restart_policy, code)) {
        case api::ExitAction::kSucceeded:
          done.insert(t.index);
          break;
        case api::ExitAction::kRestart:
          p.failed.push_back(*v);
          break;
        case api::ExitAction::kFail:
          events_.Warning(p.object, "ExitedWithCode",
                          absl::StrCat("Pod exited pod=", t.name, " exit_code=", code,
                                       v->reason.empty() ? "" : " reason=" + v->reason));
          Finish(p, false, "TrainingJobFailed",
                 absl::StrCat("TrainingJob ", p.JobRef(), " has failed because pod ", t.name, " ",
                              api::DescribeExit(code), " and restartPolicy ",
                              api::Name(t.restart_policy), " does not retry it."));
          break;
      }
    } else if (Active(*v)) {
      ++rs.active;
      chief_running |= t.chief && v->phase == "Running";
    }
  }
  for (auto& [type, rs] : counts) {
    api::ReplicaStatus& out = p.status.replica_statuses[type];
    out.active = rs.active;
    out.failed = rs.failed;
    out.succeeded = static_cast<int32_t>(p.completed[type].size());
    out.completed_indexes = api::FormatIndexSet(p.completed[type]);
  }
  if (chief_running && p.failed.empty()) {
    SetCondition(&p.status, kRunning, true, "TrainingJobRunning",
                 absl::StrCat("TrainingJob ", p.JobRef(), " is running."), p.now);
  }
  return absl::OkStatus();
}

absl::Status Reconciler::HandleRestarts(Pass& p) {
  if (p.failed.empty() || IsFinished(p.status)) return absl::OkStatus();
  const api::RunPolicy& rp = p.job.spec.run_policy;
  const bool whole_job = rp.restart_scope == api::RestartScope::kJob;
  // Count first, then delete. The count is written to status before any pod goes: a write that
  // fails leaves nothing done and the next pass decides again, where deleting first lost the
  // count whenever the write failed (the recreated pods looked like a fresh start). The same
  // write records the pods counted (status.countedFailures), so a failure counted by a write
  // whose deletion did not follow (the operator restarted in between) is only deleted again.
  const std::set<std::string> counted(p.status.counted_failures.begin(),
                                      p.status.counted_failures.end());
  std::vector<PodView> fresh;
  for (const PodView& v : p.failed) {
    if (!counted.count(v.uid)) fresh.push_back(v);
  }
  if (!fresh.empty()) {
    const int needed = whole_job ? 1 : static_cast<int>(fresh.size());
    const int limit = rp.backoff_limit.value_or(api::kDefaultBackoffLimit);
    if (TotalRestarts(p.status) + needed > limit) {
      Finish(p, false, "BackoffLimitExceeded",
             absl::StrCat("TrainingJob ", p.JobRef(),
                          " has failed because it has reached the "
                          "specified backoff limit (",
                          limit, " restarts); last failure: pod ", fresh.front().name, " ",
                          api::DescribeExit(EffectiveExitCode(fresh.front()))));
      return absl::OkStatus();
    }
    std::vector<std::string> names;
    for (const PodView& v : fresh) names.push_back(v.name);
    if (whole_job) {
      ++p.status.replica_statuses[fresh.front().type].restarts;
    } else {
      for (const PodView& v : fresh) ++p.status.replica_statuses[v.type].restarts;
    }
    SetCondition(&p.status, kRestarting, true, "TrainingJobRestarting",
                 absl::StrCat("TrainingJob ", p.JobRef(), " is restarting because ", names.size(),
                              " pod(s) failed: ", absl::StrJoin(names, ", "), "."),
                 p.now);
    if (whole_job) {
      // The restart covers every pod of the job: one that fails on its own before it is deleted
      // (an all-reduce peer of the pod that died) is part of this restart, not another one.
      for (const auto& [name, pod] : p.pods) {
        std::string uid = pod["metadata"].value("uid", "");
        if (!uid.empty() && !counted.count(uid)) p.status.counted_failures.push_back(uid);
      }
    } else {
      for (const PodView& v : fresh) p.status.counted_failures.push_back(v.uid);
    }
    RETURN_IF_ERROR(WriteStatus(p));
    for (const PodView& v : fresh) {
      events_.Warning(p.object, "ExitedWithCode",
                      absl::StrCat("Pod exited pod=", v.name, " exit_code=", EffectiveExitCode(v),
                                   v.reason.empty() ? "" : " reason=" + v.reason));
    }
    if (whole_job) {
      events_.Normal(p.object, "RestartedJob",
                     absl::StrCat("Restarted every Pod of the job job=", p.JobRef(),
                                  " failed=", absl::StrJoin(names, ",")));
    } else {
      for (const PodView& v : fresh) {
        events_.Normal(
            p.object, "RestartedPod",
            absl::StrCat("Restarted Pod pod=", v.name, " exit_code=", EffectiveExitCode(v),
                         " restarts=", p.status.replica_statuses[v.type].restarts));
      }
    }
    if (metrics_) metrics_->JobRestarted(p.ns);
  }
  if (whole_job) {
    std::map<std::string, json> pods = p.pods;
    for (const auto& [name, pod] : pods) {
      std::optional<PodView> v = ViewPod(pod);
      if (v && !v->deleting) RETURN_IF_ERROR(DeletePod(p, pod, "RestartScopeJob"));
    }
  } else {
    for (const PodView& v : p.failed) RETURN_IF_ERROR(DeletePod(p, p.pods[v.name], "Restart"));
  }
  return absl::OkStatus();
}

void Reconciler::CheckSuccess(Pass& p) {
  if (IsFinished(p.status)) return;
  const auto& specs = p.job.spec.replica_specs;
  bool has_chief = specs.count(api::ReplicaType::kChief) > 0;
  bool done;
  if (p.job.spec.success_policy == api::SuccessPolicy::kAllWorkers) {
    done = true;
    for (api::ReplicaType t : {api::ReplicaType::kChief, api::ReplicaType::kWorker}) {
      auto it = specs.find(t);
      if (it != specs.end())
        done &= static_cast<int>(p.completed[t].size()) >= it->second.replicas.value_or(1);
    }
  } else {
    done =
        p.completed[has_chief ? api::ReplicaType::kChief : api::ReplicaType::kWorker].count(0) > 0;
  }
  if (done) {
    Finish(p, true, "TrainingJobSucceeded",
           absl::StrCat("TrainingJob ", p.JobRef(), " successfully completed."));
  }
}

void Reconciler::CheckDeadline(Pass& p) {
  const auto& deadline = p.job.spec.run_policy.active_deadline_seconds;
  if (!deadline || IsFinished(p.status)) return;
  absl::Time start = kube::ParseTime(p.status.start_time);
  if (start == absl::InfinitePast()) return;
  absl::Time end = start + absl::Seconds(*deadline);
  if (p.now >= end) {
    Finish(p, false, "DeadlineExceeded",
           absl::StrCat("TrainingJob ", p.JobRef(),
                        " was active longer than its "
                        "activeDeadlineSeconds (",
                        *deadline, ")."));
  } else {
    p.Requeue(end - p.now);  // fires by itself, without another event
  }
}

void Reconciler::Finish(Pass& p, bool succeeded, const std::string& reason,
                        const std::string& message) {
  if (!SetCondition(&p.status, succeeded ? kSucceeded : kFailed, true, reason, message, p.now)) {
    return;
  }
  p.finishing = true;
  p.status.completion_time = kube::FormatTime(p.now);
  if (succeeded) {
    events_.Normal(p.object, "JobSucceeded", "TrainingJob succeeded job=" + p.JobRef());
    if (metrics_) metrics_->JobSucceeded(p.ns);
  } else {
    events_.Warning(
        p.object, "JobFailed",
        absl::StrCat("TrainingJob failed job=", p.JobRef(), " reason=", reason, ": ", message));
    if (metrics_) metrics_->JobFailed(p.ns);
  }
  log::Info(succeeded ? "TrainingJob succeeded" : "TrainingJob failed",
            {{"job", p.JobRef()}, {"reason", reason}, {"message", message}});
}

std::optional<std::pair<api::Task, PodView>> Reconciler::ChiefPod(const Pass& p) const {
  api::ClusterDnsAddresses addresses(options_.cluster_domain);
  for (const api::Task& t : api::Tasks(p.job, addresses)) {
    if (!t.chief) continue;
    auto it = p.pods.find(t.name);
    if (it == p.pods.end()) return std::nullopt;
    std::optional<PodView> v = ViewPod(it->second);
    if (!v) return std::nullopt;
    return std::make_pair(t, *v);
  }
  return std::nullopt;
}

void Reconciler::ReadProgress(Pass& p) {
  if (progress_ == nullptr) return;
  std::optional<std::pair<api::Task, PodView>> chief = ChiefPod(p);
  if (!chief || chief->second.phase != "Running" || chief->second.pod_ip.empty()) {
    progress_->Untrack(p.key);
    return;
  }
  const auto& [t, v] = *chief;
  int port = api::ContainerPort(p.job, t.type, api::kMetricsPortName, api::kDefaultMetricsPort);
  progress_->Track(p.key, v.pod_ip, port);
  std::optional<api::Progress> latest = progress_->Latest(p.key);
  if (!latest) return;
  std::lock_guard<std::mutex> lock(progress_mu_);
  auto written = progress_written_.find(p.key);
  absl::Time written_at =
      written == progress_written_.end() ? absl::InfinitePast() : written->second;
  if (!progress_->WorthWriting(p.status.progress, written_at, *latest, p.now)) return;
  p.status.progress = *latest;
  progress_written_[p.key] = p.now;
}

absl::Status Reconciler::RestartOnClusterChange(Pass& p) {
  api::ClusterDnsAddresses addresses(options_.cluster_domain);
  std::vector<api::Task> tasks = api::Tasks(p.job, addresses);
  if (tasks.empty()) return absl::OkStatus();
  std::map<std::string, std::vector<std::string>> wanted =
      api::TfConfigFor(p.job, addresses, tasks.front().type, tasks.front().index).cluster;
  std::optional<std::map<std::string, std::vector<std::string>>> stale;
  for (const auto& [name, pod] : p.pods) {
    std::optional<PodView> v = ViewPod(pod);
    if (!v || v->deleting) continue;
    std::optional<std::map<std::string, std::vector<std::string>>> cluster = PodCluster(pod);
    if (cluster && *cluster != wanted) {
      stale = std::move(cluster);
      break;
    }
  }
  if (!stale) return absl::OkStatus();
  // Until training is elastic, every task must see one cluster spec: a pod with the old one
  // would wait for peers that no longer exist or never learn of new ones. Start the whole job
  // again on the new spec; it resumes from the chief's checkpoint. The user asked for this, so
  // it is no failure and does not count against backoffLimit.
  std::map<std::string, json> pods = p.pods;
  for (const auto& [name, pod] : pods) {
    std::optional<PodView> v = ViewPod(pod);
    if (v && !v->deleting) RETURN_IF_ERROR(DeletePod(p, pod, "ClusterSpecChanged"));
  }
  for (auto& [type, done] : p.completed) done.clear();
  std::string message = absl::StrCat("Restarted every Pod for a new cluster spec job=", p.JobRef(),
                                     " old=", Shape(*stale), " new=", Shape(wanted));
  events_.Normal(p.object, "ClusterSpecChanged", message);
  log::Info("Cluster spec changed; restarting every pod",
            {{"job", p.JobRef()}, {"old", Shape(*stale)}, {"new", Shape(wanted)}});
  if (metrics_) metrics_->JobRestarted(p.ns);
  SetCondition(&p.status, kRestarting, true, "ClusterSpecChanged",
               absl::StrCat("TrainingJob ", p.JobRef(), " is restarting because its cluster spec ",
                            "changed from ", Shape(*stale), " to ", Shape(wanted), "."),
               p.now);
  return absl::OkStatus();
}

void Reconciler::ReadFinalSummary(Pass& p) {
  std::optional<std::pair<api::Task, PodView>> chief = ChiefPod(p);
  if (!chief) return;
  const auto& [t, v] = *chief;
  absl::StatusOr<api::Progress> summary = ParseFinalSummary(v.termination_message);
  if (!summary.ok() && p.finishing && v.phase == "Succeeded") {
    // No termination message (a kubelet or image that does not write one): the summary is the
    // chief's last log line. Read once, when the job ends, before cleanup removes pods.
    absl::StatusOr<std::string> log =
        client_.GetLog(p.ns, t.name, api::kDefaultContainerName, kSummaryLogLines);
    if (log.ok()) {
      summary = ParseFinalSummary(*log);
    } else {
      log::Debug("Could not read the chief's log", {{"pod", t.name}, {"error", log.status()}});
    }
  }
  if (summary.ok()) p.status.progress = *summary;
}

void Reconciler::CountActive(Pass& p) {
  for (auto& [type, rs] : p.status.replica_statuses) rs.active = 0;
  for (const auto& [name, pod] : p.pods) {
    std::optional<PodView> v = ViewPod(pod);
    if (v && Active(*v)) ++p.status.replica_statuses[v->type].active;
  }
}

json Reconciler::NewestJob(const std::string& key, json cached) {
  std::lock_guard<std::mutex> lock(writes_mu_);
  auto it = own_writes_.find(key);
  if (it == own_writes_.end()) return cached;
  // resourceVersions are opaque: only "is one we know predates our write" can be asked.
  if (it->second.older_versions.count(cached["metadata"].value("resourceVersion", ""))) {
    return it->second.object;
  }
  own_writes_.erase(it);  // the cache has caught up with our write (or moved past it)
  return cached;
}

absl::Status Reconciler::WriteStatus(Pass& p) {
  json status = api::ToJson(p.status);
  if (status == p.original_status) return absl::OkStatus();
  p.status.last_reconcile_time = kube::FormatTime(p.now);
  json object = p.object;
  object["status"] = api::ToJson(p.status);
  // PUT with the cached resourceVersion: a stale cache gets 409 and the job is retried.
  absl::StatusOr<json> written = client_.UpdateStatus(kube::Resource::TrainingJobs(), p.ns, object);
  RETURN_IF_ERROR(written.status(), "updating the status of ", p.JobRef());
  kube::StripForCache(*written);  // held until the cache catches up: no bigger than its copy
  {
    // The PUT was conditional on p.object's version, so every version seen so far is older.
    std::lock_guard<std::mutex> lock(writes_mu_);
    OwnWrite& w = own_writes_[p.key];
    w.older_versions.insert(p.cached_version);
    w.older_versions.insert(p.object["metadata"].value("resourceVersion", ""));
    w.object = *written;
  }
  p.object = *written;
  p.original_status = api::ToJson(p.status);
  return absl::OkStatus();
}

}  // namespace kubetrain::controller
