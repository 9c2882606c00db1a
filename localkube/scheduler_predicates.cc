// The scheduler's filters, score and messages (see scheduler_predicates.h). The wording of each
// refusal is kube-scheduler's (v1.33) plug-ins'.
#include "localkube/scheduler_predicates.h"

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "localkube/json_fields.h"
#include "localkube/quantity.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 4;
constexpr int64_t kDefaultMilliCpu = 100;                // scheduler's non-zero default
constexpr int64_t kDefaultMemory = 200LL * 1024 * 1024;  // 200Mi

void AddResources(Resources& to, const Resources& from) {
  for (const auto& [k, v] : from) to[k] = std::min(kMax, to[k] + v);
}

// One container's requests, its limits standing for requests it leaves out.
Resources ContainerRequests(const json& container) {
  Resources out;
  const json& resources = Field(container, "resources");
  for (const char* part : {"limits", "requests"}) {  // requests win
    const json& list = Field(resources, part);
    if (!list.is_object()) continue;
    for (auto it = list.begin(); it != list.end(); ++it) {
      out[it.key()] = ResourceAmount(it.key(), it.value());
    }
  }
  return out;
}

bool LabelMatches(const json& labels, const json& requirement) {
  std::string key = Str(requirement, "key");
  std::string op = Str(requirement, "operator");
  const json& values = Field(requirement, "values");
  bool has = labels.is_object() && labels.contains(key) && labels[key].is_string();
  std::string value = has ? labels[key].get<std::string>() : "";
  auto in_values = [&] {
    if (!values.is_array()) return false;
    for (const json& v : values) {
      if (v.is_string() && v.get<std::string>() == value) return true;
    }
    return false;
  };
  if (op == "In") return has && in_values();
  if (op == "NotIn") return !has || !in_values();
  if (op == "Exists") return has;
  if (op == "DoesNotExist") return !has;
  if (op == "Gt" || op == "Lt") {
    int64_t have = 0, want = 0;
    if (!has || !values.is_array() || values.size() != 1 || !values[0].is_string() ||
        !absl::SimpleAtoi(value, &have) || !absl::SimpleAtoi(values[0].get<std::string>(), &want)) {
      return false;
    }
    return op == "Gt" ? have > want : have < want;
  }
  return false;
}

// One nodeSelectorTerm: every expression and field requirement holds; an empty term matches
// no node.
bool TermMatches(const json& term, const json& node) {
  const json& exprs = Field(term, "matchExpressions");
  const json& fields = Field(term, "matchFields");
  bool any = false;
  const json& labels = Field(Field(node, "metadata"), "labels");
  if (exprs.is_array()) {
    for (const json& e : exprs) {
      any = true;
      if (!LabelMatches(labels, e)) return false;
    }
  }
  if (fields.is_array()) {
    json node_fields = {{"metadata.name", Str(Field(node, "metadata"), "name")}};
    for (const json& f : fields) {
      any = true;
      if (Str(f, "key") != "metadata.name") return false;
      if (!LabelMatches(node_fields, f)) return false;
    }
  }
  return any;
}

bool TolerationMatches(const json& t, const json& taint) {
  std::string effect = Str(t, "effect");
  if (!effect.empty() && effect != Str(taint, "effect")) return false;
  std::string key = Str(t, "key");
  std::string op = Str(t, "operator");
  if (op.empty()) op = "Equal";
  if (op == "Exists") return key.empty() || key == Str(taint, "key");
  return op == "Equal" && key == Str(taint, "key") && Str(t, "value") == Str(taint, "value");
}

// A scalar amount in the unit the score compares (cpu milli, memory bytes), with the
// scheduler's defaults for containers that request nothing.
Resources NonZeroRequests(const json& pod) {
  Resources out;
  const json& spec = Field(pod, "spec");
  const json& containers = Field(spec, "containers");
  if (containers.is_array()) {
    for (const json& c : containers) {
      Resources r = ContainerRequests(c);
      out["cpu"] += r.contains("cpu") ? r["cpu"] : kDefaultMilliCpu;
      out["memory"] += r.contains("memory") ? r["memory"] : kDefaultMemory;
    }
  }
  return out;
}

}  // namespace

