#include "localkube/workload_objects.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "localkube/json_fields.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

int64_t IntField(const json& object, const char* key, int64_t fallback) {
  const json& v = Field(object, key);
  return v.is_number_integer() ? v.get<int64_t>() : fallback;
}

std::string ControllerUid(const json& object) {
  const json& refs = Field(Meta(object), "ownerReferences");
  if (!refs.is_array()) return "";
  for (const json& r : refs) {
    if (Field(r, "controller") == true && Field(r, "uid").is_string()) return r["uid"];
  }
  return "";
}

json ControllerRef(const json& owner, const std::string& kind) {
  return json::array({{{"apiVersion", "apps/v1"},
                       {"kind", kind},
                       {"name", NameOf(owner)},
                       {"uid", UidOf(owner)},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

int64_t ReplicaSetRevision(const json& replicaset) {
  const json& annotations = Field(Meta(replicaset), "annotations");
  int64_t revision = 0;
  const json& r = Field(annotations, kRevisionAnnotation);
  if (r.is_string()) (void)absl::SimpleAtoi(r.get<std::string>(), &revision);
  return revision;
}

bool PodActive(const json& pod) {
  std::string phase = Field(Field(pod, "status"), "phase").is_string()
                          ? pod["status"]["phase"].get<std::string>()
                          : "";
  return !IsDeleting(pod) && phase != "Succeeded" && phase != "Failed";
}

bool PodReady(const json& pod, absl::Time* since) {
  const json& conditions = Field(Field(pod, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (Field(c, "type") != "Ready") continue;
    if (Field(c, "status") != "True") return false;
    absl::Time t = absl::InfinitePast();
    const json& at = Field(c, "lastTransitionTime");
    if (at.is_string())
      (void)absl::ParseTime(absl::RFC3339_full, at.get<std::string>(), &t, nullptr);
    if (since) *since = t;
    return true;
  }
  return false;
}

bool PodAvailable(const json& pod, int64_t min_ready_seconds, absl::Time now) {
  absl::Time since;
  if (!PodReady(pod, &since)) return false;
  return min_ready_seconds <= 0 || since + absl::Seconds(min_ready_seconds) <= now;
}

void SetCondition(json* conditions, json condition, const std::string& now) {
  if (!conditions->is_array()) *conditions = json::array();
  for (json& c : *conditions) {
    if (Field(c, "type") != condition["type"]) continue;
    bool same_status = Field(c, "status") == condition["status"];
    bool same = same_status && Field(c, "reason") == condition["reason"] &&
                Field(c, "message") == condition["message"];
    condition["lastTransitionTime"] = same_status && Field(c, "lastTransitionTime").is_string()
                                          ? c["lastTransitionTime"]
                                          : json(now);
    if (condition.contains("lastUpdateTime")) {
      condition["lastUpdateTime"] =
          same && Field(c, "lastUpdateTime").is_string() ? c["lastUpdateTime"] : json(now);
    }
    c = std::move(condition);
    return;
  }
  condition["lastTransitionTime"] = now;
  if (condition.contains("lastUpdateTime")) condition["lastUpdateTime"] = now;
  conditions->push_back(std::move(condition));
}

void RemoveCondition(json* conditions, const std::string& type) {
  if (!conditions->is_array()) return;
  conditions->erase(std::remove_if(conditions->begin(), conditions->end(),
                                   [&](const json& c) { return Field(c, "type") == type; }),
                    conditions->end());
}

}  // namespace kubetrain::localkube
