// Over 500 lines on purpose: one function per Pod Security check, in the upstream check-ID order.
#include "localkube/pod_security.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/pod_validation.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;
using Violation = PodSecurityViolation;

constexpr char kLabelPrefix[] = "pod-security.kubernetes.io/";

std::optional<bool> Bool(const json& object, const char* key) {
  const json& v = Field(object, key);
  if (!v.is_boolean()) return std::nullopt;
  return v.get<bool>();
}

std::string JoinQuote(const std::vector<std::string>& items) {
  if (items.empty()) return "";
  return absl::StrCat("\"", absl::StrJoin(items, "\", \""), "\"");
}

const char* Pluralize(const char* singular, const char* plural, size_t count) {
  return count == 1 ? singular : plural;
}

std::string Containers(const std::vector<std::string>& names) {
  return absl::StrCat(Pluralize("container", "containers", names.size()), " ", JoinQuote(names));
}

// Init containers, then containers, then ephemeral containers, as the plugin visits them.
void VisitContainers(const json& spec, const std::function<void(const json&)>& visit) {
  for (const char* list : {"initContainers", "containers", "ephemeralContainers"}) {
    const json& cs = Field(spec, list);
    if (!cs.is_array()) continue;
    for (const json& c : cs) visit(c);
  }
}

bool IsWindows(const json& spec) { return Str(Field(spec, "os"), "name") == "windows"; }

using Check = std::function<std::optional<Violation>(const json& meta, const json& spec)>;

std::optional<Violation> AppArmor(const json& meta, const json& spec) {
  auto allowed = [](const std::string& t) { return t == "RuntimeDefault" || t == "Localhost"; };
  std::vector<std::string> setters;
  std::set<std::string> bad_values;
  const json& pod_profile = Field(Field(spec, "securityContext"), "appArmorProfile");
  if (pod_profile.is_object() && !allowed(Str(pod_profile, "type"))) {
    setters.push_back("pod");
    bad_values.insert(Str(pod_profile, "type"));
  }
  std::vector<std::string> bad;
  VisitContainers(spec, [&](const json& c) {
    const json& p = Field(Field(c, "securityContext"), "appArmorProfile");
    if (p.is_object() && !allowed(Str(p, "type"))) {
      bad.push_back(Str(c, "name"));
      bad_values.insert(Str(p, "type"));
    }
  });
  if (!bad.empty()) setters.push_back(Containers(bad));
  std::vector<std::string> annotations;
  const json& ann = Field(meta, "annotations");
  if (ann.is_object()) {
    for (const auto& [k, v] : ann.items()) {
      std::string value = v.is_string() ? v.get<std::string>() : "";
      if (absl::StartsWith(k, "container.apparmor.security.beta.kubernetes.io/") &&
          !(value.empty() || value == "runtime/default" || absl::StartsWith(value, "localhost/"))) {
        annotations.push_back(absl::StrCat(k, "=", GoQuote(value)));
      }
    }
  }
  std::vector<std::string> values(bad_values.begin(), bad_values.end());
  if (!annotations.empty()) {
    std::sort(annotations.begin(), annotations.end());
    values.insert(values.end(), annotations.begin(), annotations.end());
    setters.push_back(Pluralize("annotation", "annotations", annotations.size()));
  }
  if (setters.empty()) return std::nullopt;
  return Violation{
      Pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", values.size()),
      absl::StrCat(absl::StrJoin(setters, " and "), " must not set AppArmor profile type to ",
                   JoinQuote(values))};
}

std::optional<Violation> CapabilitiesBaseline(const json&, const json& spec) {
  static const std::set<std::string> kAllowed = {
      "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER",  "FSETID", "KILL",      "MKNOD",
      "NET_BIND_SERVICE", "SETFCAP", "SETGID",       "SETPCAP", "SETUID", "SYS_CHROOT"};
  std::vector<std::string> bad;
  std::set<std::string> caps;
  VisitContainers(spec, [&](const json& c) {
    const json& add = Field(Field(Field(c, "securityContext"), "capabilities"), "add");
    if (!add.is_array()) return;
    bool valid = true;
    for (const json& cap : add) {
      std::string s = cap.is_string() ? cap.get<std::string>() : "";
      if (!kAllowed.count(s)) {
        valid = false;
        caps.insert(s);
      }
    }
    if (!valid) bad.push_back(Str(c, "name"));
  });
  if (bad.empty()) return std::nullopt;
  return Violation{
      "non-default capabilities",
      absl::StrCat(Containers(bad), " must not include ", JoinQuote({caps.begin(), caps.end()}),
                   " in securityContext.capabilities.add")};
}

