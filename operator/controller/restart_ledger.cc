#include "operator/controller/restart_ledger.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "operator/kube/client.h"

namespace kubetrain::controller {

using nlohmann::json;

namespace {

// The value of annotation `key` as JSON; nullopt when absent or not JSON (logged).
std::optional<json> Annotation(const json& job, const char* key) {
  const json& meta = job.value("metadata", json::object());
  const json annotations = meta.value("annotations", json::object());
  if (!annotations.is_object() || !annotations.contains(key)) return std::nullopt;
  const json& value = annotations[key];
  json parsed = value.is_string() ? json::parse(value.get<std::string>(), nullptr, false)
                                  : json(json::value_t::discarded);
  if (parsed.is_discarded()) {
    log::Warn(
        "Ignoring an annotation that is not JSON",
        {{"job", meta.value("namespace", "") + "/" + meta.value("name", "")}, {"annotation", key}});
    return std::nullopt;
  }
  return parsed;
}

}  // namespace

std::map<std::string, std::string> LedgerAnnotations(
    const api::TrainingJobStatus& status, const std::map<std::string, api::TaskBackoff>& backoff,
    bool whole_ledger) {
  std::map<std::string, std::string> out;
  json b = json::object();
  for (const auto& [key, record] : backoff) {
    b[key] = {{"failures", record.failures},
              {"lastFailure", kube::FormatTime(record.last_failure)}};
  }
  out[kBackoffAnnotation] = b.empty() ? "" : b.dump();
  if (!whole_ledger) return out;
  json restarts = json::object();
  json completed = json::object();
  for (const auto& [type, rs] : status.replica_statuses) {
    if (rs.restarts > 0) restarts[api::Name(type)] = rs.restarts;
    if (!rs.completed_indexes.empty()) completed[api::Name(type)] = rs.completed_indexes;
  }
  out[kRestartsAnnotation] = restarts.empty() ? "" : restarts.dump();
  out[kCompletedIndexesAnnotation] = completed.empty() ? "" : completed.dump();
  out[kCountedFailuresAnnotation] =
      status.counted_failures.empty() ? "" : json(status.counted_failures).dump();
  return out;
}

void ReadLedgerAnnotations(const json& job, bool whole_ledger, api::TrainingJobStatus* status,
                           std::map<std::string, api::TaskBackoff>* backoff) {
  backoff->clear();
  if (std::optional<json> b = Annotation(job, kBackoffAnnotation); b && b->is_object()) {
    for (const auto& [key, record] : b->items()) {
      if (!record.is_object() || !record.value("failures", json()).is_number_integer()) continue;
      absl::Time last = kube::ParseTime(record.value("lastFailure", ""));
      if (last == absl::InfinitePast()) continue;
      (*backoff)[key] = {.failures = record["failures"].get<int>(), .last_failure = last};
    }
  }
  if (!whole_ledger) return;
  auto by_type = [&](const char* key, auto apply) {
    std::optional<json> value = Annotation(job, key);
    if (!value || !value->is_object()) return;
    for (auto& [type, rs] : status->replica_statuses) apply(rs, json());  // absent: zero
    for (const auto& [name, v] : value->items()) {
      api::ReplicaType type;
      if (api::Parse(name, &type)) apply(status->replica_statuses[type], v);
    }
  };
  by_type(kRestartsAnnotation, [](api::ReplicaStatus& rs, const json& v) {
    rs.restarts = v.is_number_integer() ? v.get<int32_t>() : 0;
  });
  by_type(kCompletedIndexesAnnotation, [](api::ReplicaStatus& rs, const json& v) {
    rs.completed_indexes = v.is_string() ? v.get<std::string>() : "";
  });
  if (std::optional<json> counted = Annotation(job, kCountedFailuresAnnotation);
      counted && counted->is_array()) {
    status->counted_failures.clear();
    for (const json& uid : *counted) {
      if (uid.is_string()) status->counted_failures.push_back(uid.get<std::string>());
    }
  }
}

std::optional<json> LedgerPatch(const json& job, const std::map<std::string, std::string>& want) {
  const json& meta = job.value("metadata", json::object());
  const json annotations = meta.value("annotations", json::object());
  json patch = json::object();
  for (const auto& [key, value] : want) {
    const bool has = annotations.is_object() && annotations.contains(key);
    if (value.empty()) {
      if (has) patch[key] = nullptr;
    } else if (!has || annotations[key] != value) {
      patch[key] = value;
    }
  }
  if (patch.empty()) return std::nullopt;
  return json{{"metadata",
               {{"annotations", patch}, {"resourceVersion", meta.value("resourceVersion", "")}}}};
}

std::vector<std::string> DescribePauses(const api::JobDecision& decision,
                                        const std::map<std::string, api::TaskBackoff>& backoff,
                                        const api::RestartBackoff& policy) {
  std::vector<std::string> pauses;
  for (const api::TaskState& t : decision.restarted) {
    const std::string key = decision.whole_job ? api::kJobBackoffKey : api::BackoffKey(t);
    auto b = backoff.find(key);
    if (b != backoff.end()) {
      const int failures = b->second.failures;
      pauses.push_back(absl::StrCat("restarting ", decision.whole_job ? "the job" : key, " in ",
                                    absl::FormatDuration(api::BackoffDelay(policy, failures)),
                                    " (back-off after ", failures,
                                    failures == 1 ? " failure)" : " failures)"));
    }
    if (decision.whole_job) break;  // one pause for the whole job
  }
  return pauses;
}

}  // namespace kubetrain::controller
