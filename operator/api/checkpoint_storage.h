// Checkpoint storage that outlives the chief's pod (docs/architecture.md §10, "Checkpoint
// storage"). A TrainingJob's spec.checkpoint names a PersistentVolumeClaim, an existing one
// (claimName) or one the operator creates per job (volumeClaimTemplate → <job>-checkpoint, owned
// by the job unless reclaimPolicy is Retain); the chief's pod mounts it at mountPath and
// checkpoints into <mountPath>/<job>. Only the chief reads and writes checkpoints (it restores
// them, refills an empty ps from them, and writes them; an evaluator reads the ps), so only its
// pod mounts the claim, and a ReadWriteOnce claim is enough.
//
// Whatever the job is (a TrainingJob with or without spec.checkpoint, a TFJob with its own
// volumes), the chief's rendered pod says whether its checkpoints outlive it:
// KUBETRAIN_CHECKPOINT_DURABLE on its training container (MarkCheckpointDurability); the chief
// warns at start when it is false, and the operator records a CheckpointsNotDurable event.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"
#include "operator/api/types.h"

namespace kubetrain::api {

inline constexpr char kDefaultCheckpointMountPath[] = "/var/lib/kubetrain/checkpoints";
// The pod volume that holds the claim.
inline constexpr char kCheckpointVolumeName[] = "kubetrain-checkpoint";
// A TFJob cannot carry spec.checkpoint (Kubeflow's CRD prunes it): this annotation names an
// existing claim to mount on its chief instead.
inline constexpr char kCheckpointClaimAnnotation[] = "kubetrain.dev/checkpoint-claim";
inline constexpr char kCheckpointDirEnv[] = "KUBETRAIN_CHECKPOINT_DIR";
inline constexpr char kCheckpointDurableEnv[] = "KUBETRAIN_CHECKPOINT_DURABLE";

// spec.checkpoint as written: type errors and unknown fields appended under spec.checkpoint.
// nullopt when it is not an object.
std::optional<CheckpointStorage> DecodeCheckpoint(const nlohmann::json& v, FieldErrors* errors);
nlohmann::json ToJson(const CheckpointStorage& storage);
// mountPath, and reclaimPolicy Delete for a claim the operator creates.
void SetCheckpointDefaults(CheckpointStorage* storage);
// Semantic checks of a defaulted job's spec.checkpoint and of the chief's template against it.
void ValidateCheckpoint(const TrainingJob& job, FieldErrors* errors);

// The claim the chief mounts: claimName, or <job>-checkpoint for a volumeClaimTemplate.
std::string CheckpointClaimName(const TrainingJob& job);
// The chief's checkpoint directory on the claim: <mountPath>/<job>. A folder of the volume, not
// its root: a fresh volume's root is often writable by a group (fsGroup) or by everyone (some
// provisioners), which the chief refuses for its checkpoint directory (checkpoint_dir.h).
std::string CheckpointDirOnClaim(const std::string& mount_path, const std::string& job_name);
// The PersistentVolumeClaim the operator creates for a volumeClaimTemplate: name
// <job>-checkpoint, the job's labels and the template's, accessModes [ReadWriteOnce] when
// unset, and the job as controller owner when reclaimPolicy is Delete (and the job has a uid).
nlohmann::json BuildCheckpointClaim(const TrainingJob& job);

// Mounts `claim` at `mount_path` on `container` of the pod spec and points the checkpoint
// directory there (KUBETRAIN_CHECKPOINT_DIR = `dir`).
void MountCheckpointClaim(nlohmann::json* pod_spec, const std::string& container,
                          const std::string& claim, const std::string& mount_path,
                          const std::string& dir);

// The checkpoint directory `container` is given: its --checkpoint-dir argument, else its
// KUBETRAIN_CHECKPOINT_DIR value; nullopt when neither is set.
std::optional<std::string> ContainerCheckpointDir(const nlohmann::json& container);
// Whether checkpoints written by `container` of `pod` outlive the pod: its checkpoint directory
// is at or under a read-write mount of a persistentVolumeClaim (or nfs) volume. A container
// with no checkpoint directory set writes to its own filesystem when `unset_is_in_pod`
// (kubetrain-worker's default); otherwise (a TensorFlow program, whose directory is its own
// flag) any such mount counts.
bool CheckpointsOutlivePod(const nlohmann::json& pod, const std::string& container,
                           bool unset_is_in_pod);
// Sets KUBETRAIN_CHECKPOINT_DURABLE ("true" or "false") on `container` of the chief's pod.
void MarkCheckpointDurability(nlohmann::json* pod, const std::string& container,
                              bool unset_is_in_pod);
// What MarkCheckpointDurability wrote: false only when it wrote "false".
bool MarkedDurable(const nlohmann::json& pod, const std::string& container);

}  // namespace kubetrain::api
