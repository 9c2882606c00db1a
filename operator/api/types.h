// C++ types for the TrainingJob resource (kubetrain.dev/v1, docs/architecture.md §3).
//
// Plain values: copyable, no behaviour beyond name conversions. Decoding from JSON/YAML lives in
// decode.h, defaulting in defaults.h, validation in validation.h, rendering in render.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/string_view.h"

namespace kubetrain::api {

inline constexpr char kGroup[] = "kubetrain.dev";
inline constexpr char kVersion[] = "v1";
inline constexpr char kApiVersion[] = "kubetrain.dev/v1";
inline constexpr char kKind[] = "TrainingJob";
inline constexpr char kPlural[] = "trainingjobs";

// The container that runs the training process and the port its peers dial.
inline constexpr char kDefaultContainerName[] = "kubetrain";
inline constexpr char kDefaultPortName[] = "kubetrain";
inline constexpr int kDefaultPort = 2222;
inline constexpr char kMetricsPortName[] = "metrics";
inline constexpr int kDefaultMetricsPort = 8080;
inline constexpr int kDefaultBackoffLimit = 6;

// Labels on every object the operator creates.
inline constexpr char kLabelJobName[] = "kubetrain.dev/job-name";
inline constexpr char kLabelReplicaType[] = "kubetrain.dev/replica-type";
inline constexpr char kLabelReplicaIndex[] = "kubetrain.dev/replica-index";
inline constexpr char kLabelJobRole[] = "kubetrain.dev/job-role";
inline constexpr char kLabelManagedBy[] = "app.kubernetes.io/managed-by";
inline constexpr char kManagedByValue[] = "kubetrain-operator";

enum class ReplicaType { kChief, kPS, kWorker, kEvaluator };
enum class RestartPolicy { kAlways, kOnFailure, kNever, kExitCode };
enum class CleanPodPolicy { kNone, kRunning, kAll };
enum class SuccessPolicy { kChiefOnly, kAllWorkers };
// How gradients (and ps-mode pulls) cross the network: the worker's --gradient-compression.
enum class GradientCompression { kNone, kFp16, kBf16 };
enum class RestartScope { kPod, kJob };

// Allowed spellings, in the order error messages list them. The CRD's enums must match these
// (checked by crd_test).
const std::vector<std::string>& ReplicaTypeNames();
const std::vector<std::string>& RestartPolicyNames();
const std::vector<std::string>& CleanPodPolicyNames();
const std::vector<std::string>& SuccessPolicyNames();
const std::vector<std::string>& GradientCompressionNames();  // none, fp16, bf16
const std::vector<std::string>& RestartScopeNames();

std::string Name(ReplicaType t);      // "Chief", "PS", "Worker", "Evaluator"
std::string TaskType(ReplicaType t);  // "chief", "ps", "worker", "evaluator" (TF_CONFIG, pod names)
std::string Name(RestartPolicy p);
std::string Name(CleanPodPolicy p);
std::string Name(SuccessPolicy p);
std::string Name(GradientCompression c);
std::string Name(RestartScope s);
bool Parse(absl::string_view text, ReplicaType* out);
bool Parse(absl::string_view text, RestartPolicy* out);
bool Parse(absl::string_view text, CleanPodPolicy* out);
bool Parse(absl::string_view text, SuccessPolicy* out);
bool Parse(absl::string_view text, GradientCompression* out);
bool Parse(absl::string_view text, RestartScope* out);

struct ObjectMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  // The whole metadata object as received, so fields we do not model survive a round trip.
  nlohmann::json raw = nlohmann::json::object();
};

struct ReplicaSpec {
  std::optional<int32_t> replicas;
  std::optional<RestartPolicy> restart_policy;
  // A core/v1 PodTemplateSpec, kept as JSON: every field the user wrote is preserved.
  nlohmann::json template_ = nlohmann::json::object();
};

struct SchedulingPolicy {
  std::optional<int32_t> min_available;
  std::string queue;
  std::string priority_class;
};

struct RunPolicy {
  std::optional<CleanPodPolicy> clean_pod_policy;
  std::optional<int64_t> ttl_seconds_after_finished;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int32_t> backoff_limit;
  std::optional<RestartScope> restart_scope;
  std::optional<bool> suspend;
  std::optional<SchedulingPolicy> scheduling_policy;
  // The controller that reconciles the job (ManagedByThisOperator); empty: this operator.
  std::string managed_by;
};

// spec.runPolicy.managedBy values that leave a job to the kubetrain operator: unset or empty,
// kubetrain's own, and, for a Kubeflow TFJob, the Kubeflow training operator's (the operator
// stands in for it). Any other value (Kueue's MultiKueue, kueue.x-k8s.io/multikueue) names
// another controller: the operator creates nothing for the job and writes no status.
inline constexpr char kManagedByKubetrain[] = "kubetrain.dev/operator";
inline constexpr char kManagedByKubeflow[] = "kubeflow.org/training-operator";
// The longest managedBy accepted (batch/v1 Job's limit).
inline constexpr size_t kMaxManagedByLength = 63;
bool ManagedByThisOperator(std::string_view managed_by, bool tfjob);