std::optional<Violation> HostNamespaces(const json&, const json& spec) {
  std::vector<std::string> found;
  if (Bool(spec, "hostNetwork").value_or(false)) found.push_back("hostNetwork=true");
  if (Bool(spec, "hostPID").value_or(false)) found.push_back("hostPID=true");
  if (Bool(spec, "hostIPC").value_or(false)) found.push_back("hostIPC=true");
  if (found.empty()) return std::nullopt;
  return Violation{"host namespaces", absl::StrJoin(found, ", ")};
}

std::optional<Violation> HostPathVolumes(const json&, const json& spec) {
  std::vector<std::string> volumes;
  const json& vs = Field(spec, "volumes");
  if (vs.is_array()) {
    for (const json& v : vs) {
      if (v.is_object() && v.contains("hostPath") && !v["hostPath"].is_null()) {
        volumes.push_back(Str(v, "name"));
      }
    }
  }
  if (volumes.empty()) return std::nullopt;
  return Violation{"hostPath volumes", absl::StrCat(Pluralize("volume", "volumes", volumes.size()),
                                                    " ", JoinQuote(volumes))};
}

std::optional<Violation> HostPorts(const json&, const json& spec) {
  std::vector<std::string> bad;
  std::set<std::string> ports;  // sorted as strings, as sets.String sorts them
  VisitContainers(spec, [&](const json& c) {
    const json& ps = Field(c, "ports");
    if (!ps.is_array()) return;
    bool valid = true;
    for (const json& p : ps) {
      const json& hp = Field(p, "hostPort");
      if (hp.is_number_integer() && hp.get<int64_t>() != 0) {
        valid = false;
        ports.insert(std::to_string(hp.get<int64_t>()));
      }
    }
    if (!valid) bad.push_back(Str(c, "name"));
  });
  if (bad.empty()) return std::nullopt;
  return Violation{"hostPort",
                   absl::StrCat(Containers(bad), " ", Pluralize("uses", "use", bad.size()), " ",
                                Pluralize("hostPort", "hostPorts", ports.size()), " ",
                                absl::StrJoin(ports, ", "))};
}

std::optional<Violation> Privileged(const json&, const json& spec) {
  std::vector<std::string> bad;
  VisitContainers(spec, [&](const json& c) {
    if (Bool(Field(c, "securityContext"), "privileged").value_or(false)) {
      bad.push_back(Str(c, "name"));
    }
  });
  if (bad.empty()) return std::nullopt;
  return Violation{"privileged",
                   absl::StrCat(Containers(bad), " must not set securityContext.privileged=true")};
}

std::optional<Violation> ProcMount(const json&, const json& spec) {
  std::vector<std::string> bad;
  std::set<std::string> types;
  VisitContainers(spec, [&](const json& c) {
    const json& pm = Field(Field(c, "securityContext"), "procMount");
    if (pm.is_string() && pm.get<std::string>() != "Default") {
      bad.push_back(Str(c, "name"));
      types.insert(pm.get<std::string>());
    }
  });
  if (bad.empty()) return std::nullopt;
  return Violation{"procMount",
                   absl::StrCat(Containers(bad), " must not set securityContext.procMount to ",
                                JoinQuote({types.begin(), types.end()}))};
}

