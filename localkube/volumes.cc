#include "localkube/volumes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/quote.h"
#include "localkube/errors.h"
#include "localkube/storage_objects.h"
#include "localkube/volume_binding.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int kDefaultMode = 0644;  // the API's default defaultMode (420)
// A projected ServiceAccount token on the host: readable by its owner only.
constexpr int kTokenMode = 0600;

// The kubelet's fieldpath.FormatMap: sorted `key="value"` lines, no trailing newline.
std::string FormatMap(const json& map) {
  std::vector<std::string> lines;
  if (map.is_object()) {
    for (const auto& [k, v] : map.items()) {  // nlohmann's object keys are sorted
      lines.push_back(absl::StrCat(k, "=", GoQuote(v.is_string() ? v.get<std::string>() : "")));
    }
  }
  return absl::StrJoin(lines, "\n");
}

int ModeOf(const json& j, const char* field, int fallback) {
  if (!j.is_object() || !j.contains(field) || !j[field].is_number_integer()) return fallback;
  return j[field].get<int>() & 07777;
}

bool Optional(const json& j) { return j.is_object() && j.value("optional", false); }

std::string Failed(const std::string& volume, const std::string& why) {
  return absl::StrCat("MountVolume.SetUp failed for volume \"", volume, "\" : ", why);
}

// One file to write into a volume: its relative path, bytes, mode and, when not -1, the owner and
// group it is given (only a root localkube can).
struct File {
  std::string path, data;
  int mode;
  int64_t uid = -1, gid = -1;
};

// The pod's effective securityContext ids the kubelet gives token files to (volumeutil's
// FsUserFrom: the runAsUser every container and init container shares, when they all set one;
// and the pod's fsGroup), -1 when unset.
struct FsIds {
  int64_t user = -1, group = -1;
};

int64_t IdField(const nlohmann::json& security_context, const char* field) {
  if (!security_context.is_object()) return -1;
  auto it = security_context.find(field);
  return it != security_context.end() && it->is_number_integer() && it->get<int64_t>() >= 0
             ? it->get<int64_t>()
             : -1;
}

FsIds FsIdsOf(const json& pod) {
  FsIds ids;
  const json& spec = pod["spec"];
  const json pod_context = spec.value("securityContext", json::object());
  ids.group = IdField(pod_context, "fsGroup");
  int64_t shared = -1;
  bool first = true;
  for (const char* list : {"initContainers", "containers"}) {
    const json containers = spec.value(list, json::array());
    if (!containers.is_array()) continue;
    for (const json& c : containers) {
      int64_t user =
          c.is_object() ? IdField(c.value("securityContext", json::object()), "runAsUser") : -1;
      if (user < 0) user = IdField(pod_context, "runAsUser");
      if (user < 0 || (!first && user != shared)) return {-1, ids.group};
      shared = user;
      first = false;
    }
  }
  ids.user = shared;
  return ids;
}

// Creates `path` (and what leads to it) and makes it accessible to its owner only.
void PrivateDir(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  chmod(path.c_str(), 0700);
}

absl::Status WriteFiles(const std::string& dir, const std::vector<File>& files) {
  std::error_code ec;
  for (const File& f : files) {
    fs::path target = fs::path(dir) / f.path;
    fs::create_directories(target.parent_path(), ec);
    std::string tmp = target.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << f.data;
      if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", target.string()));
    }
    chmod(tmp.c_str(), f.mode);
    if ((f.uid >= 0 || f.gid >= 0) && geteuid() == 0 &&
        chown(tmp.c_str(), static_cast<uid_t>(f.uid), static_cast<gid_t>(f.gid)) != 0) {
      return absl::InternalError(absl::StrCat("cannot give ", target.string(), " to uid ", f.uid));
    }
    if (std::rename(tmp.c_str(), target.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot write ", target.string()));
    }
  }
  return absl::OkStatus();
}

// A fresh directory for a volume's files (what an earlier attempt wrote goes).
std::string FreshDir(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  fs::create_directories(path, ec);
  chmod(path.c_str(), 0755);
  return path;
}