// spec.elastic: the Worker count may change while the job runs, between these bounds, without a
// pod restarted (docs/architecture.md §3, §5.10, §10). The parameter servers hold the membership,
// or, in an all-reduce job, the chief's coordinator. Every container gets KUBETRAIN_ELASTIC=1.
struct ElasticPolicy {
  std::optional<int32_t> min_replicas;
  std::optional<int32_t> max_replicas;
};

// spec.checkpoint: storage for the chief's checkpoints that outlives its pod (operator/api/
// checkpoint_storage.h, docs/architecture.md §10). Exactly one of claim_name (an existing
// PersistentVolumeClaim) and volume_claim_template (one the operator creates, <job>-checkpoint).
enum class ReclaimPolicy { kDelete, kRetain };
const std::vector<std::string>& ReclaimPolicyNames();
std::string Name(ReclaimPolicy p);
bool Parse(absl::string_view text, ReclaimPolicy* out);

struct CheckpointStorage {
  std::string claim_name;
  // A PersistentVolumeClaim's {metadata: {labels, annotations}, spec}, kept as written: the API
  // server validates the claim when the operator creates it.
  std::optional<nlohmann::json> volume_claim_template;
  std::string mount_path;  // where the chief's container mounts the claim
  // What becomes of a created claim when the job is deleted; unset with claim_name.
  std::optional<ReclaimPolicy> reclaim_policy;
};

struct TrainingJobSpec {
  // Ordered by ReplicaType: Chief, PS, Worker, Evaluator.
  std::map<ReplicaType, ReplicaSpec> replica_specs;
  RunPolicy run_policy;
  std::optional<SuccessPolicy> success_policy;
  // ps-sync: each step applies the first (training workers − backupWorkers) gradients and drops
  // the late ones (worker --backup-workers, set on every container as KUBETRAIN_BACKUP_WORKERS).
  std::optional<int32_t> backup_workers;
  std::optional<ElasticPolicy> elastic;
  std::optional<CheckpointStorage> checkpoint;
  // Gradients (and, ps modes, pulled parameters) as 16-bit floats on the network (worker
  // --gradient-compression, set on every container as KUBETRAIN_GRADIENT_COMPRESSION).
  std::optional<GradientCompression> gradient_compression;
};

struct Condition {
  std::string type;    // Created, Running, Restarting, Succeeded, Failed, Suspended
  std::string status;  // "True", "False", "Unknown"
  std::string reason;
  std::string message;
  std::string last_update_time;      // RFC 3339
  std::string last_transition_time;  // RFC 3339
};

struct ReplicaStatus {
  int32_t active = 0;
  int32_t succeeded = 0;
  int32_t failed = 0;
  // Restarts counted by the operator: never read back from container restartCount, which is lost
  // when a pod is recreated.
  int32_t restarts = 0;
  // Indexes that exited 0, "0,2-3" (batch/v1 Job's completedIndexes format): never run again,
  // even once their pods have been garbage-collected.
  std::string completed_indexes;
};

struct Progress {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  double accuracy = 0;
  double examples_per_second = 0;
  friend bool operator==(const Progress&, const Progress&) = default;
};

// status.elastic of an elastic job (docs/architecture.md §10).
struct ElasticStatus {
  int32_t live_workers = 0;     // Worker pods pending or running among the wanted indexes
  int32_t target_workers = 0;   // the Worker replicas the operator keeps, within the bounds
  std::string last_scale_time;  // RFC 3339: when the target last changed
};

struct TrainingJobStatus {
  std::vector<Condition> conditions;
  std::map<ReplicaType, ReplicaStatus> replica_statuses;
  std::string start_time;
  std::string completion_time;
  std::string last_reconcile_time;
  int64_t observed_generation = 0;
  std::optional<Progress> progress;
  // uids of failed pods whose restart is already counted in `restarts` and whose deletion may
  // still be due: written with the count, so an operator that restarts between the two never
  // counts one failure twice (docs/architecture.md §10).
  std::vector<std::string> counted_failures;
  std::optional<ElasticStatus> elastic;
};

struct TrainingJob {
  std::string api_version = kApiVersion;
  std::string kind = kKind;
  ObjectMeta metadata;
  TrainingJobSpec spec;
  TrainingJobStatus status;
};

// "0,2-3" <-> {0, 2, 3}. Parsing skips malformed parts.
std::string FormatIndexSet(const std::set<int>& indexes);
std::set<int> ParseIndexSet(absl::string_view text);

}  // namespace kubetrain::api
