#include "operator/api/decode.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "operator/api/checkpoint_storage.h"
#include "operator/api/yaml.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

// Walks one JSON document, recording type errors under their field paths.
class Decoder {
 public:
  explicit Decoder(FieldErrors* errors) : errors_(errors) {}

  void Error(const std::string& path, std::string message) {
    errors_->push_back({path, std::move(message)});
  }

  // Reports fields of `obj` that are not in `allowed`.
  void Known(const json& obj, const std::string& path, const std::vector<std::string>& allowed) {
    for (const auto& [key, value] : obj.items()) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        Error(Join(path, key), "unknown field; allowed: " + absl::StrJoin(allowed, ", "));
      }
    }
  }

  bool Object(const json& v, const std::string& path) {
    if (v.is_object()) return true;
    Error(path, "must be an object, got " + Describe(v));
    return false;
  }

  std::optional<std::string> String(const json& v, const std::string& path) {
    if (v.is_string()) return v.get<std::string>();
    Error(path, "must be a string, got " + Describe(v));
    return std::nullopt;
  }

  std::optional<bool> Bool(const json& v, const std::string& path) {
    if (v.is_boolean()) return v.get<bool>();
    Error(path, "must be a boolean (true or false), got " + Describe(v));
    return std::nullopt;
  }

  template <typename Int>
  std::optional<Int> Integer(const json& v, const std::string& path) {
    if (!v.is_number_integer()) {
      Error(path, "must be an integer, got " + Describe(v));
      return std::nullopt;
    }
    if (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t(std::numeric_limits<Int>::max())
                               : v.get<int64_t>() > int64_t(std::numeric_limits<Int>::max()) ||
                                     v.get<int64_t>() < int64_t(std::numeric_limits<Int>::min())) {
      Error(path,
            absl::StrCat("must be <= ", std::numeric_limits<Int>::max(), ", got ", Describe(v)));
      return std::nullopt;
    }
    return static_cast<Int>(v.get<int64_t>());
  }

  template <typename Enum>
  std::optional<Enum> OneOf(const json& v, const std::string& path,
                            const std::vector<std::string>& names) {
    std::optional<std::string> s = String(v, path);
    if (!s) return std::nullopt;
    Enum e;
    if (Parse(*s, &e)) return e;
    Error(path, "unsupported value " + Describe(v) + "; allowed: " + absl::StrJoin(names, ", "));
    return std::nullopt;
  }

  std::optional<CheckpointStorage> Checkpoint(const json& v) {
    return DecodeCheckpoint(v, errors_);
  }

  static std::string Join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }

 private:
  FieldErrors* errors_;
};

std::map<std::string, std::string> StringMap(Decoder& d, const json& v, const std::string& path) {
  std::map<std::string, std::string> out;
  if (!d.Object(v, path)) return out;
  for (const auto& [key, value] : v.items()) {
    if (auto s = d.String(value, Decoder::Join(path, key))) out[key] = *s;
  }
  return out;
}

ObjectMeta DecodeMeta(Decoder& d, const json& v) {
  ObjectMeta meta;
  if (!d.Object(v, "metadata")) return meta;
  meta.raw = v;
  if (v.contains("name")) meta.name = d.String(v["name"], "metadata.name").value_or("");
  if (v.contains("namespace")) {
    meta.namespace_ = d.String(v["namespace"], "metadata.namespace").value_or("");
  }
  if (v.contains("uid") && v["uid"].is_string()) meta.uid = v["uid"].get<std::string>();
  if (v.contains("resourceVersion") && v["resourceVersion"].is_string()) {
    meta.resource_version = v["resourceVersion"].get<std::string>();
  }
  if (v.contains("generation") && v["generation"].is_number_integer()) {
    meta.generation = v["generation"].get<int64_t>();
  }
  if (v.contains("labels")) meta.labels = StringMap(d, v["labels"], "metadata.labels");
  if (v.contains("annotations")) {
    meta.annotations = StringMap(d, v["annotations"], "metadata.annotations");
  }
  return meta;
}

