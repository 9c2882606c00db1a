// Pods left Terminating by a node that stopped answering.
//
// When a node stops heartbeating, Kubernetes taints it unreachable and the taint eviction
// controller deletes its pods once their toleration runs out (DisruptionTarget
// DeletionByTaintManager); a job restarting or cleaning up deletes them too. Either delete is
// graceful: the pod object stays, Terminating, until its kubelet reports the containers
// stopped, which a dead or cut-off node never does. A job's pods have fixed names
// (<job>-worker-0), so its replacement cannot be created while the old object exists, and the
// job would wait for the node for ever (a StatefulSet waits the same way; a Job's pods have
// generated names and do not).
//
// So a pod of the job still there kStuckPodMargin after its deletionTimestamp (the end of its
// grace period, by which a live kubelet has killed its containers and removed it) is deleted
// with gracePeriodSeconds 0, as `kubectl delete pod --force --grace-period=0` does, and the job's
// next pass creates its replacement on a node that answers. Should the lost node come back, its
// kubelet stops the containers of pods that no longer exist. Until then they may still run
// cut off: a checkpoint on storage every node reaches (ReadWriteMany) could see two chiefs
// write to it; the one on the cut-off node cannot reach its ps or peers to make progress.
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "operator/controller/reconcile_pass.h"

namespace kubetrain::controller {

absl::Status Reconciler::ForceDeleteStuckPods(Pass& p) {
  for (const auto& [name, pod] : p.pods) {
    const json& meta = pod["metadata"];
    if (!meta.contains("deletionTimestamp") || !meta["deletionTimestamp"].is_string()) continue;
    const absl::Time grace_ended = kube::ParseTime(meta["deletionTimestamp"].get<std::string>());
    if (grace_ended == absl::InfinitePast()) continue;
    const absl::Time due = grace_ended + kStuckPodMargin;
    if (p.now < due) {
      p.Requeue(due - p.now);  // nothing else may wake the job: the node is silent
      continue;
    }
    const std::string uid = meta.value("uid", "");
    absl::Status s = client_.Delete(
        kube::Resource::Pods(), p.ns, name,
        {.propagation_policy = "Background", .precondition_uid = uid, .grace_period_seconds = 0});
    if (s.code() == absl::StatusCode::kNotFound || s.code() == absl::StatusCode::kAborted) {
      continue;  // gone meanwhile, or another pod of the name
    }
    if (!s.ok()) {
      // Reported (a Role without delete) and retried; the rest of the pass goes on.
      (void)DeleteRefused(p, "FailedDeletePod", "Pod", name, s);
      p.Requeue(kStuckPodMargin);
      continue;
    }
    std::optional<PodView> v = ViewPod(pod);
    const std::string why = v && v->disruption == "DeletionByTaintManager"
                                ? "evicted from a node that stopped answering"
                                : "its node did not confirm its containers stopped";
    const std::string message =
        absl::StrCat("Force-deleted Pod pod=", name, ": still Terminating ",
                     absl::FormatDuration(p.now - grace_ended), " after its grace period (", why,
                     "); its replacement runs on a node that answers");
    events_.Warning(p.object, "ForceDeletedPod", message);
    log::Warn("Force-deleted a pod stuck Terminating",
              {{"job", p.JobRef()}, {"pod", name}, {"reason", why}});
    p.going.insert(uid);
    expectations_.PodDeleted(p.key, uid);
  }
  return absl::OkStatus();
}

}  // namespace kubetrain::controller
