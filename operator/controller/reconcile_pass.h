// Internal to the controller: one reconcile pass of one job, shared by the files that make up
// Reconciler: reconciler.cc decides (the pass, the job-outcome policy, status writes),
// reconciler_objects.cc writes the objects, cluster_change.cc restarts a job whose cluster spec
// changed, elastic_scaling.cc scales elastic jobs, chief_progress.cc puts the chief's progress in
// status; invalid_spec.cc and refused_edit.cc handle a spec that fails validation.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "operator/api/field_errors.h"
#include "operator/api/outcome.h"
#include "operator/api/render.h"
#include "operator/api/tfjob.h"
#include "operator/api/types.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/client.h"

namespace kubetrain::controller {

using nlohmann::json;

struct Reconciler::Pass {
  std::string key;
  bool tfjob = false;  // a Kubeflow TFJob: its own objects, status form and resource
  std::string ns;
  std::string name;
  json object;                 // the job as cached, or as last written here (NewestJob)
  std::string cached_version;  // the resourceVersion the job informer held
  api::TrainingJob job;
  api::TrainingJobStatus status;
  json original_status;
  // Each task's restart back-off (api::RestartBackoff), kept in the job's annotations
  // (restart_ledger.h) with, for a TFJob, the rest of its restart ledger.
  std::map<std::string, api::TaskBackoff> backoff;
  std::vector<api::Task> tasks;      // api::Tasks of the job, once per pass
  std::map<std::string, json> pods;  // this job's pods, by name
  std::map<api::ReplicaType, std::set<int>> completed;
  std::set<std::string> going;  // uids of pods deleted here that the cache still shows
  std::optional<absl::Duration> requeue;
  absl::Time now;
  bool finishing = false;  // this pass ended the job
  // What this pass created and deleted ({kind, name}; deletions by why), recorded as one Normal
  // event each at the pass's end (Reconciler::RecordPassEvents), not an event per object.
  std::vector<std::pair<std::string, std::string>> created;
  // This pass adds the job's Created condition: its message names what the pass created
  // (Reconciler::NameCreatedObjects), and the first `created_named` of `created` went out in a
  // status write that named them, so no Created event repeats them.
  bool creating = false;
  size_t created_named = 0;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> deleted;
  // Job-level events of this pass (JobSucceeded, JobFailed): recorded by the job's next pass,
  // once this one has written the outcome (RecordPassEvents).
  std::vector<JobEvent> job_events;
  // An elastic job's Worker replicas outside spec.elastic, in the validation's words: the pass
  // runs the job at the nearest bound (api::ClampElasticReplicas).
  std::optional<api::FieldError> out_of_bounds;
  // An edit of spec.elastic refused (elastic_bounds.h): why, in the validation's words; the
  // pass runs the job with its last valid bounds.
  std::string refused_edit;
  // The spec validated as it stands: its elastic bounds are remembered (elastic_bounds.h).
  bool remember_bounds = false;

  std::string JobRef() const { return ns + "/" + name; }
  // spec.elastic: the Worker count changes without restarts (docs/architecture.md §10). A
  // TFJob is never elastic.
  bool Elastic() const { return !tfjob && job.spec.elastic.has_value(); }
  // runPolicy.cleanPodPolicy, Running when unset (Kubeflow's default).
  api::CleanPodPolicy CleanPodPolicy() const {
    return job.spec.run_policy.clean_pod_policy.value_or(api::CleanPodPolicy::kRunning);
  }
  kube::Resource JobResource() const {
    return tfjob ? kube::Resource::TfJobs() : kube::Resource::TrainingJobs();
  }
  // A job-level message in the job's own kind's words: "TFJob ns/x ..." for a TFJob (its status
  // says so too, api::TfJobStatus).
  std::string Words(const std::string& text) const {
    return tfjob ? absl::StrReplaceAll(text, {{"TrainingJob", "TFJob"}}) : text;
  }
  // The container whose exit decides the task, and whose log holds the chief's summary.
  const char* TrainingContainer() const {
    return tfjob ? api::kTfJobContainerName : api::kDefaultContainerName;
  }
  // ViewPod, with the pods this reconciler deleted seen as going whatever the cache says.
  std::optional<PodView> View(const json& pod) const {
    std::optional<PodView> v = ViewPod(pod);
    if (v && going.count(v->uid)) v->deleting = true;
    return v;
  }
  // Pods per type that hold their node's resources: Pending or Running, being deleted or not.
  // status.replicaStatuses[*].active counts them until they are gone, as Kubeflow counts a
  // Running pod whatever its deletionTimestamp: Kueue frees a suspended job's quota only once
  // every active is 0 (docs/architecture.md §10).
  std::map<api::ReplicaType, int32_t> Occupying() const {
    std::map<api::ReplicaType, int32_t> n;
    for (const auto& [name, pod] : pods) {
      std::optional<PodView> v = ViewPod(pod);
      if (v && (v->phase == "Pending" || v->phase == "Running")) ++n[v->type];
    }
    return n;
  }
  void Requeue(absl::Duration d) {
    if (!requeue || d < *requeue) requeue = std::max(d, absl::Milliseconds(10));
  }
};

// Whether `uid` is the controller owner of `obj` (any owner when uid is empty).
inline bool OwnedBy(const json& pod, const std::string& uid) {
  if (uid.empty()) return true;
  const json& refs = pod["metadata"].value("ownerReferences", json::array());
  for (const json& ref : refs) {
    if (ref.value("uid", "") == uid && ref.value("controller", false)) return true;
  }
  return false;
}

inline bool Active(const PodView& v) {
  return !v.deleting && (v.phase == "Pending" || v.phase == "Running");
}

}  // namespace kubetrain::controller
