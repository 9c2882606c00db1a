// The job's checkpoint storage (operator/api/checkpoint_storage.h): the PersistentVolumeClaim a
// volumeClaimTemplate asks for, created before the job's pods, and the CheckpointsNotDurable
// warning for a job whose chief checkpoints inside its own pod.
#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/api/checkpoint_storage.h"
#include "operator/api/render.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {

const kube::Resource& PersistentVolumeClaims() {
  static const kube::Resource kClaims = {"", "v1", "persistentvolumeclaims",
                                         "PersistentVolumeClaim", true};
  return kClaims;
}

absl::Status Reconciler::EnsureCheckpointClaim(Pass& p) {
  const auto& storage = p.job.spec.checkpoint;
  if (p.tfjob || !storage || !storage->volume_claim_template) return absl::OkStatus();
  {
    std::lock_guard<std::mutex> lock(writes_mu_);
    auto it = claim_ensured_.find(p.key);
    if (it != claim_ensured_.end() && it->second == p.job.metadata.uid) return absl::OkStatus();
  }
  const std::string name = api::CheckpointClaimName(p.job);
  absl::StatusOr<json> created =
      client_.Create(PersistentVolumeClaims(), p.ns, api::BuildCheckpointClaim(p.job));
  if (created.ok()) {
    p.created.emplace_back("PersistentVolumeClaim", name);
  } else if (created.status().code() == absl::StatusCode::kAlreadyExists) {
    ASSIGN_OR_RETURN(json existing, client_.Get(PersistentVolumeClaims(), p.ns, name),
                     "reading the checkpoint claim of ", p.JobRef());
    const bool owned = OwnedBy(existing, p.job.metadata.uid);
    bool other_owner = false;
    for (const json& ref : existing["metadata"].value("ownerReferences", json::array())) {
      other_owner |= ref.value("controller", false) && !owned;
    }
    if (other_owner) {
      if (std::optional<std::string> other = LiveNamesake(p, existing)) {
        std::string message = absl::StrCat(p.Words("TrainingJob "), p.JobRef(),
                                           " cannot start: ", *other, " owns its checkpoint claim ",
                                           p.ns, "/", name, "; rename or delete one of them");
        events_.Warning(p.object, "NameConflict", message);
        return absl::UnavailableError(message);
      }
      // An earlier job of this name whose claim (reclaimPolicy Delete) the garbage collector
      // has not removed yet: its checkpoints are going with it.
      return absl::UnavailableError(absl::StrCat(
          "PersistentVolumeClaim ", p.ns, "/", name, " belongs to an earlier job of this name, ",
          "still being deleted; waiting for it to go before creating the job's pods"));
    }
    if (!owned) {
      // Kept by reclaimPolicy Retain (or made by hand): mounted as it is, never adopted.
      events_.Normal(
          p.object, "CheckpointClaimReused",
          absl::StrCat("Mounting the existing PersistentVolumeClaim ", p.ns, "/", name,
                       " job=", p.JobRef(), ": the chief resumes from the checkpoints it holds"));
    }
  } else {
    return CreateRefused(p, "FailedCreatePersistentVolumeClaim", "PersistentVolumeClaim", name,
                         created.status());
  }
  std::lock_guard<std::mutex> lock(writes_mu_);
  claim_ensured_[p.key] = p.job.metadata.uid;
  return absl::OkStatus();
}

void Reconciler::WarnIfCheckpointsNotDurable(Pass& p) {
  if (p.object.is_null() || p.job.spec.replica_specs.empty()) return;
  const api::ReplicaType chief = p.job.spec.replica_specs.count(api::ReplicaType::kChief)
                                     ? api::ReplicaType::kChief
                                     : api::ReplicaType::kWorker;
  if (!p.job.spec.replica_specs.count(chief)) return;
  const json pod = PodFor(p, chief, 0);
  if (api::MarkedDurable(pod, p.TrainingContainer())) return;
  const std::string fix =
      p.tfjob ? absl::StrCat(
                    "mount a persistentVolumeClaim volume at the chief's checkpoint "
                    "directory, or name a claim in the annotation ",
                    api::kCheckpointClaimAnnotation)
              : "set spec.checkpoint (a PersistentVolumeClaim per job), or mount a "
                "persistentVolumeClaim volume at the chief's --checkpoint-dir";
  events_.Warning(
      p.object, "CheckpointsNotDurable",
      absl::StrCat("Checkpoints of ", p.Words("TrainingJob "), p.JobRef(), " are inside the pod ",
                   pod["metadata"].value("name", ""),
                   " and are lost when it is recreated (suspend, a replica change, eviction, a "
                   "lost node): training then restarts from step 0; ",
                   fix));
}

}  // namespace kubetrain::controller
