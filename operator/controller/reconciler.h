// Reconciles one TrainingJob: level-triggered and idempotent. It reads the job, its pods and its
// Service from the informers' caches, compares them with what the job's spec asks for (the pure
// builders of operator/api), creates and deletes what differs, applies restart policies,
// deadlines, TTL, suspend and the success policy, and writes status through /status only.
//
// Stateless between calls except for small memories of what it wrote (see the members). The
// chief's progress comes from a ProgressPoller, never from a request made while reconciling.
// Thread-safe; the controller never reconciles one job from two threads at once.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/api/field_errors.h"
#include "operator/api/outcome.h"
#include "operator/api/render.h"
#include "operator/api/types.h"
#include "operator/controller/events.h"
#include "operator/controller/expectations.h"
#include "operator/controller/metrics.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/progress.h"
#include "operator/kube/client.h"
#include "operator/kube/informer.h"

namespace kubetrain::controller {

// Work-queue keys: "namespace/name" for a TrainingJob; this prefix before it for a Kubeflow
// TFJob (operator/api/tfjob.h), reconciled as the TrainingJob it converts to
// (docs/decisions/0007-kubeflow-tfjob.md).
inline constexpr char kTfJobKeyPrefix[] = "TFJob:";

struct ReconcilerOptions {
  std::string cluster_domain;  // appended to .svc in TF_CONFIG addresses when set
  std::string gang_scheduler;  // "" or "volcano"
  // The chief's progress (ProgressPoller): read every progress_interval, written to status at
  // most every progress_write_interval, or at once on a new epoch.
  absl::Duration progress_interval = absl::Seconds(5);
  absl::Duration progress_timeout = absl::Seconds(2);
  absl::Duration progress_write_interval = absl::Seconds(30);
  const Clock* clock = nullptr;  // null: the real clock
  // The pause between a counted failure and its pod's replacement (docs/architecture.md §10).
  api::RestartBackoff restart_backoff = api::kOperatorRestartBackoff;
};

// How long past its deletionTimestamp (the end of its grace period) a job's pod may stay
// Terminating before the operator force-deletes it: its node stopped answering (stuck_pods.cc).
inline constexpr absl::Duration kStuckPodMargin = absl::Seconds(10);

struct ReconcileResult {
  std::optional<absl::Duration> requeue_after;
  // Run again once no other job waits for a pass (kube::WorkQueue::AddLater): a finished job's
  // cleanup yields to the outcomes of other jobs (docs/architecture.md §10).
  bool requeue_later = false;
};

class Reconciler {
 public:
  // The caches are the controller's informers (or fakes in unit tests); `progress` may be null
  // (no progress in status); `tfjobs` null when the operator serves no TFJobs.
  Reconciler(kube::ApiClient& client, const kube::ObjectCache& jobs, const kube::ObjectCache& pods,
             const kube::ObjectCache& services, EventRecorder& events, OperatorMetrics* metrics,
             ProgressPoller* progress, ReconcilerOptions options,
             const kube::ObjectCache* tfjobs = nullptr);

  // `key` is "namespace/name", or kTfJobKeyPrefix and that for a TFJob. Errors are worth a
  // rate-limited retry (409 conflicts included).
  absl::StatusOr<ReconcileResult> Reconcile(const std::string& key);

 private:
  struct Pass;
  struct JobEvent {  // JobSucceeded, JobFailed
    bool warning = false;
    std::string reason;
    std::string message;
  };

