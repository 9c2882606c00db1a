#include "operator/api/validation.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "operator/api/checkpoint_storage.h"
#include "operator/api/decode.h"
#include "operator/api/defaults.h"
#include "operator/api/pod_template_validation.h"
#include "operator/api/render.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

// [minReplicas, maxReplicas] of an elastic job whose bounds are themselves valid; nullopt for a
// job that is not elastic or whose bounds are reported as errors.
std::optional<std::pair<int32_t, int32_t>> ElasticBounds(const TrainingJob& job) {
  if (!job.spec.elastic || !job.spec.replica_specs.count(ReplicaType::kWorker)) return std::nullopt;
  const ElasticPolicy& e = *job.spec.elastic;
  if (!e.min_replicas || !e.max_replicas) return std::nullopt;
  const int32_t min = *e.min_replicas;
  const int32_t max = *e.max_replicas;
  if (min < 1 || max > kMaxReplicas || min > max) return std::nullopt;
  return std::make_pair(min, max);
}

std::string OutOfBounds(int32_t replicas, std::pair<int32_t, int32_t> bounds) {
  return absl::StrCat("must be between spec.elastic.minReplicas (", bounds.first,
                      ") and spec.elastic.maxReplicas (", bounds.second, "), got ", replicas);
}

// The job at its largest: an elastic job may scale its Workers up to maxReplicas, and every
// pod name and TF_CONFIG of that size must fit too.
TrainingJob AtMaxReplicas(const TrainingJob& job) {
  TrainingJob largest = job;
  if (auto bounds = ElasticBounds(job)) {
    std::optional<int32_t>& replicas = largest.spec.replica_specs[ReplicaType::kWorker].replicas;
    replicas = std::max(replicas.value_or(1), bounds->second);
  }
  return largest;
}

