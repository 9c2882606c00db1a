// Pod Security Admission (see pod_security.h): the namespace labels read as the plugin's policy,
// the checks a level runs, and the admission decision. The checks are pod_security_checks.h.
#include "localkube/pod_security.h"

#include <algorithm>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/pod_security_checks.h"
#include "localkube/pod_validation.h"

namespace kubetrain::localkube {
namespace pod_security {

// The checks of a level, in the plugin's order: baseline check IDs sorted, then restricted ones
// sorted, restricted checks replacing the baseline checks they override (capabilities_baseline,
// hostPathVolumes, seccompProfile_baseline).
std::vector<Check> ChecksFor(absl::string_view level) {
  bool restricted = level == "restricted";
  std::vector<Check> checks = {AppArmor};                   // appArmorProfile
  if (!restricted) checks.push_back(CapabilitiesBaseline);  // capabilities_baseline
  checks.push_back(HostNamespaces);                         // hostNamespaces
  if (!restricted) checks.push_back(HostPathVolumes);       // hostPathVolumes
  checks.push_back(HostPorts);                              // hostPorts
  checks.push_back(Privileged);                             // privileged
  checks.push_back(ProcMount);                              // procMount
  checks.push_back(SeLinuxOptions);                         // seLinuxOptions
  if (!restricted) {
    checks.push_back([](const json&, const json& spec) { return Seccomp(spec, false); });
  }
  checks.push_back(Sysctls);             // sysctls
  checks.push_back(WindowsHostProcess);  // windowsHostProcess
  if (!restricted) return checks;
  checks.push_back(AllowPrivilegeEscalation);  // allowPrivilegeEscalation
  checks.push_back(CapabilitiesRestricted);    // capabilities_restricted
  checks.push_back(RestrictedVolumes);         // restrictedVolumes
  checks.push_back(RunAsNonRoot);              // runAsNonRoot
  checks.push_back(RunAsUser);                 // runAsUser
  checks.push_back([](const json&, const json& spec) -> std::optional<Violation> {
    if (IsWindows(spec)) return std::nullopt;
    return Seccomp(spec, true);
  });  // seccompProfile_restricted
  return checks;
}

}  // namespace pod_security

namespace {

using json = nlohmann::json;
using pod_security::Check;
using Violation = PodSecurityViolation;

constexpr char kLabelPrefix[] = "pod-security.kubernetes.io/";

struct LevelVersion {
  std::string level = "privileged";
  std::string version = "latest";
  std::string String() const { return absl::StrCat(level, ":", version); }
};

int Strictness(const std::string& level) {
  return level == "restricted" ? 2 : (level == "baseline" ? 1 : 0);
}

bool ValidLevel(const std::string& level) {
  return level == "privileged" || level == "baseline" || level == "restricted";
}

// "latest" or "v1.<minor>"; anything else reads as latest, as the plugin parses it.
std::string ParseVersion(const std::string& v) {
  if (absl::StartsWith(v, "v1.") && v.size() > 3) {
    std::string minor = v.substr(3);
    int n = 0;
    if (std::all_of(minor.begin(), minor.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        (minor == "0" || minor[0] != '0') && absl::SimpleAtoi(minor, &n)) {
      return v;
    }
  }
  return "latest";
}

// api.PolicyToEvaluate for the enforce and warn modes.
void PolicyFromLabels(const json& labels, LevelVersion* enforce, LevelVersion* warn) {
  if (!labels.is_object()) return;
  auto label = [&](const char* name) -> std::optional<std::string> {
    auto it = labels.find(absl::StrCat(kLabelPrefix, name));
    if (it == labels.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  bool has_enforce = false, has_warn = false, has_warn_version = false;
  if (auto l = label("enforce")) {
    has_enforce = ValidLevel(*l);
    enforce->level = has_enforce ? *l : "restricted";  // fails closed
  }
  if (auto v = label("enforce-version")) enforce->version = ParseVersion(*v);
  if (auto l = label("warn")) {
    has_warn = true;
    warn->level = ValidLevel(*l) ? *l : "privileged";  // fails open
  }
  if (auto v = label("warn-version")) {
    has_warn_version = true;
    warn->version = ParseVersion(*v);
  }
  if (!has_warn && has_enforce && Strictness(enforce->level) > Strictness(warn->level)) {
    warn->level = enforce->level;
    if (!has_warn_version) warn->version = enforce->version;
  }
}

bool SignificantUpdate(const json& pod, const json& old) {
  const json& spec = Field(pod, "spec");
  const json& old_spec = Field(old, "spec");
  for (const char* list : {"containers", "initContainers"}) {
    const json& a = Field(spec, list);
    const json& b = Field(old_spec, list);
    size_t na = a.is_array() ? a.size() : 0, nb = b.is_array() ? b.size() : 0;
    if (na != nb) return true;
    for (size_t i = 0; i < na; ++i) {
      if (Str(a[i], "image") != Str(b[i], "image")) return true;
    }
  }
  const json& eph = Field(spec, "ephemeralContainers");
  const json& old_eph = Field(old_spec, "ephemeralContainers");
  if (!eph.is_array()) return false;
  for (const json& c : eph) {
    const json* match = nullptr;
    if (old_eph.is_array()) {
      for (const json& o : old_eph) {
        if (Str(o, "name") == Str(c, "name")) {
          match = &o;
          break;
        }
      }
    }
    if (!match || Str(*match, "image") != Str(c, "image")) return true;
  }
  return false;
}
}  // namespace

std::vector<PodSecurityViolation> EvaluatePodSecurity(absl::string_view level, const json& pod) {
  std::vector<Violation> out;
  if (level != "baseline" && level != "restricted") return out;
  const json& meta = Field(pod, "metadata");
  const json& spec = Field(pod, "spec");
  for (const Check& check : pod_security::ChecksFor(level)) {
    if (auto v = check(meta, spec)) out.push_back(std::move(*v));
  }
  return out;
}

std::string PodSecurityDetail(const std::vector<PodSecurityViolation>& violations) {
  std::vector<std::string> parts;
  for (const Violation& v : violations) {
    parts.push_back(v.detail.empty() ? v.reason : absl::StrCat(v.reason, " (", v.detail, ")"));
  }
  return absl::StrJoin(parts, ", ");
}

absl::Status AdmitPod(const Store& store, const json& pod, const json* old,
                      std::vector<std::string>* warnings) {
  const json& meta = Field(pod, "metadata");
  std::string name = Str(meta, "name");
  std::vector<Cause> causes = ValidatePod(pod);
  if (!causes.empty()) return InvalidError("Pod", name, causes);
  if (old != nullptr && !SignificantUpdate(pod, *old)) return absl::OkStatus();
  auto ns = store.Get("/namespaces", "", Str(meta, "namespace"));
  LevelVersion enforce, warn;
  if (ns) PolicyFromLabels(Field(Field(*ns, "metadata"), "labels"), &enforce, &warn);
  std::vector<Violation> denied = EvaluatePodSecurity(enforce.level, pod);
  if (!denied.empty()) {
    return ApiError(403, "Forbidden",
                    absl::StrCat("pods \"", name, "\" is forbidden: violates PodSecurity \"",
                                 enforce.String(), "\": ", PodSecurityDetail(denied)),
                    {{"name", name}, {"kind", "pods"}});
  }
  if (warnings != nullptr) {
    std::vector<Violation> warned = EvaluatePodSecurity(warn.level, pod);
    if (!warned.empty()) {
      warnings->push_back(absl::StrCat("would violate PodSecurity \"", warn.String(),
                                       "\": ", PodSecurityDetail(warned)));
    }
  }
  return absl::OkStatus();
}

std::string WarningHeaderValue(absl::string_view text) {
  std::string out = "299 - \"";
  for (char c : text) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out + "\"";
}

}  // namespace kubetrain::localkube