  // The chief's task and pod as the cache shows them; none while the pod does not exist.
  std::optional<std::pair<api::Task, PodView>> ChiefPod(const Pass& p) const;
  absl::Status EnsureService(Pass& p);
  // A TFJob's Services: Kubeflow's headless Service per replica (api::TfJobServices).
  absl::Status EnsureTfJobServices(Pass& p);
  // The job's shared-secret Secret (api::BuildJobSecret), before any of its pods: the pods read
  // KUBETRAIN_JOB_SECRET from it. docs/decisions/0005-shared-secret-per-job.md.
  absl::Status EnsureJobSecret(Pass& p);
  // "tfjob.kubeflow.org/x in namespace ns" when `object`'s controller is a job of the other kind
  // (or another job) that exists and is not being deleted: a name clash, not a namesake on its way
  // out.
  std::optional<std::string> LiveNamesake(const Pass& p, const nlohmann::json& object) const;
  absl::Status EnsurePodGroup(Pass& p);
  // spec.checkpoint.volumeClaimTemplate: the job's PersistentVolumeClaim <job>-checkpoint,
  // before its pods (checkpoint_claim.cc). One that exists is mounted as it is (a Retain claim of
  // an earlier job of this name resumes its checkpoints); one owned by another job is waited on.
  absl::Status EnsureCheckpointClaim(Pass& p);
  // A Warning event CheckpointsNotDurable when the chief's checkpoints live in its own pod.
  void WarnIfCheckpointsNotDurable(Pass& p);
  nlohmann::json PodFor(const Pass& p, api::ReplicaType type, int index) const;
  // Once per job generation, before its first pod is created: a server-side dry-run create of
  // each replica type's pod, so admission and core/v1 validation see the templates. A template
  // the server calls invalid fails the job as InvalidSpec (false); a refusal that may clear
  // (quota, Pod Security) is reported as CreateRefused does.
  absl::StatusOr<bool> CheckTemplates(Pass& p);
  // A create the API server refused: a Warning event (`reason`, the server's message), the
  // ReplicaFailure condition, status written; returns the error, so the job is retried with
  // backoff. Transport errors are only returned.
  absl::Status CreateRefused(Pass& p, const std::string& reason, const std::string& kind,
                             const std::string& name, const absl::Status& error);
  absl::Status CreatePod(Pass& p, api::ReplicaType type, int index);
  // A delete the API server refused (401/403: RBAC without delete, a webhook): a Warning event
  // `reason` with the server's message; returns the error annotated (retried with backoff).
  absl::Status DeleteRefused(Pass& p, const std::string& reason, const std::string& kind,
                             const std::string& name, const absl::Status& error);
  absl::Status DeletePod(Pass& p, const nlohmann::json& pod, const std::string& why);
  // The job's pods still Terminating kStuckPodMargin past their grace period, force-deleted
  // (gracePeriodSeconds 0) so that their replacements can be made: a node that stopped answering
  // never confirms them gone (stuck_pods.cc). Refusals are reported, not returned.
  absl::Status ForceDeleteStuckPods(Pass& p);
  // Deletes `pods` (the job's, all active when `only_active`): two or more with one
  // deletecollection by the job's labels (and phase), else, or where that verb is refused (a
  // Role without it), with DeletePod each.
  absl::Status DeletePods(Pass& p, const std::vector<nlohmann::json>& pods, bool only_active,
                          const std::string& why);
  // The pods a finished job's cleanPodPolicy deletes.
  std::vector<nlohmann::json> PodsToClean(const Pass& p) const;
  // "; cleanPodPolicy Running: deleting 3 pods and the Service", for the finishing event.
  std::string CleanupWords(const Pass& p) const;
  absl::Status Cleanup(Pass& p);
  // A job failed as InvalidSpec: its running and pending pods deleted (invalid_spec.cc).
  absl::StatusOr<ReconcileResult> StopPodsOfInvalidJob(Pass& p);
  // An edit that made spec.elastic invalid: p.job decoded again with the bounds last remembered
  // (elastic_bounds.h), `errors` cleared and p.refused_edit saying why; else p.job as decoded.
  void KeepValidBounds(Pass& p, api::FieldErrors* errors, api::FieldErrors* out_of_bounds);
  // The EditRefused condition and its Warning event while p.refused_edit is set.
  void ReportRefusedEdit(Pass& p);
  absl::Status Suspend(Pass& p);
  // The job's tasks as its pods show them, for the job-outcome policy (operator/api/outcome.h);
  // `views` receives each readable pod's view by task name.
  std::vector<api::TaskState> ObserveTasks(const Pass& p,
                                           std::map<std::string, PodView>* views) const;
  // Observe → decide (api::DecideJob) → act: status, restarts, pod deletions and creations,
  // success, failure and the deadline.
  absl::Status SyncTasks(Pass& p);
  // A cluster spec that changed restarts every pod; for an elastic job only a change beyond its
  // Workers does (the ps, the chief): Workers join and leave the ps instead.
  absl::Status RestartOnClusterChange(Pass& p);
  // Elastic jobs (docs/architecture.md §10): Worker replicas out of spec.elastic are reported
  // (ScalingLimited) and the job kept at the nearest bound; a changed count is a Scaled event;
  // Workers at indexes above it are deleted (ScaledDown) and not failures; a Worker that was
  // evicted, preempted or deleted is a WorkerLost event and is recreated (SyncTasks) without a
  // restart counted or the job restarted.
  absl::Status ScaleWorkers(Pass& p);
  // The ScalingLimited condition and its Warning while Worker replicas are out of bounds.
  void ReportWorkerBounds(Pass& p, int target);
  // status.elastic's target, the Scaled event, and the deletion of Workers at indexes >= target.
  absl::Status ScaleTo(Pass& p, int target);
  // Lost Workers (evicted, preempted, deleted) of wanted indexes: one WorkerLost event; a
  // disrupted pod is deleted so that SyncTasks recreates it uncounted.
  absl::Status RecoverLostWorkers(Pass& p, int target);
  // The live Worker pods at a pass's end, by index, for the next pass to tell which were lost.
  void RememberLiveWorkers(const Pass& p);
  void ForgetLiveWorkers(const std::string& key);
  void ReadFinalSummary(Pass& p);
  // Pods of a finished job that succeeded after it ended (a ps that exits 0 once the chief is
  // done, kept by cleanPodPolicy None) into status: `succeeded` counts them as their pods show.
  void CountLateCompletions(Pass& p);
  // Active pods per type into status; `after_cleanup`: as the cleanup will leave them.
  void CountActive(Pass& p, bool after_cleanup);
  void ReadProgress(Pass& p);
  void Finish(Pass& p, bool succeeded, const std::string& reason, const std::string& message);
  absl::Status WriteStatus(Pass& p);
  absl::StatusOr<ReconcileResult> FinishedJob(Pass& p);
  absl::StatusOr<ReconcileResult> RunPass(const std::string& key, Pass& p);
  // The Created condition this pass adds names the objects created so far ("TrainingJob ns/x is
  // created: service=x secret=… pods=…"), the start of a job in its status, not in an event.
  void NameCreatedObjects(Pass& p) const;
  // At a pass's end, its events: one Normal "Created" for the objects it created that its status
  // did not name, and one "Deleted" per reason for those it deleted (not one per object). Its
  // job-level events, if the pass `succeeded` (the outcome is written), are kept for the job's
  // next pass, which records them first (RecordDeferredEvents).
  void RecordPassEvents(Pass& p, bool succeeded);
  void RecordDeferredEvents(const std::string& key);
  kube::ApiClient& client_;
  const kube::ObjectCache& jobs_;
  const kube::ObjectCache& pods_;
  const kube::ObjectCache& services_;
  const kube::ObjectCache* tfjobs_;  // null: no TFJobs served
  EventRecorder& events_;
  OperatorMetrics* metrics_;
  ProgressPoller* progress_;  // null: no progress in status
  const ReconcilerOptions options_;
  const Clock& clock_;
  std::mutex progress_mu_;
  std::map<std::string, absl::Time> progress_written_;  // job key → last progress put in status

