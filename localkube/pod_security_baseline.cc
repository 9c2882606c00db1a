// The baseline checks of the Pod Security Standards (see pod_security_checks.h).
#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "common/quote.h"
#include "localkube/pod_security_checks.h"

namespace kubetrain::localkube::pod_security {

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
  std::set<std::string> bad_values;
  auto [setters, implicit_bad] = CheckInherited(spec, [&](const json& sc) {
    const json& profile = Field(sc, "seccompProfile");
    if (!profile.is_object()) return Setting::kUnset;
    std::string type = Str(profile, "type");
    if (type == "RuntimeDefault" || type == "Localhost") return Setting::kAllowed;
    bad_values.insert(type);
    return Setting::kForbidden;
  });
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

}  // namespace kubetrain::localkube::pod_security
