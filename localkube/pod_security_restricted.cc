// The restricted checks of the Pod Security Standards (see pod_security_checks.h).
#include <algorithm>
#include <set>

#include "localkube/pod_security_checks.h"

namespace kubetrain::localkube::pod_security {

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
  auto [setters, implicit_bad] = CheckInherited(spec, [](const json& sc) {
    std::optional<bool> non_root = Bool(sc, "runAsNonRoot");
    if (!non_root.has_value()) return Setting::kUnset;
    return *non_root ? Setting::kAllowed : Setting::kForbidden;
  });
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

}  // namespace kubetrain::localkube::pod_security