ReplicaSpec DecodeReplicaSpec(Decoder& d, const json& v, const std::string& path) {
  ReplicaSpec spec;
  if (!d.Object(v, path)) return spec;
  d.Known(v, path, {"replicas", "restartPolicy", "template"});
  if (v.contains("replicas")) spec.replicas = d.Integer<int32_t>(v["replicas"], path + ".replicas");
  if (v.contains("restartPolicy")) {
    spec.restart_policy =
        d.OneOf<RestartPolicy>(v["restartPolicy"], path + ".restartPolicy", RestartPolicyNames());
  }
  if (v.contains("template") && d.Object(v["template"], path + ".template")) {
    spec.template_ = v["template"];
  } else if (v.contains("template")) {
    spec.template_ = nullptr;  // present but wrong type: validation must not report "required"
  }
  return spec;
}

SchedulingPolicy DecodeScheduling(Decoder& d, const json& v, const std::string& path) {
  SchedulingPolicy p;
  if (!d.Object(v, path)) return p;
  d.Known(v, path, {"minAvailable", "queue", "priorityClass"});
  if (v.contains("minAvailable")) {
    p.min_available = d.Integer<int32_t>(v["minAvailable"], path + ".minAvailable");
  }
  if (v.contains("queue")) p.queue = d.String(v["queue"], path + ".queue").value_or("");
  if (v.contains("priorityClass")) {
    p.priority_class = d.String(v["priorityClass"], path + ".priorityClass").value_or("");
  }
  return p;
}

RunPolicy DecodeRunPolicy(Decoder& d, const json& v) {
  const std::string path = "spec.runPolicy";
  RunPolicy p;
  if (!d.Object(v, path)) return p;
  d.Known(v, path,
          {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
           "restartScope", "suspend", "schedulingPolicy", "managedBy"});
  if (v.contains("cleanPodPolicy")) {
    p.clean_pod_policy = d.OneOf<CleanPodPolicy>(v["cleanPodPolicy"], path + ".cleanPodPolicy",
                                                 CleanPodPolicyNames());
  }
  if (v.contains("ttlSecondsAfterFinished")) {
    p.ttl_seconds_after_finished =
        d.Integer<int64_t>(v["ttlSecondsAfterFinished"], path + ".ttlSecondsAfterFinished");
  }
  if (v.contains("activeDeadlineSeconds")) {
    p.active_deadline_seconds =
        d.Integer<int64_t>(v["activeDeadlineSeconds"], path + ".activeDeadlineSeconds");
  }
  if (v.contains("backoffLimit")) {
    p.backoff_limit = d.Integer<int32_t>(v["backoffLimit"], path + ".backoffLimit");
  }
  if (v.contains("restartScope")) {
    p.restart_scope =
        d.OneOf<RestartScope>(v["restartScope"], path + ".restartScope", RestartScopeNames());
  }
  if (v.contains("suspend")) p.suspend = d.Bool(v["suspend"], path + ".suspend");
  if (v.contains("managedBy"))
    p.managed_by = d.String(v["managedBy"], path + ".managedBy").value_or("");
  if (v.contains("schedulingPolicy")) {
    p.scheduling_policy = DecodeScheduling(d, v["schedulingPolicy"], path + ".schedulingPolicy");
  }
  return p;
}

// nullopt when spec.elastic or one of its bounds has the wrong type (reported here): validation
// must not also call the bound "required".
std::optional<ElasticPolicy> DecodeElastic(Decoder& d, const json& v) {
  const std::string path = "spec.elastic";
  if (!d.Object(v, path)) return std::nullopt;
  d.Known(v, path, {"minReplicas", "maxReplicas"});
  ElasticPolicy e;
  bool typed = true;
  for (auto [key, out] :
       {std::pair{"minReplicas", &e.min_replicas}, std::pair{"maxReplicas", &e.max_replicas}}) {
    if (!v.contains(key)) continue;
    *out = d.Integer<int32_t>(v[key], path + "." + key);
    typed &= out->has_value();
  }
  if (!typed) return std::nullopt;
  return e;
}

std::string SuggestReplicaType(const std::string& key) {
  for (const std::string& name : ReplicaTypeNames()) {
    if (absl::AsciiStrToLower(name) == absl::AsciiStrToLower(key)) {
      return "; did you mean \"" + name + "\"?";
    }
  }
  return "";
}

