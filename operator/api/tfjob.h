// Kubeflow's TFJob (kubeflow.org/v1), the manifest many TensorFlow users already hold, as
// kubetrain reads it (docs/decisions/0007-kubeflow-tfjob.md):
//   - ConvertTfJob maps it onto the TrainingJob it is equivalent to, field by field, and says
//     what does not carry over;
//   - KubeflowTfConfig is the TF_CONFIG Kubeflow's training-operator gives each of its tasks,
//     byte for byte, for programs that read it.
// Kubeflow's rules are those of its training-operator v1 (pkg/apis/kubeflow.org/v1 defaults,
// pkg/controller.v1/tensorflow), restated here in this project's terms.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"
#include "operator/api/types.h"

namespace kubetrain::api {

inline constexpr char kTfJobApiVersion[] = "kubeflow.org/v1";
inline constexpr char kTfJobKind[] = "TFJob";
// Kubeflow's training container and the name of its port (default 2222).
inline constexpr char kTfJobContainerName[] = "tensorflow";
inline constexpr char kTfJobPortName[] = "tfjob-port";

// apiVersion kubeflow.org/v1 and kind TFJob.
bool IsTfJob(const nlohmann::json& doc);

struct TfJobConversion {
  // The equivalent TrainingJob manifest (kubetrain.dev/v1), defaults Kubeflow and kubetrain
  // disagree on written out; decode it with DecodeAndValidate.
  nlohmann::json training_job;
  // What does not carry over, or carries over changed, one sentence each naming the field.
  std::vector<std::string> notes;
};

// Errors (unknown fields, a Master beside a Chief, replica types Kubeflow does not know) are
// appended with TFJob paths: spec.tfReplicaSpecs.Worker.replicas.
TfJobConversion ConvertTfJob(const nlohmann::json& tfjob, FieldErrors* errors);

// A TrainingJob error path (spec.replicaSpecs.Chief.template...) as the TFJob field it came
// from (spec.tfReplicaSpecs.Master.template...).
std::string TfJobPath(const nlohmann::json& tfjob, const std::string& training_job_path);

// The TF_CONFIG of task `type` (Kubeflow's replica type in any case: "Worker", "master") index
// `index`, as Kubeflow writes it: cluster addresses <job>-<type>-<i>.<namespace>.svc[.<domain>]
// :<tfjob-port> for every replica type (evaluators included), keys sorted, then task and
// "environment":"cloud"; the sparse form under enableDynamicWorker; "" for a job that is not
// distributed (one replica in all). `cluster_domain` is Kubeflow's CUSTOM_CLUSTER_DOMAIN. For a
// TFJob that ConvertTfJob and DecodeAndValidate accept (they bound the replica counts).
std::string KubeflowTfConfig(const nlohmann::json& tfjob, const std::string& type, int index,
                             const std::string& cluster_domain);

// Kubeflow's labels on a TFJob's pods and Services.
inline constexpr char kKubeflowLabelJobName[] = "training.kubeflow.org/job-name";
inline constexpr char kKubeflowLabelReplicaType[] = "training.kubeflow.org/replica-type";
inline constexpr char kKubeflowLabelReplicaIndex[] = "training.kubeflow.org/replica-index";
inline constexpr char kKubeflowLabelOperatorName[] = "training.kubeflow.org/operator-name";
inline constexpr char kKubeflowLabelJobRole[] = "training.kubeflow.org/job-role";
inline constexpr char kKubeflowOperatorName[] = "tfjob-controller";

// The replica type as Kubeflow names a TFJob's pods, Services and TF_CONFIG entries: the
// tfReplicaSpecs key in lower case ("master" for a Chief written as Master). `type` is one the
// TFJob's conversion has.
std::string TfJobReplicaName(const nlohmann::json& tfjob, ReplicaType type);
// <job>-<type>-<index>: the name of one replica's pod and Service.
std::string TfJobTaskName(const nlohmann::json& tfjob, ReplicaType type, int index);

// The TrainingJob the operator reconciles for a TFJob as the API server holds it: converted
// (ConvertTfJob), with the TFJob's metadata (uid, generation) and its status read back in the
// TrainingJob model (TfJobStatus's inverse), then validated as every TrainingJob is; errors name
// the TFJob's fields. apiVersion and kind stay the TFJob's, so the objects made for it (the
// job's Secret, a PodGroup) are owned by the TFJob.
TrainingJob DecodeTfJob(const nlohmann::json& tfjob, FieldErrors* errors);

// A TrainingJob status written the way Kubeflow writes a TFJob's: the same condition types, with
// reasons and messages that say TFJob (TFJobCreated, TFJobRunning, TFJobRestarting,
// TFJobSucceeded, TFJobFailed); replicaStatuses under the TFJob's replica types ("Master" where
// it has one) with active, succeeded and failed; startTime, completionTime, lastReconcileTime.
// kubetrain's own fields (restarts, completedIndexes, progress, countedFailures,
// observedGeneration) stand beside them. DecodeTfJob reads it back.
nlohmann::json TfJobStatus(const TrainingJobStatus& status, const nlohmann::json& tfjob);

// What the kubetrain operator creates for a TFJob that DecodeTfJob accepts (it bounds the
// replica counts and template shapes) — Kubeflow's objects, docs/decisions/0007:
//   - per replica a headless Service <job>-<type>-<i> selecting its pod (every port of the
//     tensorflow container), with the training.kubeflow.org/* labels;
//   - the pods: each its template with those labels (job-role: master on the chief: Chief or
//     Master 0, else Worker 0), tfjob-port 2222 added when absent and TF_CONFIG
//     (KubeflowTfConfig) on the tensorflow container.
// What the operator adds, as it does for a TrainingJob: restartPolicy Never (it decides every
// restart and counts it), KUBETRAIN_JOB_SECRET from the job's Secret, the
// app.kubernetes.io/managed-by label, and owner references once the job has a uid. The namespace
// is the TFJob's, else "default".
nlohmann::json TfJobPod(const nlohmann::json& tfjob, ReplicaType type, int index,
                        const std::string& cluster_domain);
std::vector<nlohmann::json> TfJobServices(const nlohmann::json& tfjob);

// TfJobServices then every TfJobPod, for `kubetrain render`; namespace from the TFJob, else
// `ns`.
std::vector<nlohmann::json> RenderTfJob(const nlohmann::json& tfjob, const std::string& ns,
                                        const std::string& cluster_domain);

}  // namespace kubetrain::api
