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

// The objects Kubeflow's training-operator creates for a TFJob that ConvertTfJob and
// DecodeAndValidate accept (they bound the replica counts and template shapes): per
// replica a headless Service <job>-<type>-<i> selecting its pod (every port of the tensorflow
// container), then the pods, each its template with the training.kubeflow.org/* labels
// (job-role: master on the chief: Chief or Master 0, else Worker 0), restartPolicy from the
// replica (ExitCode runs as Never), tfjob-port 2222 added when absent and TF_CONFIG
// (KubeflowTfConfig) on the tensorflow container. Namespace from the TFJob, else `ns`. Owner
// references are the operator's, once the API server has given the job a uid.
std::vector<nlohmann::json> RenderTfJob(const nlohmann::json& tfjob, const std::string& ns,
                                        const std::string& cluster_domain);

}  // namespace kubetrain::api
