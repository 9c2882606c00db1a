// PodDisruptionBudget status and the Eviction subresource (see disruption.h).
#include "localkube/disruption.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "localkube/errors.h"
#include "localkube/kinds.h"
#include "localkube/object_meta.h"
#include "localkube/workload_objects.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// The disruption controller forgets a disrupted pod that was not deleted within this long.
constexpr absl::Duration kDisruptionTimeout = absl::Minutes(2);

std::optional<absl::Time> ParseTimestamp(const json& value) {
  absl::Time t;
  if (!value.is_string() ||
      !absl::ParseTime(absl::RFC3339_full, value.get<std::string>(), &t, nullptr)) {
    return std::nullopt;
  }
  return t;
}

// An IntOrString as a count out of `total`: percentages scaled and rounded up, as
// intstr.GetScaledValueFromIntOrPercent(roundUp=true). Nullopt for a malformed value.
std::optional<int64_t> Scaled(const json& v, int64_t total) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_string()) return std::nullopt;
  std::string s = v;
  int64_t pct = 0;
  if (!absl::EndsWith(s, "%") || !absl::SimpleAtoi(s.substr(0, s.size() - 1), &pct)) {
    return std::nullopt;
  }
  return static_cast<int64_t>(std::ceil(static_cast<double>(pct) * total / 100.0));
}

bool IsPercent(const json& v) { return v.is_string(); }

std::optional<json> ControllerRef(const json& object) {
  for (const json& ref : Meta(object).value("ownerReferences", json::array())) {
    if (ref.value("controller", false)) return ref;
  }
  return std::nullopt;
}

// The replicas of the scalable controller of `pod` (by uid into `seen`, so each controller
// counts once); nullopt when it has none the disruption controller's finders know.
std::optional<int64_t> ControllerReplicas(const Store& store, const json& pod,
                                          std::set<std::string>* seen, std::string* error) {
  std::optional<json> ref = ControllerRef(pod);
  std::string ns = NamespaceOf(pod);
  auto replicas = [](const json& o) -> int64_t {
    return o.value("spec", json::object()).value("replicas", int64_t{1});
  };
  if (ref && ref->value("kind", "") == "ReplicaSet") {
    auto rs = store.Get(kReplicaSetsKey, ns, ref->value("name", ""));
    if (rs && UidOf(*rs) == ref->value("uid", "")) {
      std::optional<json> owner = ControllerRef(*rs);
      if (owner && owner->value("kind", "") == "Deployment") {
        auto d = store.Get(kDeploymentsKey, ns, owner->value("name", ""));
        if (d && UidOf(*d) == owner->value("uid", "")) {
          return seen->insert(UidOf(*d)).second ? replicas(*d) : 0;
        }
      } else {
        return seen->insert(UidOf(*rs)).second ? replicas(*rs) : 0;
      }
    }
  } else if (ref && ref->value("kind", "") == "StatefulSet") {
    auto sts = store.Get("apps/statefulsets", ns, ref->value("name", ""));
    if (sts && UidOf(*sts) == ref->value("uid", "")) {
      return seen->insert(UidOf(*sts)).second ? replicas(*sts) : 0;
    }
  }
  *error = absl::StrCat("found no controllers for pod \"", NameOf(pod), "\"");
  return std::nullopt;
}

json AllowedCondition(bool allowed, const std::string& reason, const std::string& message,
                      const json& old_status, int64_t generation) {
  std::string transition = NowTimestamp();
  for (const json& c : old_status.value("conditions", json::array())) {
    if (c.value("type", "") == "DisruptionAllowed" &&
        c.value("status", "") == (allowed ? "True" : "False")) {
      transition = c.value("lastTransitionTime", transition);
    }
  }
  return {{"type", "DisruptionAllowed"},
          {"status", allowed ? "True" : "False"},
          {"reason", reason},
          {"message", message},
          {"observedGeneration", generation},
          {"lastTransitionTime", transition}};
}

bool Terminal(const json& pod) {
  std::string phase = pod.value("status", json::object()).value("phase", "");
  return phase == "Succeeded" || phase == "Failed";
}

}  // namespace

bool LabelSelectorMatches(const json& selector, const json& labels) {
  if (!selector.is_object()) return false;
  auto label = [&](const std::string& key) -> std::optional<std::string> {
    if (!labels.is_object() || !labels.contains(key) || !labels[key].is_string()) {
      return std::nullopt;
    }
    return labels[key].get<std::string>();
  };
  const json match_labels = selector.value("matchLabels", json::object());
  for (const auto& [key, value] : match_labels.items()) {
    if (!value.is_string() || label(key) != value.get<std::string>()) return false;
  }
  for (const json& e : selector.value("matchExpressions", json::array())) {
    std::optional<std::string> have = label(e.value("key", ""));
    std::string op = e.value("operator", "");
    json values = e.value("values", json::array());
    bool in = have && std::find(values.begin(), values.end(), *have) != values.end();
    if ((op == "In" && !in) || (op == "NotIn" && in) || (op == "Exists" && !have) ||
        (op == "DoesNotExist" && have)) {
      return false;
    }
  }
  return true;
}

