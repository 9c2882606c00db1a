// A job whose spec fails validation is marked Failed (InvalidSpec) and its pods that still run
// are deleted: a job the operator calls Failed never trains on (docs/architecture.md §10).
#include <vector>

#include "common/status.h"
#include "operator/api/tfjob.h"
#include "operator/api/types.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {

absl::StatusOr<ReconcileResult> Reconciler::StopPodsOfInvalidJob(Pass& p) {
  if (progress_ != nullptr) progress_->Untrack(p.key);
  ForgetLiveWorkers(p.key);
  // The spec did not decode: the uid and labels come from the object as stored.
  const std::string uid = p.object["metadata"].value("uid", "");
  const char* job_label = p.tfjob ? api::kKubeflowLabelJobName : api::kLabelJobName;
  std::vector<json> running;
  for (const json& pod : pods_.ListByLabel(p.ns, job_label, p.name)) {
    if (uid.empty() || !OwnedBy(pod, uid)) continue;
    const std::string phase = pod.value("status", json::object()).value("phase", "Pending");
    const bool deleting = pod["metadata"].contains("deletionTimestamp");
    if (!deleting && (phase == "Pending" || phase == "Running")) running.push_back(pod);
  }
  for (const json& pod : running) RETURN_IF_ERROR(DeletePod(p, pod, "InvalidSpec"));
  return ReconcileResult{};
}

}  // namespace kubetrain::controller
