// pods/binding (see binding.h).
#include "localkube/binding.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "localkube/errors.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

absl::StatusOr<json> BindPod(Api& api, const std::string& ns, const std::string& name,
                             const json& binding, bool dry_run) {
  if (!binding.is_object()) return BadRequestError("not a Binding object");
  json meta = binding.value("metadata", json::object());
  if (!meta.is_object() || meta.value("name", "") != name) {
    return BadRequestError("name in URL does not match name in Binding object");
  }
  json target = binding.value("target", json::object());
  if (!target.is_object()) target = json::object();
  std::vector<std::string> errors;
  std::string kind = target.value("kind", "");
  if (!kind.empty() && kind != "Node") {
    errors.push_back(absl::StrCat("target.kind: Unsupported value: \"", kind,
                                  "\": supported values: \"Node\", \"<empty>\""));
  }
  std::string node = target.value("name", "");
  if (node.empty()) errors.push_back("target.name: Required value");
  if (!errors.empty()) {
    std::string message =
        errors.size() == 1 ? errors[0] : absl::StrCat("[", absl::StrJoin(errors, ", "), "]");
    return ApiError(500, "", message);
  }
  std::string uid = meta.value("uid", "");
  json annotations = meta.value("annotations", json::object());
  absl::Status refused;
  absl::Status found = api.Mutate(kPodsKey, ns, name, [&](json& pod) {
    json& pod_meta = pod["metadata"];
    const json& spec = pod["spec"];
    auto conflict = [&](const std::string& why) {
      refused = ApiError(
          409, "Conflict",
          absl::StrCat("Operation cannot be fulfilled on pods/binding \"", name, "\": ", why),
          {{"name", name}, {"kind", "pods/binding"}});
      return false;
    };
    if (!uid.empty() && pod_meta.value("uid", "") != uid) {
      return conflict(absl::StrCat("Precondition failed: UID in precondition: ", uid,
                                   ", UID in object meta: ", pod_meta.value("uid", "")));
    }
    if (pod_meta.contains("deletionTimestamp")) {
      return conflict(
          absl::StrCat("pod ", name, " is being deleted, cannot be assigned to a host"));
    }
    std::string bound = spec.value("nodeName", "");
    if (!bound.empty()) {
      return conflict(absl::StrCat("pod ", name, " is already assigned to node \"", bound, "\""));
    }
    if (spec.contains("schedulingGates") && spec["schedulingGates"].is_array() &&
        !spec["schedulingGates"].empty()) {
      return conflict(absl::StrCat("pod ", name, " has non-empty .spec.schedulingGates"));
    }
    if (dry_run) return false;
    pod["spec"]["nodeName"] = node;
    if (annotations.is_object()) {
      for (auto it = annotations.begin(); it != annotations.end(); ++it) {
        pod_meta["annotations"][it.key()] = it.value();
      }
    }
    // PodScheduled=True, its transition time kept when it was already True.
    json& status = pod["status"];
    if (!status.is_object()) status = json::object();
    json conditions = status.value("conditions", json::array());
    if (!conditions.is_array()) conditions = json::array();
    bool updated = false;
    for (json& c : conditions) {
      if (!c.is_object() || c.value("type", "") != "PodScheduled") continue;
      if (c.value("status", "") != "True") {
        c["lastTransitionTime"] = NowTimestamp();
        c.erase("reason");
        c.erase("message");
      }
      c["status"] = "True";
      c["lastProbeTime"] = nullptr;
      updated = true;
    }
    if (!updated) {
      conditions.push_back({{"type", "PodScheduled"},
                            {"status", "True"},
                            {"lastProbeTime", nullptr},
                            {"lastTransitionTime", NowTimestamp()}});
    }
    status["conditions"] = conditions;
    return true;
  });
  if (absl::IsNotFound(found)) return NotFoundError("pods", name);
  if (!found.ok()) return found;
  if (!refused.ok()) return refused;
  return CreatedStatus();
}

}  // namespace kubetrain::localkube