int64_t ResourceAmount(const std::string& resource, const json& quantity) {
  std::string text;
  if (quantity.is_string()) {
    text = quantity.get<std::string>();
  } else if (quantity.is_number()) {
    text = quantity.dump();
  } else {
    return 0;
  }
  absl::StatusOr<Quantity> q = ParseQuantity(text);
  if (!q.ok() || q->negative) return 0;
  // digits x 10^(exponent + 3 for cpu's millicores), rounded up.
  int exponent = q->exponent + (resource == "cpu" ? 3 : 0);
  const std::string& digits = q->digits;
  int keep = static_cast<int>(digits.size()) + std::min(exponent, 0);
  if (keep <= 0) return digits == "0" ? 0 : 1;
  if (keep + std::max(exponent, 0) > 18) return kMax;
  int64_t value = 0;
  for (int i = 0; i < keep; ++i) value = value * 10 + (digits[i] - '0');
  for (int i = 0; i < exponent; ++i) value *= 10;
  bool remainder = digits.find_first_not_of('0', keep) != std::string::npos;
  return value + (remainder ? 1 : 0);
}

Resources PodRequests(const json& pod) {
  const json& spec = Field(pod, "spec");
  Resources sum;
  const json& containers = Field(spec, "containers");
  if (containers.is_array()) {
    for (const json& c : containers) AddResources(sum, ContainerRequests(c));
  }
  const json& init = Field(spec, "initContainers");
  if (init.is_array()) {
    for (const json& c : init) {
      for (const auto& [k, v] : ContainerRequests(c)) sum[k] = std::max(sum[k], v);
    }
  }
  const json& overhead = Field(spec, "overhead");
  if (overhead.is_object()) {
    for (auto it = overhead.begin(); it != overhead.end(); ++it) {
      sum[it.key()] = std::min(kMax, sum[it.key()] + ResourceAmount(it.key(), it.value()));
    }
  }
  return sum;
}

Resources NodeAllocatable(const json& node) {
  Resources out;
  const json& list = Field(Field(node, "status"), "allocatable");
  if (!list.is_object()) return out;
  for (auto it = list.begin(); it != list.end(); ++it) {
    out[it.key()] = ResourceAmount(it.key(), it.value());
  }
  return out;
}

bool MatchesNodeAffinity(const json& pod, const json& node) {
  const json& spec = Field(pod, "spec");
  const json& selector = Field(spec, "nodeSelector");
  const json& labels = Field(Field(node, "metadata"), "labels");
  if (selector.is_object()) {
    for (auto it = selector.begin(); it != selector.end(); ++it) {
      if (!labels.is_object() || !labels.contains(it.key()) || labels[it.key()] != it.value()) {
        return false;
      }
    }
  }
  const json& required = Field(Field(Field(spec, "affinity"), "nodeAffinity"),
                               "requiredDuringSchedulingIgnoredDuringExecution");
  if (required.is_null()) return true;
  const json& terms = Field(required, "nodeSelectorTerms");
  if (!terms.is_array()) return false;
  for (const json& term : terms) {
    if (TermMatches(term, node)) return true;
  }
  return false;
}

bool ToleratesTaint(const json& tolerations, const json& taint) {
  if (!tolerations.is_array()) return false;
  for (const json& t : tolerations) {
    if (TolerationMatches(t, taint)) return true;
  }
  return false;
}