std::optional<Violation> SeLinuxOptions(const json&, const json& spec) {
  static const std::set<std::string> kAllowed = {"", "container_t", "container_init_t",
                                                 "container_kvm_t", "container_engine_t"};
  std::vector<std::string> setters;
  std::set<std::string> bad_types;
  bool set_user = false, set_role = false;
  auto valid = [&](const json& opts) {
    bool ok = true;
    std::string type = Str(opts, "type");
    if (!kAllowed.count(type)) {
      ok = false;
      bad_types.insert(type);
    }
    if (!Str(opts, "user").empty()) ok = false, set_user = true;
    if (!Str(opts, "role").empty()) ok = false, set_role = true;
    return ok;
  };
  const json& pod_opts = Field(Field(spec, "securityContext"), "seLinuxOptions");
  if (pod_opts.is_object() && !valid(pod_opts)) setters.push_back("pod");
  std::vector<std::string> bad;
  VisitContainers(spec, [&](const json& c) {
    const json& o = Field(Field(c, "securityContext"), "seLinuxOptions");
    if (o.is_object() && !valid(o)) bad.push_back(Str(c, "name"));
  });
  if (!bad.empty()) setters.push_back(Containers(bad));
  if (setters.empty()) return std::nullopt;
  std::vector<std::string> data;
  if (!bad_types.empty()) {
    data.push_back(absl::StrCat(Pluralize("type", "types", bad_types.size()), " ",
                                JoinQuote({bad_types.begin(), bad_types.end()})));
  }
  if (set_user) data.push_back("user may not be set");
  if (set_role) data.push_back("role may not be set");
  return Violation{"seLinuxOptions", absl::StrCat(absl::StrJoin(setters, " and "),
                                                  " set forbidden securityContext.seLinuxOptions: ",
                                                  absl::StrJoin(data, "; "))};
}

// seccompProfile_baseline (explicit bad types only) and seccompProfile_restricted (also
// requires a profile on the pod or every container).
std::optional<Violation> Seccomp(const json& spec, bool required) {
  auto valid = [](const std::string& t) { return t == "RuntimeDefault" || t == "Localhost"; };
  std::vector<std::string> setters;
  std::set<std::string> bad_values;
  bool pod_set = false;
  const json& pod_profile = Field(Field(spec, "securityContext"), "seccompProfile");
  if (pod_profile.is_object()) {
    if (!valid(Str(pod_profile, "type"))) {
      setters.push_back("pod");
      bad_values.insert(Str(pod_profile, "type"));
    } else {
      pod_set = true;
    }
  }
  std::vector<std::string> explicit_bad, implicit_bad;
  VisitContainers(spec, [&](const json& c) {
    const json& p = Field(Field(c, "securityContext"), "seccompProfile");
    if (p.is_object()) {
      if (!valid(Str(p, "type"))) {
        explicit_bad.push_back(Str(c, "name"));
        bad_values.insert(Str(p, "type"));
      }
    } else if (!pod_set) {
      implicit_bad.push_back(Str(c, "name"));
    }
  });
  if (!explicit_bad.empty()) setters.push_back(Containers(explicit_bad));
  if (!setters.empty()) {
    return Violation{"seccompProfile",
                     absl::StrCat(absl::StrJoin(setters, " and "),
                                  " must not set securityContext.seccompProfile.type to ",
                                  JoinQuote({bad_values.begin(), bad_values.end()}))};
  }
  if (required && !implicit_bad.empty()) {
    return Violation{"seccompProfile",
                     absl::StrCat("pod or ", Containers(implicit_bad),
                                  " must set securityContext.seccompProfile.type to "
                                  "\"RuntimeDefault\" or \"Localhost\"")};
  }
  return std::nullopt;
}