  Expectations expectations_;  // own status writes and deletions the caches may not show yet
  std::mutex writes_mu_;       // guards the memos below and deferred_events_
  // job key → uid of the job whose Secret is known to exist (no API call on later passes).
  std::map<std::string, std::string> secret_ensured_;
  // job key → uid of the job whose checkpoint claim is known to exist.
  std::map<std::string, std::string> claim_ensured_;
  // job key → "uid/generation" whose pod templates passed a dry-run create (CheckTemplates).
  std::map<std::string, std::string> templates_checked_;
  // job key → uid of the finished job whose PodGroup was deleted (Cleanup).
  std::map<std::string, std::string> podgroup_deleted_;
  // job key → the job-level events its last pass left for the next (RecordPassEvents).
  struct DeferredEvents {
    nlohmann::json object;  // the job they are recorded on
    std::vector<JobEvent> events;
  };
  std::map<std::string, DeferredEvents> deferred_events_;
  // job key → index → uid of each Worker pod live at the end of the elastic job's last pass
  // (RememberLiveWorkers): one gone since was lost, unless this reconciler deleted it.
  std::map<std::string, std::map<int, std::string>> live_workers_;
  // Namespaces where deletecollection on pods was refused (DeletePods deletes one by one).
  std::set<std::string> collection_deletes_refused_;
};

}  // namespace kubetrain::controller