FitResult Fits(const json& pod, const json& node, const NodeUsage& usage) {
  FitResult r;
  const json& tolerations = Field(Field(pod, "spec"), "tolerations");
  const json& node_spec = Field(node, "spec");
  // NodeUnschedulable.
  const json& unschedulable = Field(node_spec, "unschedulable");
  if (unschedulable.is_boolean() && unschedulable.get<bool>() &&
      !ToleratesTaint(tolerations,
                      {{"key", "node.kubernetes.io/unschedulable"}, {"effect", "NoSchedule"}})) {
    r.reasons.push_back("node(s) were unschedulable");
    return r;
  }
  // TaintToleration: the first taint that keeps pods off and is not tolerated.
  const json& taints = Field(node_spec, "taints");
  if (taints.is_array()) {
    for (const json& taint : taints) {
      std::string effect = Str(taint, "effect");
      if (effect != "NoSchedule" && effect != "NoExecute") continue;
      if (ToleratesTaint(tolerations, taint)) continue;
      r.reasons.push_back(absl::StrCat("node(s) had untolerated taint {", Str(taint, "key"), ": ",
                                       Str(taint, "value"), "}"));
      return r;
    }
  }
  // NodeAffinity.
  if (!MatchesNodeAffinity(pod, node)) {
    r.reasons.push_back("node(s) didn't match Pod's node affinity/selector");
    return r;
  }
  // NodeResourcesFit.
  Resources allocatable = NodeAllocatable(node);
  if (usage.pods + 1 > allocatable["pods"]) r.reasons.push_back("Too many pods");
  Resources requests = PodRequests(pod);
  std::vector<std::string> order = {"cpu", "memory", "ephemeral-storage"};
  for (const auto& [k, v] : requests) {
    if (k != "cpu" && k != "memory" && k != "ephemeral-storage" && k != "pods") order.push_back(k);
  }
  for (const std::string& k : order) {
    int64_t want = requests.contains(k) ? requests[k] : 0;
    if (want <= 0) continue;
    int64_t used = usage.requested.contains(k) ? usage.requested.at(k) : 0;
    if (want > allocatable[k] - used) r.reasons.push_back("Insufficient " + k);
  }
  r.resolvable = !r.reasons.empty();
  return r;
}

int64_t Score(const json& pod, const json& node, const NodeUsage& usage) {
  Resources allocatable = NodeAllocatable(node);
  Resources want = NonZeroRequests(pod);
  int64_t free_share = 0;
  for (const char* k : {"cpu", "memory"}) {
    int64_t cap = allocatable[k];
    int64_t used = (usage.requested.contains(k) ? usage.requested.at(k) : 0) + want[k];
    free_share += cap <= 0 || used >= cap ? 0 : (cap - used) * 100 / cap;
  }
  int64_t score = free_share / 2;
  const json& preferred = Field(Field(Field(Field(pod, "spec"), "affinity"), "nodeAffinity"),
                                "preferredDuringSchedulingIgnoredDuringExecution");
  if (preferred.is_array()) {
    for (const json& p : preferred) {
      const json& weight = Field(p, "weight");
      if (weight.is_number_integer() && TermMatches(Field(p, "preference"), node)) {
        score += weight.get<int64_t>();
      }
    }
  }
  const json& taints = Field(Field(node, "spec"), "taints");
  if (taints.is_array()) {
    for (const json& taint : taints) {
      if (Str(taint, "effect") == "PreferNoSchedule" &&
          !ToleratesTaint(Field(Field(pod, "spec"), "tolerations"), taint)) {
        score -= 10;
      }
    }
  }
  return score;
}

std::string FitErrorMessage(const std::vector<FitResult>& results) {
  auto histogram = [](const std::map<std::string, int>& counts) {
    std::vector<std::string> parts;
    for (const auto& [reason, n] : counts) parts.push_back(absl::StrCat(n, " ", reason));
    std::sort(parts.begin(), parts.end());  // as strings, as kube-scheduler sorts them
    return absl::StrJoin(parts, ", ");
  };
  std::map<std::string, int> reasons, preemption;
  for (const FitResult& r : results) {
    for (const std::string& reason : r.reasons) reasons[reason]++;
    // Every pod here has the same (default) priority: no node has a victim to preempt.
    preemption[r.resolvable ? "No preemption victims found for incoming pod"
                            : "Preemption is not helpful for scheduling"]++;
  }
  std::string all = absl::StrCat("0/", results.size(), " nodes are available");
  if (results.empty()) return "no nodes available to schedule pods";
  return absl::StrCat(all, ": ", histogram(reasons), ". preemption: ", all, ": ",
                      histogram(preemption), ".");
}

}  // namespace kubetrain::localkube
