// The objects a reconcile pass writes for its job: Service, Secret, PodGroup and pods (with the
// dry-run check of their templates and the report of a refused create), pod deletions, cleanup
// and suspension. The decisions that call for them are in reconciler.cc.
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_secret_env.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/api/render.h"
#include "operator/controller/conditions.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {
namespace {

// The API server's words in an error from kube::Client ("POST /api/v1/...: <message> (Reason,
// HTTP 403)"), without the request line.
std::string ApiMessage(const absl::Status& error) {
  absl::string_view m = error.message();
  size_t colon = m.find(": ");
  if (absl::StartsWith(m, "POST ") && colon != absl::string_view::npos) m.remove_prefix(colon + 2);
  return std::string(m);
}

}  // namespace

absl::Status Reconciler::EnsureService(Pass& p) {
  if (p.tfjob) return EnsureTfJobServices(p);
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

absl::Status Reconciler::EnsureTfJobServices(Pass& p) {
  for (const json& svc : api::TfJobServices(p.object)) {
    const std::string name = svc["metadata"]["name"];
    if (services_.Get(p.ns + "/" + name)) continue;
    absl::StatusOr<json> created = client_.Create(kube::Resource::Services(), p.ns, svc);
    if (created.status().code() == absl::StatusCode::kAlreadyExists) continue;
    if (!created.ok()) {
      return CreateRefused(p, "FailedCreateService", "Service", name, created.status());
    }
    events_.Normal(p.object, "CreatedService", "Created Service service=" + name);
  }
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
  events_.Normal(p.object, "CreatedPod", "Created Pod pod=" + pod_name);
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
  events_.Normal(p.object, "DeletedPod", absl::StrCat("Deleted Pod pod=", name, " reason=", why));
  return absl::OkStatus();
}

absl::Status Reconciler::Cleanup(Pass& p) {
  api::CleanPodPolicy policy =
      p.job.spec.run_policy.clean_pod_policy.value_or(api::CleanPodPolicy::kRunning);
  if (policy == api::CleanPodPolicy::kNone) return absl::OkStatus();
  std::map<std::string, json> pods = p.pods;
  for (const auto& [name, pod] : pods) {
    std::optional<PodView> v = p.View(pod);
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
  // The Services go whatever the pods' phases: nothing dials a finished job.
  if (p.tfjob) {
    for (const json& svc : services_.ListByLabel(p.ns, api::kKubeflowLabelJobName, p.name)) {
      if (!OwnedBy(svc, p.job.metadata.uid)) continue;
      const std::string name = svc["metadata"].value("name", "");
      absl::Status s = client_.Delete(kube::Resource::Services(), p.ns, name);
      if (s.ok()) events_.Normal(p.object, "DeletedService", "Deleted Service service=" + name);
      if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
        return DeleteRefused(p, "FailedDeleteService", "Service", name, s);
      }
    }
  } else if (services_.Get(p.key)) {
    absl::Status s = client_.Delete(kube::Resource::Services(), p.ns, p.name);
    if (s.ok()) events_.Normal(p.object, "DeletedService", "Deleted Service service=" + p.name);
    if (!s.ok() && s.code() != absl::StatusCode::kNotFound) {
      return DeleteRefused(p, "FailedDeleteService", "Service", p.name, s);
    }
  }
  return absl::OkStatus();
}

absl::Status Reconciler::Suspend(Pass& p) {
  if (progress_ != nullptr) progress_->Untrack(p.key);
  std::map<std::string, json> pods = p.pods;
  for (const auto& [name, pod] : pods) {
    std::optional<PodView> v = p.View(pod);
    if (v && !v->deleting && Active(*v)) RETURN_IF_ERROR(DeletePod(p, pod, "Suspended"));
  }
  if (SetCondition(&p.status, kSuspended, true, "TrainingJobSuspended",
                   absl::StrCat("TrainingJob ", p.JobRef(), " is suspended."), p.now)) {
    events_.Normal(p.object, "JobSuspended", p.Words("Suspended TrainingJob job=" + p.JobRef()));
  }
  for (auto& [type, rs] : p.status.replica_statuses) rs.active = 0;
  return absl::OkStatus();
}

}  // namespace kubetrain::controller