// The keys of a ConfigMap (data and binaryData) or Secret (data, stringData), decoded.
std::map<std::string, std::string> Keys(const json& object, bool secret) {
  std::map<std::string, std::string> keys;
  // (field, base64-encoded) in the order later ones override earlier ones.
  const std::vector<std::pair<const char*, bool>> fields =
      secret ? std::vector<std::pair<const char*, bool>>{{"data", true}, {"stringData", false}}
             : std::vector<std::pair<const char*, bool>>{{"data", false}, {"binaryData", true}};
  for (const auto& [field, encoded] : fields) {
    if (!object.contains(field) || !object[field].is_object()) continue;
    for (const auto& [k, v] : object[field].items()) {
      if (!v.is_string()) continue;
      std::string value = v.get<std::string>();
      if (encoded) {
        std::string decoded;
        absl::Base64Unescape(value, &decoded);
        value = decoded;
      }
      keys[k] = value;
    }
  }
  return keys;
}

// The files of a configMap or secret source (a volume or a projection). `source` has name,
// items, optional (secret volumes name it `secretName`).
absl::Status KeyFiles(const json& source, bool secret, const std::string& ns, int default_mode,
                      const VolumeContext& ctx, std::vector<File>* files) {
  const std::string kind = secret ? "secret" : "configmap";
  std::string name =
      source.value(secret && source.contains("secretName") ? "secretName" : "name", std::string());
  std::optional<json> object =
      ctx.store ? ctx.store->Get(secret ? "/secrets" : "/configmaps", ns, name) : std::nullopt;
  if (!object) {
    if (Optional(source)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(kind, " \"", name, "\" not found"));
  }
  std::map<std::string, std::string> keys = Keys(*object, secret);
  const json items = source.value("items", json::array());
  if (!items.is_array() || items.empty()) {
    for (const auto& [k, v] : keys) files->push_back({k, v, default_mode});
    return absl::OkStatus();
  }
  for (const json& item : items) {
    std::string key = item.value("key", ""), path = item.value("path", "");
    if (absl::Status st = CheckRelativePath(path, "items[].path"); !st.ok()) return st;
    auto it = keys.find(key);
    if (it == keys.end()) {
      if (Optional(source)) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          kind, " references non-existent ", secret ? "secret" : "config", " key: ", key));
    }
    files->push_back({path, it->second, ModeOf(item, "mode", default_mode)});
  }
  return absl::OkStatus();
}

absl::Status DownwardFiles(const json& source, const json& pod, int default_mode,
                           const VolumeContext& ctx, std::vector<File>* files) {
  for (const json& item : source.value("items", json::array())) {
    std::string path = item.value("path", "");
    if (absl::Status st = CheckRelativePath(path, "items[].path"); !st.ok()) return st;
    if (!item.contains("fieldRef")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "downwardAPI item \"", path,
          "\": only fieldRef is supported by localkube (resourceFieldRef is not); use fieldRef"));
    }
    files->push_back({path,
                      DownwardApiField(pod, item["fieldRef"].value("fieldPath", ""), ctx.pod_ip),
                      ModeOf(item, "mode", default_mode)});
  }
  return absl::OkStatus();
}

std::string ServiceAccountOf(const json& pod) {
  const json& spec = pod["spec"];
  std::string sa = spec.value("serviceAccountName", "");
  if (sa.empty()) sa = spec.value("serviceAccount", "");
  return sa.empty() ? "default" : sa;
}

absl::Status ProjectedFiles(const json& source, const json& pod, const VolumeContext& ctx,
                            const FsIds& ids, std::vector<File>* files) {
  const std::string ns = pod["metadata"].value("namespace", "");
  int default_mode = ModeOf(source, "defaultMode", kDefaultMode);
  for (const json& s : source.value("sources", json::array())) {
    if (s.contains("serviceAccountToken")) {
      const json& t = s["serviceAccountToken"];
      std::string path = t.value("path", "");
      if (absl::Status st = CheckRelativePath(path, "serviceAccountToken.path"); !st.ok()) {
        return st;
      }
      // A kubelet without a token issuer (KubeletOptions.service_account_token unset) leaves
      // the token file out rather than holding every pod that automounts its token.
      if (!ctx.token) continue;
      int64_t expiration = t.value("expirationSeconds", int64_t{3600});
      absl::StatusOr<std::string> token =
          ctx.token(ns, ServiceAccountOf(pod), t.value("audience", ""), expiration);
      if (!token.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat("failed to fetch token: ", token.status().message()));
      }
      // Whatever defaultMode says, the kubelet writes the token for its owner alone (0600) and
      // gives it to the pod's runAsUser; an fsGroup may read it too (0640).
      files->push_back({path, *token, ids.group >= 0 ? 0640 : kTokenMode, ids.user, ids.group});
    } else if (s.contains("configMap")) {
      if (absl::Status st = KeyFiles(s["configMap"], false, ns, default_mode, ctx, files);
          !st.ok()) {
        return st;
      }
    } else if (s.contains("secret")) {
      if (absl::Status st = KeyFiles(s["secret"], true, ns, default_mode, ctx, files); !st.ok()) {
        return st;
      }
    } else if (s.contains("downwardAPI")) {
      if (absl::Status st = DownwardFiles(s["downwardAPI"], pod, default_mode, ctx, files);
          !st.ok()) {
        return st;
      }
    }
  }
  return absl::OkStatus();
}