TrainingJobSpec DecodeSpec(Decoder& d, const json& v) {
  TrainingJobSpec spec;
  if (!d.Object(v, "spec")) return spec;
  d.Known(v, "spec",
          {"replicaSpecs", "runPolicy", "successPolicy", "backupWorkers", "elastic", "checkpoint",
           "gradientCompression"});
  if (v.contains("replicaSpecs") && d.Object(v["replicaSpecs"], "spec.replicaSpecs")) {
    for (const auto& [key, value] : v["replicaSpecs"].items()) {
      const std::string path = "spec.replicaSpecs." + key;
      ReplicaType type;
      if (!Parse(key, &type)) {
        d.Error(path, "unknown replica type; allowed: " + absl::StrJoin(ReplicaTypeNames(), ", ") +
                          SuggestReplicaType(key));
        continue;
      }
      spec.replica_specs[type] = DecodeReplicaSpec(d, value, path);
    }
  }
  if (v.contains("runPolicy")) spec.run_policy = DecodeRunPolicy(d, v["runPolicy"]);
  if (v.contains("successPolicy")) {
    spec.success_policy =
        d.OneOf<SuccessPolicy>(v["successPolicy"], "spec.successPolicy", SuccessPolicyNames());
  }
  if (v.contains("backupWorkers")) {
    spec.backup_workers = d.Integer<int32_t>(v["backupWorkers"], "spec.backupWorkers");
  }
  if (v.contains("elastic")) spec.elastic = DecodeElastic(d, v["elastic"]);
  if (v.contains("checkpoint")) spec.checkpoint = d.Checkpoint(v["checkpoint"]);
  if (v.contains("gradientCompression")) {
    spec.gradient_compression = d.OneOf<GradientCompression>(
        v["gradientCompression"], "spec.gradientCompression", GradientCompressionNames());
  }
  return spec;
}

// Status is written by the operator through /status; read it without complaint.
// Integers must be JSON integers within T's range: nlohmann converts 1.2e33 to int by a cast
// whose result is undefined.
template <typename T>
void Read(const json& obj, const char* key, T* out) {
  if (!obj.is_object() || !obj.contains(key)) return;
  const json& v = obj[key];
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) *out = static_cast<T>(u);
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      if (std::in_range<T>(i)) *out = static_cast<T>(i);
    }
    return;
  }
  try {
    *out = v.get<T>();
  } catch (const json::exception&) {
  }
}

TrainingJobStatus DecodeStatus(const json& v) {
  TrainingJobStatus st;
  if (!v.is_object()) return st;
  if (v.contains("conditions") && v["conditions"].is_array()) {
    for (const json& c : v["conditions"]) {
      Condition cond;
      Read(c, "type", &cond.type);
      Read(c, "status", &cond.status);
      Read(c, "reason", &cond.reason);
      Read(c, "message", &cond.message);
      Read(c, "lastUpdateTime", &cond.last_update_time);
      Read(c, "lastTransitionTime", &cond.last_transition_time);
      st.conditions.push_back(std::move(cond));
    }
  }
  if (v.contains("replicaStatuses") && v["replicaStatuses"].is_object()) {
    for (const auto& [key, rs] : v["replicaStatuses"].items()) {
      ReplicaType type;
      if (!Parse(key, &type)) continue;
      ReplicaStatus& out = st.replica_statuses[type];
      Read(rs, "active", &out.active);
      Read(rs, "succeeded", &out.succeeded);
      Read(rs, "failed", &out.failed);
      Read(rs, "restarts", &out.restarts);
      Read(rs, "completedIndexes", &out.completed_indexes);
    }
  }
  Read(v, "startTime", &st.start_time);
  Read(v, "completionTime", &st.completion_time);
  Read(v, "lastReconcileTime", &st.last_reconcile_time);
  Read(v, "observedGeneration", &st.observed_generation);
  if (v.contains("countedFailures") && v["countedFailures"].is_array()) {
    for (const json& uid : v["countedFailures"]) {
      if (uid.is_string()) st.counted_failures.push_back(uid.get<std::string>());
    }
  }
  if (v.contains("elastic") && v["elastic"].is_object()) {
    ElasticStatus e;
    const json& ej = v["elastic"];
    Read(ej, "liveWorkers", &e.live_workers);
    Read(ej, "targetWorkers", &e.target_workers);
    Read(ej, "lastScaleTime", &e.last_scale_time);
    st.elastic = e;
  }
  if (v.contains("progress") && v["progress"].is_object()) {
    Progress p;
    const json& pj = v["progress"];
    Read(pj, "step", &p.step);
    Read(pj, "epoch", &p.epoch);
    Read(pj, "loss", &p.loss);
    Read(pj, "accuracy", &p.accuracy);
    Read(pj, "examplesPerSecond", &p.examples_per_second);
    st.progress = p;
  }
  return st;
}

}  // namespace

