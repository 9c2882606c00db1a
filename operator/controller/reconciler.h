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
};

struct ReconcileResult {
  std::optional<absl::Duration> requeue_after;
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

  // The chief's task and pod as the cache shows them; none while the pod does not exist.
  std::optional<std::pair<api::Task, PodView>> ChiefPod(const Pass& p) const;
  absl::Status EnsureService(Pass& p);
  // A TFJob's Services: Kubeflow's headless Service per replica (api::TfJobServices).
  absl::Status EnsureTfJobServices(Pass& p);
  // The job's shared-secret Secret (api::BuildJobSecret), before any of its pods: the pods read
  // KUBETRAIN_JOB_SECRET from it. docs/decisions/0005-shared-secret-per-job.md.
  absl::Status EnsureJobSecret(Pass& p);
  absl::Status EnsurePodGroup(Pass& p);
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
  absl::Status Cleanup(Pass& p);
  absl::Status Suspend(Pass& p);
  // The job's tasks as its pods show them, for the job-outcome policy (operator/api/outcome.h);
  // `views` receives each readable pod's view by task name.
  std::vector<api::TaskState> ObserveTasks(const Pass& p,
                                           std::map<std::string, PodView>* views) const;
  // Observe → decide (api::DecideJob) → act: status, restarts, pod deletions and creations,
  // success, failure and the deadline.
  absl::Status SyncTasks(Pass& p);
  absl::Status RestartOnClusterChange(Pass& p);
  void ReadFinalSummary(Pass& p);
  void CountActive(Pass& p);
  void ReadProgress(Pass& p);
  void Finish(Pass& p, bool succeeded, const std::string& reason, const std::string& message);
  absl::Status WriteStatus(Pass& p);
  absl::StatusOr<ReconcileResult> FinishedJob(Pass& p);
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
  std::mutex writes_mu_;       // guards the two memos below
  // job key → uid of the job whose Secret is known to exist (no API call on later passes).
  std::map<std::string, std::string> secret_ensured_;
  // job key → "uid/generation" whose pod templates passed a dry-run create (CheckTemplates).
  std::map<std::string, std::string> templates_checked_;
};

}  // namespace kubetrain::controller