// The directory of the PersistentVolume a persistentVolumeClaim volume's claim is bound to, as
// the kubelet's volume manager finds it; FailedPrecondition worded as its FailedMount events.
absl::StatusOr<std::string> ClaimPath(const json& pod, const std::string& volume,
                                      const std::string& claim_name, const VolumeContext& ctx) {
  const std::string ns = pod["metadata"].value("namespace", "");
  auto failed = [&](const std::string& why) {
    return absl::FailedPreconditionError(
        absl::StrCat("Unable to attach or mount volumes: unmounted volumes=[", volume,
                     "]: error processing PVC ", ns, "/", claim_name, ": ", why));
  };
  std::optional<json> claim = ctx.store ? ctx.store->Get(kPvcKey, ns, claim_name) : std::nullopt;
  if (!claim) {
    return failed(absl::StrCat("failed to fetch PVC from API server: persistentvolumeclaims \"",
                               claim_name, "\" not found"));
  }
  if ((*claim)["metadata"].contains("deletionTimestamp")) {
    return failed(
        absl::StrCat("can't start pod because PVC ", ns, "/", claim_name, " is being deleted"));
  }
  const json status = claim->value("status", json::object());
  const json spec = claim->value("spec", json::object());
  std::string phase = status.is_object() ? status.value("phase", "") : "";
  std::string pv_name =
      spec.is_object() && spec.contains("volumeName") && spec["volumeName"].is_string()
          ? spec["volumeName"].get<std::string>()
          : "";
  if (phase != "Bound" || pv_name.empty()) {
    return failed(absl::StrCat("PVC ", ns, "/", claim_name, " has non-bound phase (\"", phase,
                               "\") or empty pvc.Spec.VolumeName (\"", pv_name, "\")"));
  }
  std::optional<json> pv = ctx.store->Get(kPvKey, "", pv_name);
  if (!pv) {
    return failed(absl::StrCat("failed to fetch PV ", pv_name,
                               " from API server: persistentvolumes \"", pv_name, "\" not found"));
  }
  // A volume with node affinity (every local-path volume) is only there on its node.
  const json pod_spec = pod.value("spec", json::object());
  std::string node = pod_spec.is_object() ? pod_spec.value("nodeName", "") : "";
  if (!node.empty() && !VolumeNodeAffinityMatches(*pv, NodeOrConvention(*ctx.store, node))) {
    return absl::FailedPreconditionError(
        absl::StrCat("MountVolume.NodeAffinity check failed for volume \"", pv_name,
                     "\" : no matching NodeSelectorTerms"));
  }
  const json pv_spec = pv->value("spec", json::object());
  for (const char* source : {"hostPath", "local"}) {
    if (pv_spec.is_object() && pv_spec.contains(source) && pv_spec[source].is_object()) {
      std::string path = pv_spec[source].value("path", "");
      if (path.empty() || path[0] != '/') break;
      std::error_code ec;
      fs::create_directories(path, ec);  // DirectoryOrCreate, as provisioned
      return path;
    }
  }
  return absl::FailedPreconditionError(
      absl::StrCat("MountVolume.SetUp failed for volume \"", pv_name,
                   "\" : localkube mounts only hostPath and local persistent volumes"));
}

}  // namespace

absl::Status CheckRelativePath(const std::string& path, const std::string& field) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  if (path[0] == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " \"", path, "\": must be a relative path"));
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " \"", path, "\": must not contain '..'"));
    }
  }
  return absl::OkStatus();
}

std::string DownwardApiField(const json& pod, const std::string& path, const std::string& ip) {
  const json& meta = pod["metadata"];
  if (path == "metadata.name") return meta.value("name", "");
  if (path == "metadata.namespace") return meta.value("namespace", "");
  if (path == "metadata.uid") return meta.value("uid", "");
  if (path == "metadata.labels") return FormatMap(meta.value("labels", json::object()));
  if (path == "metadata.annotations") return FormatMap(meta.value("annotations", json::object()));
  if (path == "status.podIP" || path == "status.hostIP") return ip;
  if (path == "spec.nodeName") {
    return pod.value("spec", json::object()).value("nodeName", "localkube");
  }
  if (path == "spec.serviceAccountName") return ServiceAccountOf(pod);
  for (const char* field : {"labels", "annotations"}) {
    std::string prefix = absl::StrCat("metadata.", field, "['");
    if (absl::StartsWith(path, prefix) && absl::EndsWith(path, "']")) {
      std::string key = path.substr(prefix.size(), path.size() - prefix.size() - 2);
      json map = meta.value(field, json::object());
      return map.is_object() && map.contains(key) && map[key].is_string()
                 ? map[key].get<std::string>()
                 : "";
    }
  }
  return "";
}

