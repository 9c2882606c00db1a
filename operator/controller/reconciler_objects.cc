// The objects a reconcile pass writes for its job: Service, Secret, PodGroup and pods (with the
// dry-run check of their templates and the report of a refused create), pod deletions, cleanup
// and suspension. The decisions that call for them are in reconciler.cc.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_secret_env.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/api/render.h"
#include "operator/controller/conditions.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {
namespace {

// Why a finished job's pods and Services are deleted (DeletePod's `why`).
constexpr char kJobFinished[] = "JobFinished";

// The API server's words in an error from kube::Client ("POST /api/v1/...: <message> (Reason,
// HTTP 403)"), without the request line.
std::string ApiMessage(const absl::Status& error) {
  absl::string_view m = error.message();
  size_t colon = m.find(": ");
  if (absl::StartsWith(m, "POST ") && colon != absl::string_view::npos) m.remove_prefix(colon + 2);
  return std::string(m);
}

// Names listed per kind in an event or condition message; the rest are counted. A job of a
// thousand Workers would otherwise carry every pod name in each status write.
constexpr size_t kListedNames = 32;

// "secret=x service=y pods=a,b": objects of a pass by kind, in the order first met.
std::string ObjectList(const std::vector<std::pair<std::string, std::string>>& objects) {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_kind;
  for (const auto& object : objects) {
    auto it = std::find_if(by_kind.begin(), by_kind.end(),
                           [&](const auto& k) { return k.first == object.first; });
    if (it == by_kind.end()) it = by_kind.insert(by_kind.end(), {object.first, {}});
    it->second.push_back(object.second);
  }
  std::vector<std::string> parts;
  for (const auto& [kind, names] : by_kind) {
    std::string part = absl::StrCat(
        absl::AsciiStrToLower(kind), names.size() > 1 ? "s" : "", "=",
        absl::StrJoin(names.begin(), names.begin() + std::min(names.size(), kListedNames), ","));
    if (names.size() > kListedNames) absl::StrAppend(&part, ",… (", names.size(), " in all)");
    parts.push_back(std::move(part));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace

void Reconciler::NameCreatedObjects(Pass& p) const {
  if (!p.creating || p.created.empty()) return;
  for (api::Condition& c : p.status.conditions) {
    if (c.type != kCreated) continue;
    c.message = absl::StrCat("TrainingJob ", p.JobRef(), " is created: ", ObjectList(p.created));
  }
}

void Reconciler::RecordPassEvents(Pass& p, bool succeeded) {
  if (p.object.is_null()) return;
  // A job's first objects are named by its Created condition, written with them: the event
  // would say it again, one more write per job (docs/architecture.md §10, "Events").
  if (p.created.size() > p.created_named) {
    std::vector<std::pair<std::string, std::string>> unnamed(
        p.created.begin() + static_cast<ptrdiff_t>(p.created_named), p.created.end());
    events_.Normal(p.object, "Created", "Created " + ObjectList(unnamed));
  }
  for (const auto& [why, objects] : p.deleted) {
    // A finished job's cleanup was announced by its JobSucceeded or JobFailed event.
    if (why == kJobFinished) continue;
    events_.Normal(p.object, "Deleted",
                   absl::StrCat("Deleted ", ObjectList(objects), " reason=", why));
  }
  // A pass that failed wrote no outcome; the retry that writes it brings its event.
  if (!succeeded || p.job_events.empty()) return;
  // The outcome's event waits for the job's next pass (requeued at once, behind the outcomes of
  // other jobs that finished meanwhile): the status write is all a finishing pass spends
  // (docs/architecture.md §10). An operator that stops in between loses the event, not the
  // outcome.
  std::lock_guard<std::mutex> lock(writes_mu_);
  DeferredEvents& deferred = deferred_events_[p.key];
  deferred.object = p.object;
  for (JobEvent& e : p.job_events) deferred.events.push_back(std::move(e));
}

void Reconciler::RecordDeferredEvents(const std::string& key) {
  DeferredEvents deferred;
  {
    std::lock_guard<std::mutex> lock(writes_mu_);
    auto it = deferred_events_.find(key);
    if (it == deferred_events_.end()) return;
    deferred = std::move(it->second);
    deferred_events_.erase(it);
  }
  for (const JobEvent& e : deferred.events) {
    if (e.warning) {
      events_.Warning(deferred.object, e.reason, e.message);
    } else {
      events_.Normal(deferred.object, e.reason, e.message);
    }
  }
}

absl::Status Reconciler::EnsureService(Pass& p) {
  if (p.tfjob) return EnsureTfJobServices(p);
  if (services_.Get(p.key)) return absl::OkStatus();
  json svc = api::BuildService(p.job);
  absl::StatusOr<json> created = client_.Create(kube::Resource::Services(), p.ns, svc);
  if (created.status().code() == absl::StatusCode::kAlreadyExists) return absl::OkStatus();
  if (!created.ok()) {
    return CreateRefused(p, "FailedCreateService", "Service", p.name, created.status());
  }
  p.created.emplace_back("Service", p.name);
  return absl::OkStatus();
}

absl::Status Reconciler::EnsureTfJobServices(Pass& p) {
  for (const json& svc : api::TfJobServices(p.object)) {
    const std::string name = svc["metadata"]["name"];
    if (services_.Get(p.ns + "/" + name)) continue;
    absl::StatusOr<json> created = client_.Create(kube::Resource::Services(), p.ns, svc);
    if (created.status().code() == absl::StatusCode::kAlreadyExists) continue;
    if (!created.ok()) {
      return CreateRefused(p, "FailedCreateService", "Service", name, created.status());
    }
    p.created.emplace_back("Service", name);
  }
  return absl::OkStatus();
}

std::optional<std::string> Reconciler::LiveNamesake(const Pass& p, const json& object) const {
  for (const json& ref : object["metadata"].value("ownerReferences", json::array())) {
    if (!ref.value("controller", false)) continue;
    const std::string kind = ref.value("kind", "");
    const kube::ObjectCache* cache = kind == "TFJob"      ? tfjobs_
                                     : kind == api::kKind ? &jobs_
                                                          : nullptr;
    if (cache == nullptr) continue;
    std::optional<json> owner = cache->Get(p.ns + "/" + ref.value("name", ""));
    if (!owner || (*owner)["metadata"].value("uid", "") != ref.value("uid", "") ||
        (*owner)["metadata"].contains("deletionTimestamp")) {
      continue;
    }
    // kubectl's words for it: a TFJob's messages say TFJob for TrainingJob (api::TfJobStatus).
    return absl::StrCat(kind == "TFJob" ? "tfjob.kubeflow.org/" : "trainingjob.kubetrain.dev/",
                        ref.value("name", ""), " in namespace ", p.ns);
  }
  return std::nullopt;
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
    p.created.emplace_back("Secret", name);
  } else if (created.status().code() == absl::StatusCode::kAlreadyExists) {
    // Ours from an earlier pass (or operator), or a deleted namesake's that the garbage
    // collector has not removed yet: its pods would lose their secret when it goes.
    ASSIGN_OR_RETURN(json existing, client_.Get(kube::Resource::Secrets(), p.ns, name),
                     "reading the Secret of ", p.JobRef());
    if (!OwnedBy(existing, p.job.metadata.uid)) {
      if (std::optional<std::string> other = LiveNamesake(p, existing)) {
        // A TrainingJob and a TFJob of one name: their Secrets and pods share names, so only
        // the first can run. The second says so on itself, and is retried in case one goes.
        std::string message =
            absl::StrCat(p.Words("TrainingJob "), p.JobRef(), " cannot start: ", *other,
                         " has the same name and owns its Secret ", p.ns, "/", name,
                         " and pod names; rename or delete one of them");
        events_.Warning(p.object, "NameConflict", message);
        SetCondition(&p.status, kReplicaFailure, true, "NameConflict", message, p.now);
        RETURN_IF_ERROR(WriteStatus(p));
        return absl::UnavailableError(message);
      }
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
  // An elastic job's gang is the job at minReplicas Workers: it must stay schedulable however
  // far it is scaled down.
  int total = 0;
  for (const auto& [type, rs] : p.job.spec.replica_specs) {
    const auto& elastic = p.job.spec.elastic;
    total += type == api::ReplicaType::kWorker && elastic && elastic->min_replicas
                 ? *elastic->min_replicas
                 : rs.replicas.value_or(1);
  }
  const auto& sp = p.job.spec.run_policy.scheduling_policy;
  int min_member = sp && sp->min_available ? *sp->min_available : total;
  json group = {{"apiVersion", "scheduling.volcano.sh/v1beta1"},
                {"kind", "PodGroup"},
                {"metadata",
                 {{"name", p.name},
                  {"namespace", p.ns},
                  {"labels", api::JobLabels(p.job)},
                  {"ownerReferences", json::array({{{"apiVersion", p.job.api_version},
                                                    {"kind", p.job.kind},
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
  json pod = p.tfjob ? api::TfJobPod(p.object, type, index, options_.cluster_domain)
                     : api::BuildPod(p.job, type, index,
                                     api::ClusterDnsAddresses(options_.cluster_domain));
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
      events_.Warning(p.object, "InvalidSpec", p.Words(message));
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
  p.created.emplace_back("Pod", pod_name);
  return absl::OkStatus();
}

absl::Status Reconciler::DeleteRefused(Pass& p, const std::string& reason, const std::string& kind,
                                       const std::string& name, const absl::Status& error) {
  if (error.code() == absl::StatusCode::kPermissionDenied ||
      error.code() == absl::StatusCode::kUnauthenticated) {
    // The job's events say so, not only the log; a grant fixes it without a restart.
    events_.Warning(p.object, reason,
                    absl::StrCat("Error deleting ", kind, " ", name, ": ", ApiMessage(error)));
  }
  return internal::WithContext(error, "deleting ", kind, " ", name);
}

absl::Status Reconciler::DeletePod(Pass& p, const json& pod, const std::string& why) {
  std::string name = pod["metadata"].value("name", "");
  absl::Status s = client_.Delete(
      kube::Resource::Pods(), p.ns, name,
      {.propagation_policy = "Background", .precondition_uid = pod["metadata"].value("uid", "")});
  if (s.code() == absl::StatusCode::kNotFound) return absl::OkStatus();
  if (!s.ok()) return DeleteRefused(p, "FailedDeletePod", "Pod", name, s);
  std::string uid = pod["metadata"].value("uid", "");
  p.going.insert(uid);  // once per pass
  expectations_.PodDeleted(p.key, uid);
  p.deleted[why].emplace_back("Pod", name);
  {
    // A Worker this reconciler deletes is never a lost one (ScaleWorkers), even if the pass
    // fails before it remembers the live Workers again.
    std::lock_guard<std::mutex> lock(writes_mu_);
    if (auto live = live_workers_.find(p.key); live != live_workers_.end()) {
      std::erase_if(live->second, [&](const auto& entry) { return entry.second == uid; });
    }
  }
  return absl::OkStatus();
}

absl::Status Reconciler::DeletePods(Pass& p, const std::vector<json>& pods, bool only_active,
                                    const std::string& why) {
  bool collection = pods.size() > 1;
  if (collection) {
    std::lock_guard<std::mutex> lock(writes_mu_);
    collection = !collection_deletes_refused_.count(p.ns);
  }
  if (collection) {
    // One request for the lot (cleanup of a 100-pod job is one write, not 100): the job's pods
    // by its labels, the active ones by phase. The server answers with what it deleted.
    kube::ListOptions selectors;
    selectors.label_selector =
        absl::StrCat(p.tfjob ? api::kKubeflowLabelJobName : api::kLabelJobName, "=", p.name, ",",
                     api::kLabelManagedBy, "=", api::kManagedByValue);
    if (only_active) selectors.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
    absl::StatusOr<std::vector<json>> deleted =
        client_.DeleteCollection(kube::Resource::Pods(), p.ns, selectors);
    if (deleted.ok()) {
      // What the server deleted, not what the cache showed: a pod that ended meanwhile stays.
      std::set<std::string> named;
      for (const json& pod : *deleted) {
        const json& meta = pod.value("metadata", json::object());
        std::string uid = meta.value("uid", "");
        if (!OwnedBy(pod, p.job.metadata.uid) || !named.insert(uid).second) continue;
        p.going.insert(uid);
        expectations_.PodDeleted(p.key, uid);
        p.deleted[why].emplace_back("Pod", meta.value("name", ""));
      }
      return absl::OkStatus();
    }
    if (deleted.status().code() != absl::StatusCode::kPermissionDenied &&
        deleted.status().code() != absl::StatusCode::kUnimplemented) {
      return internal::WithContext(deleted.status(), "deleting the pods of ", p.JobRef());
    }
    // A Role from before the operator used deletecollection, or a server without it: pod by
    // pod, as the rules that do grant delete allow; not asked again in this namespace.
    log::Info("Deleting pods one by one: deletecollection was refused",
              {{"namespace", p.ns}, {"error", deleted.status()}});
    std::lock_guard<std::mutex> lock(writes_mu_);
    collection_deletes_refused_.insert(p.ns);
  }
  for (const json& pod : pods) RETURN_IF_ERROR(DeletePod(p, pod, why));
  return absl::OkStatus();
}

std::vector<json> Reconciler::PodsToClean(const Pass& p) const {
  api::CleanPodPolicy policy = p.CleanPodPolicy();
  std::vector<json> pods;
  if (policy == api::CleanPodPolicy::kNone) return pods;
  for (const auto& [name, pod] : p.pods) {
    std::optional<PodView> v = p.View(pod);
    if (!v || v->deleting) continue;
    if (policy == api::CleanPodPolicy::kAll || Active(*v)) pods.push_back(pod);
  }
  return pods;
}

std::string Reconciler::CleanupWords(const Pass& p) const {
  api::CleanPodPolicy policy = p.CleanPodPolicy();
  if (policy == api::CleanPodPolicy::kNone) return "";
  size_t pods = PodsToClean(p).size();
  return absl::StrCat("; cleanPodPolicy ", api::Name(policy), ": deleting ",
                      pods == 1 ? "1 pod" : absl::StrCat(pods, " pods"), " and the Service",
                      p.tfjob ? "s" : "");
}

absl::Status Reconciler::Cleanup(Pass& p) {
  api::CleanPodPolicy policy = p.CleanPodPolicy();
  if (policy == api::CleanPodPolicy::kNone) return absl::OkStatus();
  std::vector<json> pods = PodsToClean(p);
  if (!pods.empty()) {
    RETURN_IF_ERROR(DeletePods(p, pods, policy == api::CleanPodPolicy::kRunning, kJobFinished));
  }
  if (options_.gang_scheduler == "volcano") {
    // A finished job needs no gang: its PodGroup would hold the queue's minMember reservation
    // until the job itself is deleted (Kubeflow's operator deletes it here too). Once per job
    // (and once more after an operator restart, answered 404).
    bool done;
    {
      std::lock_guard<std::mutex> lock(writes_mu_);
      auto it = podgroup_deleted_.find(p.key);
      done = it != podgroup_deleted_.end() && it->second == p.job.metadata.uid;
    }
    if (!done) {
      absl::Status s = client_.Delete(kube::Resource::PodGroups(), p.ns, p.name);
      if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
        return Annotate(s, "deleting the PodGroup of " + p.JobRef());
      }
      std::lock_guard<std::mutex> lock(writes_mu_);
      podgroup_deleted_[p.key] = p.job.metadata.uid;
    }
  }
  // The Services go whatever the pods' phases: nothing dials a finished job. Those deleted
  // here that the cache still shows are going, not deleted again.
  std::vector<json> services;
  if (p.tfjob) {
    for (json& svc : services_.ListByLabel(p.ns, api::kKubeflowLabelJobName, p.name)) {
      if (OwnedBy(svc, p.job.metadata.uid)) services.push_back(std::move(svc));
    }
  } else if (std::optional<json> svc = services_.Get(p.key)) {
    services.push_back(*std::move(svc));
  }
  std::set<std::string> present;
  for (const json& svc : services) present.insert(svc["metadata"].value("uid", ""));
  const std::set<std::string> going = expectations_.ServicesGoing(p.key, present);
  for (const json& svc : services) {
    const std::string name = svc["metadata"].value("name", "");
    const std::string uid = svc["metadata"].value("uid", "");
    if (going.count(uid)) continue;
    absl::Status s = client_.Delete(kube::Resource::Services(), p.ns, name);
    if (s.ok()) {
      p.deleted[kJobFinished].emplace_back("Service", name);
      expectations_.ServiceDeleted(p.key, uid);
    }
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      return DeleteRefused(p, "FailedDeleteService", "Service", name, s);
    }
  }
  return absl::OkStatus();
}

absl::Status Reconciler::Suspend(Pass& p) {
  if (progress_ != nullptr) progress_->Untrack(p.key);
  ForgetLiveWorkers(p.key);  // its Workers go by this reconciler's hand: none is lost
  std::vector<json> active;
  for (const auto& [name, pod] : p.pods) {
    std::optional<PodView> v = p.View(pod);
    if (v && !v->deleting && Active(*v)) active.push_back(pod);
  }
  if (!active.empty()) RETURN_IF_ERROR(DeletePods(p, active, /*only_active=*/true, "Suspended"));
  if (SetCondition(&p.status, kSuspended, true, "TrainingJobSuspended",
                   absl::StrCat("TrainingJob ", p.JobRef(), " is suspended."), p.now)) {
    events_.Normal(p.object, "JobSuspended", p.Words("Suspended TrainingJob job=" + p.JobRef()));
  }
  // Its pods still count while they terminate: Kueue releases the quota at 0 (Occupying).
  std::map<api::ReplicaType, int32_t> occupying = p.Occupying();
  for (auto& [type, rs] : p.status.replica_statuses) rs.active = occupying[type];
  if (p.status.elastic) p.status.elastic->live_workers = 0;
  return absl::OkStatus();
}

}  // namespace kubetrain::controller