bool PodReady(const json& pod) {
  for (const json& c : pod.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

json DisruptionBudgetStatus(const Store& store, const json& pdb, absl::Time now) {
  const json spec = pdb.value("spec", json::object());
  const json old = pdb.value("status", json::object());
  const int64_t generation = Meta(pdb).value("generation", int64_t{1});
  std::vector<json> pods;
  int64_t ignored = 0;
  for (json& pod : store.List(kPodsKey, NamespaceOf(pdb), &ignored)) {
    if (LabelSelectorMatches(spec.value("selector", json()),
                             Meta(pod).value("labels", json::object()))) {
      pods.push_back(std::move(pod));
    }
  }
  // disruptedPods that still stand: the pod is there, not deleting, disrupted recently.
  json disrupted = json::object();
  const json old_disrupted = old.value("disruptedPods", json::object());
  for (const json& pod : pods) {
    if (IsDeleting(pod) || !old_disrupted.contains(NameOf(pod))) continue;
    std::optional<absl::Time> at = ParseTimestamp(old_disrupted[NameOf(pod)]);
    if (at && *at + kDisruptionTimeout > now) disrupted[NameOf(pod)] = old_disrupted[NameOf(pod)];
  }
  int64_t healthy = 0;
  for (const json& pod : pods) {
    if (!IsDeleting(pod) && PodReady(pod) && !disrupted.contains(NameOf(pod))) ++healthy;
  }
  std::string error;
  std::optional<int64_t> expected, desired;
  const json min_available = spec.value("minAvailable", json());
  const json max_unavailable = spec.value("maxUnavailable", json());
  if (min_available.is_number_integer()) {
    expected = static_cast<int64_t>(pods.size());
    desired = min_available.get<int64_t>();
  } else if (IsPercent(min_available) || !max_unavailable.is_null()) {
    std::set<std::string> seen;
    int64_t total = 0;
    for (const json& pod : pods) {
      std::optional<int64_t> r = ControllerReplicas(store, pod, &seen, &error);
      if (!r) break;
      total += *r;
    }
    if (error.empty()) {
      expected = total;
      if (!max_unavailable.is_null()) {
        std::optional<int64_t> max = Scaled(max_unavailable, total);
        if (max) desired = std::max<int64_t>(0, total - *max);
      } else {
        desired = Scaled(min_available, total);
      }
      if (!desired) error = "invalid minAvailable or maxUnavailable";
    }
  } else {
    expected = static_cast<int64_t>(pods.size());
    desired = 0;
  }
  json status = {{"observedGeneration", generation},
                 {"disruptedPods", disrupted},
                 {"currentHealthy", healthy}};
  if (!error.empty()) {
    // failSafe: no disruption allowed while the budget cannot be computed.
    status["disruptionsAllowed"] = 0;
    status["desiredHealthy"] = old.value("desiredHealthy", 0);
    status["expectedPods"] = old.value("expectedPods", 0);
    // json::array: a braced list of one json is a copy of it under clang, an array under GCC.
    status["conditions"] =
        json::array({AllowedCondition(false, "SyncFailed", error, old, generation)});
    return status;
  }
  int64_t allowed = *expected > 0 ? std::max<int64_t>(0, healthy - *desired) : 0;
  status["desiredHealthy"] = *desired;
  status["expectedPods"] = *expected;
  status["disruptionsAllowed"] = allowed;
  status["conditions"] =
      json::array({allowed > 0 ? AllowedCondition(true, "SufficientPods", "", old, generation)
                               : AllowedCondition(false, "InsufficientPods", "", old, generation)});
  return status;
}

absl::StatusOr<json> EvictPod(Api* api, const std::string& ns, const std::string& name,
                              const json& eviction, bool dry_run) {
  if (!eviction.is_object()) return BadRequestError("the body of the request must be an object");
  std::string kind = eviction.value("kind", "Eviction");
  std::string api_version = eviction.value("apiVersion", "policy/v1");
  if (kind != "Eviction" || (api_version != "policy/v1" && api_version != "policy/v1beta1")) {
    return BadRequestError(absl::StrCat("the body of the request was of kind ", api_version, "/",
                                        kind, "; pods/eviction takes policy/v1 Eviction"));
  }
  if (Meta(eviction).value("name", "") != name) {
    return BadRequestError("name in URL does not match name in Eviction object");
  }
  const json delete_body = eviction.value("deleteOptions", json::object());
  DeleteOptions options;
  if (delete_body.contains("gracePeriodSeconds") && delete_body["gracePeriodSeconds"].is_number()) {
    options.grace_seconds = delete_body["gracePeriodSeconds"].get<int64_t>();
  }
  options.propagation = delete_body.value("propagationPolicy", "");
  const json preconditions = delete_body.value("preconditions", json::object());
  options.precondition_uid = preconditions.value("uid", "");
  options.precondition_rv = preconditions.value("resourceVersion", "");
  options.dry_run = dry_run || delete_body.contains("dryRun");

  ResourceTypePtr pods = api->registry()->Find("", "v1", "pods");
  std::optional<json> pod = api->store()->Get(kPodsKey, ns, name);
  if (!pod) return NotFoundError("pods", name);
  const std::string phase = pod->value("status", json::object()).value("phase", "");
  // canIgnorePDB: the pod has already stopped serving (or never started), or is going.
  const bool ignore_budgets = Terminal(*pod) || phase == "Pending" || IsDeleting(*pod);
  if (!ignore_budgets) {
    std::vector<json> budgets;
    int64_t ignored = 0;
    for (json& pdb : api->store()->List(kPdbsKey, ns, &ignored)) {
      // The eviction handler lets a nil or empty selector match nothing.
      const json selector = pdb.value("spec", json::object()).value("selector", json());
      bool empty =
          !selector.is_object() || (selector.value("matchLabels", json::object()).empty() &&
                                    selector.value("matchExpressions", json::array()).empty());
      if (!empty && LabelSelectorMatches(selector, Meta(*pod).value("labels", json::object()))) {
        budgets.push_back(std::move(pdb));
      }
    }
    if (budgets.size() > 1) {
      return ApiError(500, "InternalError",
                      "This pod has more than one PodDisruptionBudget, which the eviction "
                      "subresource does not support.");
    }
    if (budgets.size() == 1) {
      absl::Status refused;
      absl::Status written = api->Mutate(kPdbsKey, ns, NameOf(budgets[0]), [&](json& pdb) {
        json status = DisruptionBudgetStatus(*api->store(), pdb, absl::Now());
        const int64_t desired = status.value("desiredHealthy", int64_t{0});
        const int64_t current = status.value("currentHealthy", int64_t{0});
        // IfHealthyBudget: an unready pod goes without counting once the budget is met.
        if (!PodReady(*pod) && current >= desired && desired > 0) {
          pdb["status"] = status;
          return true;
        }
        int64_t allowed = status.value("disruptionsAllowed", int64_t{0});
        if (allowed <= 0) {
          refused =
              ApiError(429, "TooManyRequests",
                       "Cannot evict pod as it would violate the pod's disruption budget.",
                       {{"retryAfterSeconds", 0},
                        {"causes",
                         {{{"reason", "DisruptionBudget"},
                           {"message",
                            absl::StrCat("The disruption budget ", NameOf(pdb), " needs ", desired,
                                         " healthy pods and has ", current, " currently")}}}}});
          pdb["status"] = status;
          return true;
        }
        if (options.dry_run) return false;
        status["disruptionsAllowed"] = allowed - 1;
        if (allowed - 1 == 0) {
          status["conditions"] = {{{"type", "DisruptionAllowed"},
                                   {"status", "False"},
                                   {"reason", "InsufficientPods"},
                                   {"message", ""},
                                   {"observedGeneration", status["observedGeneration"]},
                                   {"lastTransitionTime", NowTimestamp()}}};
        }
        status["disruptedPods"][name] = KubeTime(absl::Now());
        pdb["status"] = status;
        return true;
      });
      if (!refused.ok()) return refused;
      if (!written.ok()) return NotFoundError("poddisruptionbudgets.policy", NameOf(budgets[0]));
    }
  }
  if (!options.dry_run) {
    // addConditionAndDeletePod: the DisruptionTarget condition, then the delete.
    if (!options.precondition_uid.empty() && options.precondition_uid != UidOf(*pod)) {
      return api->Delete(Target{pods, ns, name, ""}, options);  // answers the Conflict
    }
    const bool rv_precondition = !options.precondition_rv.empty();
    if (rv_precondition && options.precondition_rv != Meta(*pod).value("resourceVersion", "")) {
      return api->Delete(Target{pods, ns, name, ""}, options);  // answers the Conflict
    }
    (void)api->Mutate(kPodsKey, ns, name, [&](json& live) {
      json& conditions = live["status"]["conditions"];
      if (!conditions.is_array()) conditions = json::array();
      for (const json& c : conditions) {
        if (c.value("type", "") == "DisruptionTarget" && c.value("status", "") == "True") {
          return false;
        }
      }
      conditions.push_back({{"type", "DisruptionTarget"},
                            {"status", "True"},
                            {"reason", "EvictionByEvictionAPI"},
                            {"message", "Eviction API: evicting"},
                            {"lastProbeTime", nullptr},
                            {"lastTransitionTime", NowTimestamp()}});
      return true;
    });
    if (rv_precondition) {
      if (auto now = api->store()->Get(kPodsKey, ns, name)) {
        options.precondition_rv = Meta(*now).value("resourceVersion", "");
      }
    }
  }
  absl::StatusOr<json> deleted = api->Delete(Target{pods, ns, name, ""}, options);
  if (!deleted.ok()) return deleted.status();
  return CreatedStatus();
}

}  // namespace kubetrain::localkube