std::optional<Violation> Sysctls(const json&, const json& spec) {
  static const std::set<std::string> kAllowed = {"kernel.shm_rmid_forced",
                                                 "net.ipv4.ip_local_port_range",
                                                 "net.ipv4.tcp_syncookies",
                                                 "net.ipv4.ping_group_range",
                                                 "net.ipv4.ip_unprivileged_port_start",
                                                 "net.ipv4.ip_local_reserved_ports",
                                                 "net.ipv4.tcp_keepalive_time",
                                                 "net.ipv4.tcp_fin_timeout",
                                                 "net.ipv4.tcp_keepalive_intvl",
                                                 "net.ipv4.tcp_keepalive_probes",
                                                 "net.ipv4.tcp_rmem",
                                                 "net.ipv4.tcp_wmem"};
  std::vector<std::string> forbidden;
  const json& sysctls = Field(Field(spec, "securityContext"), "sysctls");
  if (sysctls.is_array()) {
    for (const json& s : sysctls) {
      std::string name = Str(s, "name");
      if (!kAllowed.count(name)) forbidden.push_back(name);
    }
  }
  if (forbidden.empty()) return std::nullopt;
  return Violation{"forbidden sysctls", absl::StrJoin(forbidden, ", ")};
}

std::optional<Violation> WindowsHostProcess(const json&, const json& spec) {
  auto host_process = [](const json& sc) {
    return Bool(Field(sc, "windowsOptions"), "hostProcess").value_or(false);
  };
  std::vector<std::string> bad;
  VisitContainers(spec, [&](const json& c) {
    if (host_process(Field(c, "securityContext"))) bad.push_back(Str(c, "name"));
  });
  std::vector<std::string> setters;
  if (host_process(Field(spec, "securityContext"))) setters.push_back("pod");
  if (!bad.empty()) setters.push_back(Containers(bad));
  if (setters.empty()) return std::nullopt;
  return Violation{"hostProcess",
                   absl::StrCat(absl::StrJoin(setters, " and "),
                                " must not set securityContext.windowsOptions.hostProcess=true")};
}

std::optional<Violation> AllowPrivilegeEscalation(const json&, const json& spec) {
  if (IsWindows(spec)) return std::nullopt;
  std::vector<std::string> bad;
  VisitContainers(spec, [&](const json& c) {
    std::optional<bool> ape = Bool(Field(c, "securityContext"), "allowPrivilegeEscalation");
    if (!ape.has_value() || *ape) bad.push_back(Str(c, "name"));
  });
  if (bad.empty()) return std::nullopt;
  return Violation{
      "allowPrivilegeEscalation != false",
      absl::StrCat(Containers(bad), " must set securityContext.allowPrivilegeEscalation=false")};
}

std::optional<Violation> CapabilitiesRestricted(const json&, const json& spec) {
  if (IsWindows(spec)) return std::nullopt;
  std::vector<std::string> missing_drop, adding;
  std::set<std::string> forbidden;
  VisitContainers(spec, [&](const json& c) {
    const json& caps = Field(Field(c, "securityContext"), "capabilities");
    if (!caps.is_object()) {
      missing_drop.push_back(Str(c, "name"));
      return;
    }
    const json& drop = Field(caps, "drop");
    bool dropped_all =
        drop.is_array() && std::find(drop.begin(), drop.end(), json("ALL")) != drop.end();
    if (!dropped_all) missing_drop.push_back(Str(c, "name"));
    const json& add = Field(caps, "add");
    bool added_forbidden = false;
    if (add.is_array()) {
      for (const json& a : add) {
        std::string s = a.is_string() ? a.get<std::string>() : "";
        if (s != "NET_BIND_SERVICE") {
          added_forbidden = true;
          forbidden.insert(s);
        }
      }
    }
    if (added_forbidden) adding.push_back(Str(c, "name"));
  });
  std::vector<std::string> details;
  if (!missing_drop.empty()) {
    details.push_back(absl::StrCat(Containers(missing_drop),
                                   " must set securityContext.capabilities.drop=[\"ALL\"]"));
  }
  if (!adding.empty()) {
    details.push_back(absl::StrCat(Containers(adding), " must not include ",
                                   JoinQuote({forbidden.begin(), forbidden.end()}),
                                   " in securityContext.capabilities.add"));
  }
  if (details.empty()) return std::nullopt;
  return Violation{"unrestricted capabilities", absl::StrJoin(details, "; ")};
}