bool IsLabelChars(absl::string_view s) {
  for (char c : s) {
    if (!(absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-')) return false;
  }
  return true;
}

class Validator {
 public:
  explicit Validator(const TrainingJob& job)
      : job_(job), elastic_(ElasticBounds(job)), largest_(AtMaxReplicas(job)) {}

  FieldErrors Run() {
    TypeMeta();
    Metadata();
    ReplicaSpecs();
    RunPolicyFields();
    Success();
    Elastic();
    BackupWorkers();
    ValidateCheckpoint(job_, &errors_);
    return std::move(errors_);
  }

 private:
  void Error(std::string path, std::string message) {
    errors_.push_back({std::move(path), std::move(message)});
  }

  void TypeMeta() {
    if (job_.api_version != kApiVersion) {
      Error("apiVersion",
            job_.api_version.empty()
                ? absl::StrCat("required, must be ", kApiVersion)
                : absl::StrCat("must be ", kApiVersion, ", got \"", job_.api_version, "\""));
    }
    if (job_.kind != kKind) {
      Error("kind", job_.kind.empty()
                        ? absl::StrCat("required, must be ", kKind)
                        : absl::StrCat("must be ", kKind, ", got \"", job_.kind, "\""));
    }
  }

  void Metadata() {
    const std::string& name = job_.metadata.name;
    if (name.empty()) {
      Error("metadata.name", "required");
    } else if (!IsDns1035Label(name)) {
      Error("metadata.name",
            absl::StrCat("must be a DNS-1035 label (at most 63 lower-case letters, digits and '-', "
                         "starting with a letter and ending with a letter or digit), got \"",
                         name, "\""));
    } else {
      PodNameLengths();
    }
    const std::string& ns = job_.metadata.namespace_;
    if (!ns.empty() && !IsDns1123Label(ns)) {
      Error("metadata.namespace",
            absl::StrCat("must be a DNS-1123 label (at most 63 lower-case letters, digits and "
                         "'-', starting and ending with a letter or digit), got \"",
                         ns, "\""));
    }
  }

  // Pod names double as host names, so each must fit a 63-character DNS label.
  void PodNameLengths() {
    const std::string& name = job_.metadata.name;
    std::string longest;
    for (const auto& [type, rs] : largest_.spec.replica_specs) {
      int last = std::max(rs.replicas.value_or(1), 1) - 1;
      std::string pod = absl::StrCat(name, "-", TaskType(type), "-", last);
      if (pod.size() > longest.size()) longest = pod;
    }
    if (longest.size() <= kMaxLabelLength) return;
    size_t allowed = name.size() - (longest.size() - kMaxLabelLength);
    Error("metadata.name",
          absl::StrCat("too long: pod name \"", longest, "\" would be ", longest.size(),
                       " characters, at most ", kMaxLabelLength,
                       " are allowed; shorten the name to at most ", allowed, " characters"));
  }

  void ReplicaSpecs() {
    const auto& specs = job_.spec.replica_specs;
    if (specs.empty()) {
      Error("spec.replicaSpecs", "required: add a Worker (or a Chief) replica spec");
      return;
    }
    if (!specs.count(ReplicaType::kWorker) && !specs.count(ReplicaType::kChief)) {
      Error("spec.replicaSpecs", "must contain a Worker or a Chief replica spec");
    }
    bool counts_ok = true;
    for (const auto& [type, rs] : specs) counts_ok &= Replica(type, rs);
    if (counts_ok && IsDns1035Label(job_.metadata.name)) TfConfigSize();
  }

  // Every task's environment carries the whole cluster's addresses, and exec fails for all of
  // them once TF_CONFIG passes the kernel's limit.
  void TfConfigSize() {
    size_t size = LargestTfConfigSize(largest_);
    if (size <= kMaxTfConfigSize) return;
    ClusterDnsAddresses addresses;
    size_t tasks = 0;
    size_t address_bytes = 0;
    for (const auto& [type, rs] : largest_.spec.replica_specs) {
      if (type == ReplicaType::kEvaluator) continue;
      for (int i = 0; i < rs.replicas.value_or(1); ++i) {
        address_bytes += addresses.Address(largest_, type, i).size();
        ++tasks;
      }
    }
    Error("spec.replicaSpecs",
          absl::StrCat("TF_CONFIG would be ", Thousands(size), " bytes (", tasks, " tasks x ~",
                       address_bytes / std::max<size_t>(tasks, 1), " bytes per address) > ",
                       Thousands(kMaxTfConfigSize),
                       ", above what a process environment can carry; lower replicas",
                       elastic_ ? " (spec.elastic.maxReplicas counts)" : "",
                       " or shorten metadata.name and metadata.namespace"));
  }

  static std::string Thousands(size_t n) {
    std::string digits = std::to_string(n);
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  }

  // False when the replica count is out of range.
  bool Replica(ReplicaType type, const ReplicaSpec& rs) {
    const std::string path = "spec.replicaSpecs." + Name(type);
    int replicas = rs.replicas.value_or(1);
    bool ok = false;
    if (replicas < 1) {
      Error(path + ".replicas", absl::StrCat("must be >= 1, got ", replicas));
    } else if ((type == ReplicaType::kChief || type == ReplicaType::kEvaluator) && replicas > 1) {
      Error(path + ".replicas",
            absl::StrCat("must be 1 (a job has at most one ", Name(type), "), got ", replicas));
    } else if (replicas > kMaxReplicas) {
      Error(path + ".replicas", absl::StrCat("must be <= ", kMaxReplicas, ", got ", replicas));
    } else {
      ok = true;
    }
    ValidatePodTemplate(rs.template_, path + ".template", &errors_);
    return ok;
  }

  void NonNegative(const std::optional<int64_t>& v, const std::string& path) {
    if (v && *v < 0) Error(path, absl::StrCat("must be >= 0, got ", *v));
  }

  void RunPolicyFields() {
    const RunPolicy& rp = job_.spec.run_policy;
    NonNegative(rp.ttl_seconds_after_finished, "spec.runPolicy.ttlSecondsAfterFinished");
    if (rp.active_deadline_seconds && *rp.active_deadline_seconds < 1) {
      Error("spec.runPolicy.activeDeadlineSeconds",
            absl::StrCat("must be >= 1, got ", *rp.active_deadline_seconds));
    }
    if (rp.backoff_limit) NonNegative(int64_t{*rp.backoff_limit}, "spec.runPolicy.backoffLimit");
    ManagedBy(rp.managed_by);
    if (rp.scheduling_policy && rp.scheduling_policy->min_available) {
      MinAvailable(*rp.scheduling_policy->min_available);
    }
  }

  // A domain-prefixed path such as kubetrain.dev/operator or kueue.x-k8s.io/multikueue, as
  // batch/v1 Job's managedBy; the CRD makes it immutable.
  void ManagedBy(const std::string& v) {
    if (v.empty()) return;
    const size_t slash = v.find('/');
    if (v.size() > kMaxManagedByLength || slash == std::string::npos || slash == 0 ||
        slash + 1 == v.size() || v.find('/', slash + 1) != std::string::npos) {
      Error("spec.runPolicy.managedBy",
            absl::StrCat("must be a domain-prefixed path of at most ", kMaxManagedByLength,
                         " characters, such as ", kManagedByKubetrain,
                         " (this operator) or kueue.x-k8s.io/multikueue, got \"", v, "\""));
    }
  }

  // An elastic job's gang must still be schedulable once it is down to minReplicas Workers.
  void MinAvailable(int32_t min_available) {
    int total = 0;
    for (const auto& [type, rs] : job_.spec.replica_specs) {
      total += elastic_ && type == ReplicaType::kWorker ? elastic_->first
                                                        : std::max(rs.replicas.value_or(1), 0);
    }
    const std::string path = "spec.runPolicy.schedulingPolicy.minAvailable";
    if (min_available < 1) {
      Error(path, absl::StrCat("must be >= 1, got ", min_available));
    } else if (min_available > total) {
      Error(path,
            absl::StrCat("must be <= the job's ", total, " replicas",
                         elastic_ ? " at spec.elastic.minReplicas" : "", ", got ", min_available));
    }
  }

  void Success() {
    if (job_.spec.success_policy == SuccessPolicy::kAllWorkers &&
        !job_.spec.replica_specs.count(ReplicaType::kWorker)) {
      Error("spec.successPolicy", "AllWorkers needs a Worker replica spec; use ChiefOnly");
    }
  }

  // Elastic jobs change their Worker count while they run; the parameter servers hold the
  // membership (docs/architecture.md §3, §10).
  void Elastic() {
    if (!job_.spec.elastic) return;
    const std::string path = "spec.elastic";
    const ElasticPolicy& e = *job_.spec.elastic;
    const auto& specs = job_.spec.replica_specs;
    auto worker = specs.find(ReplicaType::kWorker);
    if (worker == specs.end()) {
      Error(path,
            "needs a Worker replica spec: it bounds spec.replicaSpecs.Worker.replicas; add "
            "Worker replicas or remove spec.elastic");
    }
    const bool min_ok = Bound(e.min_replicas, path + ".minReplicas",
                              "the fewest Workers the job runs with, e.g. 1");
    const bool max_ok =
        Bound(e.max_replicas, path + ".maxReplicas", "the most Workers the job may scale to");
    if (min_ok && max_ok && *e.min_replicas > *e.max_replicas) {
      Error(path + ".maxReplicas", absl::StrCat("must be >= spec.elastic.minReplicas (",
                                                *e.min_replicas, "), got ", *e.max_replicas));
    }
    if (!elastic_) return;
    const int32_t replicas = worker->second.replicas.value_or(1);
    if (replicas < 1 || replicas > kMaxReplicas) return;  // reported by Replica
    if (replicas < elastic_->first || replicas > elastic_->second) {
      Error("spec.replicaSpecs.Worker.replicas",
            OutOfBounds(replicas, *elastic_) + "; scale within them (kubectl scale tj/" +
                job_.metadata.name + " --replicas=N) or change spec.elastic");
    }
  }

  // A bound of spec.elastic: present and a valid Worker count.
  bool Bound(const std::optional<int32_t>& v, const std::string& path, const char* what) {
    if (!v) {
      Error(path, absl::StrCat("required: ", what, " (1 to ", kMaxReplicas, ")"));
    } else if (*v < 1) {
      Error(path, absl::StrCat("must be >= 1, got ", *v));
    } else if (*v > kMaxReplicas) {
      Error(path, absl::StrCat("must be <= ", kMaxReplicas, ", got ", *v));
    } else {
      return true;
    }
    return false;
  }

  // Backup workers drop gradients of a ps-sync step: they need parameter servers, and at least
  // one training worker's gradient must count, also once an elastic job is down to minReplicas.
  void BackupWorkers() {
    if (!job_.spec.backup_workers) return;
    const int32_t b = *job_.spec.backup_workers;
    const std::string path = "spec.backupWorkers";
    int training = 0;
    for (ReplicaType t : {ReplicaType::kChief, ReplicaType::kWorker}) {
      auto it = job_.spec.replica_specs.find(t);
      if (it != job_.spec.replica_specs.end())
        training += std::max(it->second.replicas.value_or(1), 0);
    }
    const int chief = job_.spec.replica_specs.count(ReplicaType::kChief) ? 1 : 0;
    if (b < 0) {
      Error(path, absl::StrCat("must be >= 0, got ", b));
    } else if (b > 0 && !job_.spec.replica_specs.count(ReplicaType::kPS)) {
      Error(path,
            "backup workers drop late gradients of a ps-sync step: the job needs a PS "
            "replica spec (all-reduce waits for every worker)");
    } else if (b > 0 && b >= training) {
      Error(path, absl::StrCat("must be less than the job's ", training,
                               " training workers (Chief and Workers), got ", b,
                               ": each step needs at least one gradient"));
    } else if (b > 0 && elastic_ && b >= elastic_->first + chief) {
      Error(path, absl::StrCat("must be less than the job's fewest training workers, ",
                               elastic_->first + chief, " (spec.elastic.minReplicas",
                               chief ? " + the Chief" : "", "), got ", b,
                               ": each step needs at least one gradient; lower backupWorkers or "
                               "raise minReplicas"));
    }
  }

  const TrainingJob& job_;
  const std::optional<std::pair<int32_t, int32_t>> elastic_;  // ElasticBounds
  const TrainingJob largest_;                                 // AtMaxReplicas
  FieldErrors errors_;
};

}  // namespace

size_t LargestTfConfigSize(const TrainingJob& job) {
  // Summed from the address lengths, so nothing the size of TF_CONFIG is built to find out.
  ClusterDnsAddresses addresses;
  size_t size = std::string(R"({"cluster":{},"task":{"type":"","index":}})").size();
  size_t longest_task = 0;
  bool first_type = true;
  for (const auto& [type, rs] : job.spec.replica_specs) {
    const int replicas = rs.replicas.value_or(1);
    const std::string task_type = TaskType(type);
    longest_task =
        std::max(longest_task, task_type.size() + std::to_string(std::max(replicas - 1, 0)).size());
    if (type == ReplicaType::kEvaluator) continue;        // only ever in "task"
    size += (first_type ? 0 : 1) + task_type.size() + 5;  // ,"ps":[]
    first_type = false;
    for (int i = 0; i < replicas; ++i) {
      size += addresses.Address(job, type, i).size() + 2 + (i > 0 ? 1 : 0);  // quotes, comma
    }
  }
  return size + longest_task;
}

bool IsDns1035Label(absl::string_view s) {
  return !s.empty() && s.size() <= kMaxLabelLength && IsLabelChars(s) &&
         absl::ascii_islower(s.front()) && s.back() != '-';
}

bool IsDns1123Label(absl::string_view s) {
  return !s.empty() && s.size() <= kMaxLabelLength && IsLabelChars(s) && s.front() != '-' &&
         s.back() != '-';
}

FieldErrors Validate(const TrainingJob& job) { return Validator(job).Run(); }

std::optional<FieldError> ClampElasticReplicas(TrainingJob* job) {
  std::optional<std::pair<int32_t, int32_t>> bounds = ElasticBounds(*job);
  if (!bounds) return std::nullopt;
  std::optional<int32_t>& replicas = job->spec.replica_specs[ReplicaType::kWorker].replicas;
  const int32_t wanted = replicas.value_or(1);
  if (wanted < 1 || wanted > kMaxReplicas) return std::nullopt;  // an error, not a scale
  const int32_t kept = std::clamp(wanted, bounds->first, bounds->second);
  if (kept == wanted) return std::nullopt;
  replicas = kept;
  return FieldError{"spec.replicaSpecs.Worker.replicas",
                    absl::StrCat(OutOfBounds(wanted, *bounds), "; kept at ", kept,
                                 " until it is set within the bounds")};
}

TrainingJob DecodeAndValidate(const json& doc, FieldErrors* errors, FieldErrors* clamped) {
  TrainingJob job = Decode(doc, errors);
  if (!doc.is_object()) return job;
  SetDefaults(&job);
  if (clamped != nullptr) {
    if (std::optional<FieldError> c = ClampElasticReplicas(&job)) clamped->push_back(*c);
  }
  FieldErrors semantic = Validate(job);
  errors->insert(errors->end(), semantic.begin(), semantic.end());
  return job;
}

}  // namespace kubetrain::api