std::string StringField(const json& obj, const char* key, std::string fallback) {
  if (!obj.is_object()) return fallback;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return fallback;
  return it->get<std::string>();
}

std::string Describe(const json& value) {
  // Long values are cut so that one bad field cannot flood the terminal or an event.
  constexpr size_t kMax = 80;
  const bool quoted = value.is_string();
  std::string text = quoted ? value.get_ref<const std::string&>()
                            : value.dump(-1, ' ', false, json::error_handler_t::replace);
  const size_t size = text.size();
  if (size <= kMax) return quoted ? "\"" + text + "\"" : text;
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return absl::StrCat(quoted ? "\"" : "", text, quoted ? "\"" : "", "... (", size,
                      quoted ? " characters)" : " characters of JSON)");
}

TrainingJob Decode(const json& doc, FieldErrors* errors) {
  Decoder d(errors);
  TrainingJob job;
  if (!d.Object(doc, "")) return job;
  // Objects from the API server or built in code bypass the YAML reader's checks.
  if (absl::Status shape = CheckJsonShape(doc); !shape.ok()) {
    d.Error("", std::string(shape.message()));
    return job;
  }
  job.api_version.clear();
  job.kind.clear();
  if (doc.contains("apiVersion"))
    job.api_version = d.String(doc["apiVersion"], "apiVersion").value_or("");
  if (doc.contains("kind")) job.kind = d.String(doc["kind"], "kind").value_or("");
  if (doc.contains("metadata")) job.metadata = DecodeMeta(d, doc["metadata"]);
  if (doc.contains("spec")) job.spec = DecodeSpec(d, doc["spec"]);
  if (doc.contains("status")) job.status = DecodeStatus(doc["status"]);
  d.Known(doc, "", {"apiVersion", "kind", "metadata", "spec", "status"});
  return job;
}

namespace {

json ReplicaSpecJson(const ReplicaSpec& rs) {
  json out = json::object();
  if (rs.replicas) out["replicas"] = *rs.replicas;
  if (rs.restart_policy) out["restartPolicy"] = Name(*rs.restart_policy);
  if (rs.template_.is_object()) out["template"] = rs.template_;
  return out;
}

json RunPolicyJson(const RunPolicy& rp) {
  json out = json::object();
  if (rp.clean_pod_policy) out["cleanPodPolicy"] = Name(*rp.clean_pod_policy);
  if (rp.ttl_seconds_after_finished)
    out["ttlSecondsAfterFinished"] = *rp.ttl_seconds_after_finished;
  if (rp.active_deadline_seconds) out["activeDeadlineSeconds"] = *rp.active_deadline_seconds;
  if (rp.backoff_limit) out["backoffLimit"] = *rp.backoff_limit;
  if (rp.restart_scope) out["restartScope"] = Name(*rp.restart_scope);
  if (rp.suspend) out["suspend"] = *rp.suspend;
  if (!rp.managed_by.empty()) out["managedBy"] = rp.managed_by;
  if (rp.scheduling_policy) {
    json sp = json::object();
    const SchedulingPolicy& p = *rp.scheduling_policy;
    if (p.min_available) sp["minAvailable"] = *p.min_available;
    if (!p.queue.empty()) sp["queue"] = p.queue;
    if (!p.priority_class.empty()) sp["priorityClass"] = p.priority_class;
    out["schedulingPolicy"] = sp;
  }
  return out;
}

json MetaJson(const ObjectMeta& meta) {
  json out = meta.raw.is_object() ? meta.raw : json::object();
  if (!meta.name.empty()) out["name"] = meta.name;
  if (!meta.namespace_.empty()) out["namespace"] = meta.namespace_;
  if (!meta.labels.empty()) out["labels"] = meta.labels;
  if (!meta.annotations.empty()) out["annotations"] = meta.annotations;
  return out;
}

}  // namespace

