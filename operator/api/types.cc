#include "operator/api/types.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kubetrain::api {
namespace {

template <typename Enum>
bool ParseByName(absl::string_view text, const std::vector<std::string>& names, Enum* out) {
  auto it = std::find(names.begin(), names.end(), text);
  if (it == names.end()) return false;
  *out = static_cast<Enum>(it - names.begin());
  return true;
}

}  // namespace

// Each list is in enum order, so an enum's value indexes its name.
const std::vector<std::string>& ReplicaTypeNames() {
  static const std::vector<std::string> kNames = {"Chief", "PS", "Worker", "Evaluator"};
  return kNames;
}
const std::vector<std::string>& RestartPolicyNames() {
  static const std::vector<std::string> kNames = {"Always", "OnFailure", "Never", "ExitCode"};
  return kNames;
}
const std::vector<std::string>& CleanPodPolicyNames() {
  static const std::vector<std::string> kNames = {"None", "Running", "All"};
  return kNames;
}
const std::vector<std::string>& SuccessPolicyNames() {
  static const std::vector<std::string> kNames = {"ChiefOnly", "AllWorkers"};
  return kNames;
}
const std::vector<std::string>& GradientCompressionNames() {
  static const std::vector<std::string> kNames = {"none", "fp16", "bf16"};
  return kNames;
}
const std::vector<std::string>& RestartScopeNames() {
  static const std::vector<std::string> kNames = {"Pod", "Job"};
  return kNames;
}

const std::vector<std::string>& ReclaimPolicyNames() {
  static const std::vector<std::string> kNames = {"Delete", "Retain"};
  return kNames;
}

std::string Name(ReplicaType t) { return ReplicaTypeNames()[static_cast<int>(t)]; }
std::string Name(RestartPolicy p) { return RestartPolicyNames()[static_cast<int>(p)]; }
std::string Name(CleanPodPolicy p) { return CleanPodPolicyNames()[static_cast<int>(p)]; }
std::string Name(SuccessPolicy p) { return SuccessPolicyNames()[static_cast<int>(p)]; }
std::string Name(GradientCompression c) { return GradientCompressionNames()[static_cast<int>(c)]; }
std::string Name(RestartScope s) { return RestartScopeNames()[static_cast<int>(s)]; }
std::string Name(ReclaimPolicy p) { return ReclaimPolicyNames()[static_cast<int>(p)]; }

std::string TaskType(ReplicaType t) {
  static const std::vector<std::string> kTypes = {"chief", "ps", "worker", "evaluator"};
  return kTypes[static_cast<int>(t)];
}

bool Parse(absl::string_view text, ReplicaType* out) {
  return ParseByName(text, ReplicaTypeNames(), out);
}
bool Parse(absl::string_view text, RestartPolicy* out) {
  return ParseByName(text, RestartPolicyNames(), out);
}
bool Parse(absl::string_view text, CleanPodPolicy* out) {
  return ParseByName(text, CleanPodPolicyNames(), out);
}
bool Parse(absl::string_view text, SuccessPolicy* out) {
  return ParseByName(text, SuccessPolicyNames(), out);
}
bool Parse(absl::string_view text, GradientCompression* out) {
  return ParseByName(text, GradientCompressionNames(), out);
}
bool Parse(absl::string_view text, RestartScope* out) {
  return ParseByName(text, RestartScopeNames(), out);
}
bool Parse(absl::string_view text, ReclaimPolicy* out) {
  return ParseByName(text, ReclaimPolicyNames(), out);
}

std::string FormatIndexSet(const std::set<int>& indexes) {
  std::string out;
  for (auto it = indexes.begin(); it != indexes.end();) {
    int first = *it;
    int last = first;
    for (++it; it != indexes.end() && *it == last + 1; ++it) last = *it;
    absl::StrAppend(&out, out.empty() ? "" : ",", first);
    if (last != first) absl::StrAppend(&out, "-", last);
  }
  return out;
}

std::set<int> ParseIndexSet(absl::string_view text) {
  std::set<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> range = absl::StrSplit(part, '-');
    int first, last;
    if (!absl::SimpleAtoi(range.first, &first)) continue;
    if (range.second.empty()) {
      out.insert(first);
    } else if (absl::SimpleAtoi(range.second, &last) && last >= first && last - first < 100000) {
      for (int i = first; i <= last; ++i) out.insert(i);
    }
  }
  return out;
}

bool ManagedByThisOperator(std::string_view managed_by, bool tfjob) {
  return managed_by.empty() || managed_by == kManagedByKubetrain ||
         (tfjob && managed_by == kManagedByKubeflow);
}

}  // namespace kubetrain::api
