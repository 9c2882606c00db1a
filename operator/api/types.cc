#include "operator/api/types.h"

#include <algorithm>

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
const std::vector<std::string>& RestartScopeNames() {
  static const std::vector<std::string> kNames = {"Pod", "Job"};
  return kNames;
}

std::string Name(ReplicaType t) { return ReplicaTypeNames()[static_cast<int>(t)]; }
std::string Name(RestartPolicy p) { return RestartPolicyNames()[static_cast<int>(p)]; }
std::string Name(CleanPodPolicy p) { return CleanPodPolicyNames()[static_cast<int>(p)]; }
std::string Name(SuccessPolicy p) { return SuccessPolicyNames()[static_cast<int>(p)]; }
std::string Name(RestartScope s) { return RestartScopeNames()[static_cast<int>(s)]; }

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
bool Parse(absl::string_view text, RestartScope* out) {
  return ParseByName(text, RestartScopeNames(), out);
}

}  // namespace kubetrain::api