absl::StatusOr<std::map<std::string, PodVolume>> SetUpVolumes(const json& pod,
                                                              const std::string& pod_dir,
                                                              const VolumeContext& ctx) {
  std::map<std::string, PodVolume> out;
  const std::string ns = pod["metadata"].value("namespace", "");
  const json volumes = pod["spec"].value("volumes", json::array());
  if (!volumes.is_array()) return out;
  std::error_code ec;
  const FsIds ids = FsIdsOf(pod);
  // Tokens and secrets live below: neither the pod's directory nor its volumes directories are
  // open to other users of this host.
  PrivateDir(pod_dir);
  PrivateDir(pod_dir + "/volumes");
  for (const json& v : volumes) {
    if (!v.is_object()) continue;
    const std::string name = v.value("name", "");
    auto dir = [&](const std::string& plugin) {
      std::string plugin_dir = absl::StrCat(pod_dir, "/volumes/kubernetes.io~", plugin);
      PrivateDir(plugin_dir);
      return absl::StrCat(plugin_dir, "/", name);
    };
    std::vector<File> files;
    absl::Status st;
    PodVolume volume;
    if (v.contains("secret") || v.contains("configMap")) {
      bool secret = v.contains("secret");
      const json& source = secret ? v["secret"] : v["configMap"];
      st = KeyFiles(source, secret, ns, ModeOf(source, "defaultMode", kDefaultMode), ctx, &files);
      volume = {dir(secret ? "secret" : "configmap"), true};
    } else if (v.contains("projected")) {
      st = ProjectedFiles(v["projected"], pod, ctx, ids, &files);
      volume = {dir("projected"), true};
    } else if (v.contains("downwardAPI")) {
      const json& source = v["downwardAPI"];
      st = DownwardFiles(source, pod, ModeOf(source, "defaultMode", kDefaultMode), ctx, &files);
      volume = {dir("downward-api"), true};
    } else if (v.contains("hostPath")) {
      std::string path = v["hostPath"].value("path", "");
      std::string type = v["hostPath"].value("type", "");
      if (path.empty() || path[0] != '/') {
        return absl::FailedPreconditionError(
            Failed(name, "hostPath.path must be an absolute path on the host"));
      }
      if (type == "DirectoryOrCreate") fs::create_directories(path, ec);
      if (type == "FileOrCreate" && !fs::exists(path)) std::ofstream(path).flush();
      if (!type.empty() && type != "DirectoryOrCreate" && type != "FileOrCreate" &&
          !fs::exists(path)) {
        return absl::FailedPreconditionError(
            Failed(name, absl::StrCat("hostPath type check failed: ", path, " does not exist")));
      }
      out[name] = {path, false};
      continue;
    } else if (v.contains("persistentVolumeClaim")) {
      const json& source = v["persistentVolumeClaim"];
      std::string claim = source.is_object() ? source.value("claimName", "") : "";
      absl::StatusOr<std::string> path = ClaimPath(pod, name, claim, ctx);
      if (!path.ok()) return path.status();
      out[name] = {*path, source.is_object() && source.contains("readOnly") &&
                              source["readOnly"].is_boolean() && source["readOnly"].get<bool>()};
      continue;
    } else {
      // emptyDir, and what localkube has no storage for: a directory that lives with the pod.
      volume = {dir("empty-dir"), false};
      if (!fs::exists(volume.host_path)) {
        fs::create_directories(volume.host_path, ec);
        chmod(volume.host_path.c_str(), 0777);
      }
      out[name] = volume;
      continue;
    }
    if (!st.ok()) return absl::FailedPreconditionError(Failed(name, std::string(st.message())));
    FreshDir(volume.host_path);
    if (absl::Status w = WriteFiles(volume.host_path, files); !w.ok()) {
      return absl::FailedPreconditionError(Failed(name, std::string(w.message())));
    }
    out[name] = volume;
  }
  return out;
}

}  // namespace kubetrain::localkube