std::optional<Violation> RestrictedVolumes(const json&, const json& spec) {
  static const std::set<std::string> kAllowed = {
      "configMap", "csi",   "downwardAPI",           "emptyDir",
      "ephemeral", "image", "persistentVolumeClaim", "projected",
      "secret"};
  static const char* kKnown[] = {"hostPath",
                                 "gcePersistentDisk",
                                 "awsElasticBlockStore",
                                 "gitRepo",
                                 "nfs",
                                 "iscsi",
                                 "glusterfs",
                                 "rbd",
                                 "flexVolume",
                                 "cinder",
                                 "cephfs",
                                 "flocker",
                                 "fc",
                                 "azureFile",
                                 "vsphereVolume",
                                 "quobyte",
                                 "azureDisk",
                                 "photonPersistentDisk",
                                 "portworxVolume",
                                 "scaleIO",
                                 "storageos"};
  std::vector<std::string> bad;
  std::set<std::string> types;
  const json& vs = Field(spec, "volumes");
  if (!vs.is_array()) return std::nullopt;
  for (const json& v : vs) {
    if (!v.is_object()) continue;
    bool has_source = false, allowed = false;
    for (const auto& [k, val] : v.items()) {
      if (k == "name" || val.is_null()) continue;
      has_source = true;
      if (kAllowed.count(k)) allowed = true;
    }
    // A volume without a source is defaulted to emptyDir.
    if (!has_source || allowed) continue;
    bad.push_back(Str(v, "name"));
    std::string type = "unknown";
    for (const char* k : kKnown) {
      if (v.contains(k) && !v[k].is_null()) {
        type = k;
        break;
      }
    }
    types.insert(type);
  }
  if (bad.empty()) return std::nullopt;
  return Violation{
      "restricted volume types",
      absl::StrCat(Pluralize("volume", "volumes", bad.size()), " ", JoinQuote(bad), " ",
                   Pluralize("uses", "use", bad.size()), " ",
                   Pluralize("restricted volume type", "restricted volume types", types.size()),
                   " ", JoinQuote({types.begin(), types.end()}))};
}

std::optional<Violation> RunAsNonRoot(const json&, const json& spec) {
  std::vector<std::string> setters;
  bool pod_non_root = false;
  std::optional<bool> pod = Bool(Field(spec, "securityContext"), "runAsNonRoot");
  if (pod.has_value()) {
    if (!*pod) {
      setters.push_back("pod");
    } else {
      pod_non_root = true;
    }
  }
  std::vector<std::string> explicit_bad, implicit_bad;
  VisitContainers(spec, [&](const json& c) {
    std::optional<bool> v = Bool(Field(c, "securityContext"), "runAsNonRoot");
    if (v.has_value()) {
      if (!*v) explicit_bad.push_back(Str(c, "name"));
    } else if (!pod_non_root) {
      implicit_bad.push_back(Str(c, "name"));
    }
  });
  if (!explicit_bad.empty()) setters.push_back(Containers(explicit_bad));
  if (!setters.empty()) {
    return Violation{"runAsNonRoot != true",
                     absl::StrCat(absl::StrJoin(setters, " and "),
                                  " must not set securityContext.runAsNonRoot=false")};
  }
  if (!implicit_bad.empty()) {
    return Violation{"runAsNonRoot != true",
                     absl::StrCat("pod or ", Containers(implicit_bad),
                                  " must set securityContext.runAsNonRoot=true")};
  }
  return std::nullopt;
}

std::optional<Violation> RunAsUser(const json&, const json& spec) {
  auto root = [](const json& sc) {
    const json& u = Field(sc, "runAsUser");
    return u.is_number_integer() && u.get<int64_t>() == 0;
  };
  std::vector<std::string> setters, bad;
  if (root(Field(spec, "securityContext"))) setters.push_back("pod");
  VisitContainers(spec, [&](const json& c) {
    if (root(Field(c, "securityContext"))) bad.push_back(Str(c, "name"));
  });
  if (!bad.empty()) setters.push_back(Containers(bad));
  if (setters.empty()) return std::nullopt;
  return Violation{"runAsUser=0",
                   absl::StrCat(absl::StrJoin(setters, " and "), " must not set runAsUser=0")};
}

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
  for (const Check& check : ChecksFor(level)) {
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
