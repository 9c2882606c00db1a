// The Pod Security Standards checks behind EvaluatePodSecurity (pod_security.h), one function per
// check ID of k8s.io/pod-security-admission v1.33, each answering the plugin's ForbiddenReason and
// ForbiddenDetail for a pod's metadata and spec. Baseline checks are in pod_security_baseline.cc,
// restricted ones in pod_security_restricted.cc; which apply at a level, in the plugin's order, is
// ChecksFor in pod_security.cc. Internal to the localkube library. Pure functions.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "localkube/json_fields.h"
#include "localkube/pod_security.h"

namespace kubetrain::localkube::pod_security {

using json = nlohmann::json;
using Violation = PodSecurityViolation;
// A check: the violation of (metadata, spec), or nullopt.
using Check = std::function<std::optional<Violation>(const json& meta, const json& spec)>;

// Helpers the checks share: the plugin's wording of lists and plurals, and its container walk.
inline std::optional<bool> Bool(const json& object, const char* key) {
  const json& v = Field(object, key);
  if (!v.is_boolean()) return std::nullopt;
  return v.get<bool>();
}

inline std::string JoinQuote(const std::vector<std::string>& items) {
  if (items.empty()) return "";
  return absl::StrCat("\"", absl::StrJoin(items, "\", \""), "\"");
}

inline const char* Pluralize(const char* singular, const char* plural, size_t count) {
  return count == 1 ? singular : plural;
}

inline std::string Containers(const std::vector<std::string>& names) {
  return absl::StrCat(Pluralize("container", "containers", names.size()), " ", JoinQuote(names));
}

// Init containers, then containers, then ephemeral containers, as the plugin visits them.
inline void VisitContainers(const json& spec, const std::function<void(const json&)>& visit) {
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    const json& cs = Field(spec, list);
    if (!cs.is_array()) continue;
    for (const json& c : cs) visit(c);
  }
}

// A setting of a securityContext that containers inherit from the pod's (seccompProfile,
// runAsNonRoot), as one security context holds it.
enum class Setting { kUnset, kAllowed, kForbidden };

// Who holds a forbidden value of an inherited setting, and who holds none.
struct InheritedSetting {
  // "pod" when the pod's securityContext holds a forbidden value, then "container(s) ..." naming
  // the containers whose own one does.
  std::vector<std::string> setters;
  // The containers that set nothing while the pod sets no allowed value.
  std::vector<std::string> unset;
};

// Reads the setting of the pod's securityContext and of each container's (VisitContainers order)
// with `setting`.
inline InheritedSetting CheckInherited(
    const json& spec, const std::function<Setting(const json& security_context)>& setting) {
  InheritedSetting out;
  Setting pod = setting(Field(spec, "securityContext"));
  if (pod == Setting::kForbidden) out.setters.push_back("pod");
  std::vector<std::string> forbidden;
  VisitContainers(spec, [&](const json& c) {
    switch (setting(Field(c, "securityContext"))) {
      case Setting::kForbidden:
        forbidden.push_back(Str(c, "name"));
        break;
      case Setting::kUnset:
        if (pod != Setting::kAllowed) out.unset.push_back(Str(c, "name"));
        break;
      case Setting::kAllowed:
        break;
    }
  });
  if (!forbidden.empty()) out.setters.push_back(Containers(forbidden));
  return out;
}

inline bool IsWindows(const json& spec) { return Str(Field(spec, "os"), "name") == "windows"; }

// Baseline checks (pod_security_baseline.cc).
std::optional<Violation> AppArmor(const json& meta, const json& spec);
std::optional<Violation> CapabilitiesBaseline(const json& meta, const json& spec);
std::optional<Violation> HostNamespaces(const json& meta, const json& spec);
std::optional<Violation> HostPathVolumes(const json& meta, const json& spec);
std::optional<Violation> HostPorts(const json& meta, const json& spec);
std::optional<Violation> Privileged(const json& meta, const json& spec);
std::optional<Violation> ProcMount(const json& meta, const json& spec);
std::optional<Violation> SeLinuxOptions(const json& meta, const json& spec);
// seccompProfile_baseline (`required` false) and seccompProfile_restricted (true).
std::optional<Violation> Seccomp(const json& spec, bool required);
std::optional<Violation> Sysctls(const json& meta, const json& spec);
std::optional<Violation> WindowsHostProcess(const json& meta, const json& spec);

// Restricted checks (pod_security_restricted.cc).
std::optional<Violation> AllowPrivilegeEscalation(const json& meta, const json& spec);
std::optional<Violation> CapabilitiesRestricted(const json& meta, const json& spec);
std::optional<Violation> RestrictedVolumes(const json& meta, const json& spec);
std::optional<Violation> RunAsNonRoot(const json& meta, const json& spec);
std::optional<Violation> RunAsUser(const json& meta, const json& spec);

// The checks of `level` ("baseline" or "restricted"), in the plugin's order (pod_security.cc).
std::vector<Check> ChecksFor(absl::string_view level);

}  // namespace kubetrain::localkube::pod_security