json ToJson(const TrainingJobSpec& spec) {
  json out = json::object();
  json replicas = json::object();
  for (const auto& [type, rs] : spec.replica_specs) replicas[Name(type)] = ReplicaSpecJson(rs);
  out["replicaSpecs"] = replicas;
  json rp = RunPolicyJson(spec.run_policy);
  if (!rp.empty()) out["runPolicy"] = rp;
  if (spec.success_policy) out["successPolicy"] = Name(*spec.success_policy);
  if (spec.backup_workers) out["backupWorkers"] = *spec.backup_workers;
  if (spec.elastic) {
    json elastic = json::object();
    if (spec.elastic->min_replicas) elastic["minReplicas"] = *spec.elastic->min_replicas;
    if (spec.elastic->max_replicas) elastic["maxReplicas"] = *spec.elastic->max_replicas;
    out["elastic"] = elastic;
  }
  if (spec.checkpoint) out["checkpoint"] = ToJson(*spec.checkpoint);
  if (spec.gradient_compression) out["gradientCompression"] = Name(*spec.gradient_compression);
  return out;
}

json ToJson(const TrainingJobStatus& st) {
  json out = json::object();
  if (!st.conditions.empty()) {
    json conds = json::array();
    for (const Condition& c : st.conditions) {
      json cj = {{"type", c.type}, {"status", c.status}};
      if (!c.reason.empty()) cj["reason"] = c.reason;
      if (!c.message.empty()) cj["message"] = c.message;
      if (!c.last_update_time.empty()) cj["lastUpdateTime"] = c.last_update_time;
      if (!c.last_transition_time.empty()) cj["lastTransitionTime"] = c.last_transition_time;
      conds.push_back(cj);
    }
    out["conditions"] = conds;
  }
  if (!st.replica_statuses.empty()) {
    json rs = json::object();
    for (const auto& [type, s] : st.replica_statuses) {
      rs[Name(type)] = {{"active", s.active},
                        {"succeeded", s.succeeded},
                        {"failed", s.failed},
                        {"restarts", s.restarts}};
      if (!s.completed_indexes.empty()) rs[Name(type)]["completedIndexes"] = s.completed_indexes;
    }
    out["replicaStatuses"] = rs;
  }
  if (!st.start_time.empty()) out["startTime"] = st.start_time;
  if (!st.completion_time.empty()) out["completionTime"] = st.completion_time;
  if (!st.last_reconcile_time.empty()) out["lastReconcileTime"] = st.last_reconcile_time;
  if (st.observed_generation) out["observedGeneration"] = st.observed_generation;
  if (!st.counted_failures.empty()) out["countedFailures"] = st.counted_failures;
  if (st.elastic) {
    out["elastic"] = {{"liveWorkers", st.elastic->live_workers},
                      {"targetWorkers", st.elastic->target_workers}};
    if (!st.elastic->last_scale_time.empty()) {
      out["elastic"]["lastScaleTime"] = st.elastic->last_scale_time;
    }
  }
  if (st.progress) {
    const Progress& p = *st.progress;
    out["progress"] = {{"step", p.step},
                       {"epoch", p.epoch},
                       {"loss", p.loss},
                       {"accuracy", p.accuracy},
                       {"examplesPerSecond", p.examples_per_second}};
  }
  return out;
}

json ToJson(const TrainingJob& job) {
  json out = {{"apiVersion", job.api_version}, {"kind", job.kind}};
  out["metadata"] = MetaJson(job.metadata);
  out["spec"] = ToJson(job.spec);
  json st = ToJson(job.status);
  if (!st.empty()) out["status"] = st;
  return out;
}

}  // namespace kubetrain::api
