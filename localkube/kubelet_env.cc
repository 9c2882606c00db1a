// What localkube's kubelet (kubelet.h) starts a container with: the environment by Kubernetes'
// rules (the pod's own variables, the `kubernetes` Service's variables, then the container's
// envFrom and env with fieldRef, configMapKeyRef and secretKeyRef values and $(VAR) references
// to earlier entries; the runtime lays it over its base), $(VAR) expansion, and the volume mounts.
#include "localkube/kubelet.h"

#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// A ConfigMap's or Secret's keys (Secret values decoded), or nullopt when it does not exist.
std::optional<std::map<std::string, std::string>> ReadKeys(const Store* store, bool secret,
                                                           const std::string& ns,
                                                           const std::string& name) {
  auto obj = store->Get(secret ? "/secrets" : "/configmaps", ns, name);
  if (!obj) return std::nullopt;
  std::map<std::string, std::string> keys;
  for (const char* field : {"data", "stringData"}) {
    if (!secret && std::string(field) == "stringData") continue;
    if (!obj->contains(field) || !(*obj)[field].is_object()) continue;
    for (const auto& [k, v] : (*obj)[field].items()) {
      if (!v.is_string()) continue;
      std::string value = v.get<std::string>();
      if (secret && std::string(field) == "data")
        absl::Base64Unescape(v.get<std::string>(), &value);
      keys[k] = value;
    }
  }
  return keys;
}

// Why no mount point can be made at a sandboxed pod's mountPath, or "" when one can:
// localkube-pod-init makes a missing one in the container's own mount namespace (README "Pod
// sandboxes"), except below a host path that is a file (or a symlink to one). The pod's own
// /tmp, /run (/var/run) and /dev/shm are not the host's, so paths there always can.
std::string MountPointProblem(const std::string& path) {
  for (const char* root : {"/tmp/", "/run/", "/var/run/", "/dev/shm/"}) {
    if (absl::StartsWith(path + "/", root)) return "";
  }
  std::error_code ec;
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (std::filesystem::exists(p, ec)) return "";
  for (; p != p.root_path(); p = p.parent_path()) {
    auto st = std::filesystem::status(p, ec);
    if (!std::filesystem::exists(st)) {
      if (!std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec))) continue;
      return absl::StrCat(p.string(),
                          " is a symlink to nothing on this host (whose root "
                          "filesystem the pod shares); pick another mountPath");
    }
    if (std::filesystem::is_directory(st)) return "";
    return absl::StrCat(p.string(),
                        " is a file on this host (whose root filesystem the pod "
                        "shares), so no mount point can be made below it; pick another mountPath");
  }
  return "";
}

}  // namespace

std::string Kubelet::Expand(const std::string& text,
                            const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$' || i + 1 >= text.size()) {
      out.push_back(text[i]);
      continue;
    }
    if (text[i + 1] == '$') {
      out.push_back('$');
      ++i;
      continue;
    }
    size_t close = text[i + 1] == '(' ? text.find(')', i + 2) : std::string::npos;
    if (close == std::string::npos) {
      out.push_back(text[i]);
      continue;
    }
    std::string name = text.substr(i + 2, close - i - 2);
    auto it = vars.find(name);
    out += it != vars.end() ? it->second : text.substr(i, close - i + 1);
    i = close;
  }
  return out;
}

std::map<std::string, std::string> Kubelet::Environment(const Pod& pod, const Container& c,
                                                        std::map<std::string, std::string>* vars,
                                                        std::string* error) const {
  std::map<std::string, std::string> env;
  const json& spec = pod.object["spec"];
  env["HOSTNAME"] = spec.value("hostname", pod.name);
  env["KUBETRAIN_POD_IP"] = pod.ip;
  // Without a sandbox (host mode, the oci runtime) every pod shares this host's network, where
  // two servers on one port would clash: kubetrain's programs bind the pod's own address there.
  // A container's env, laid over this, may say otherwise; in a sandbox nothing is needed.
  if (!pod.sandbox) env["KUBETRAIN_BIND_ADDRESS"] = pod.ip;
  // The `kubernetes` Service's variables, as a kubelet's service env gives every container: the
  // master service's are set whatever enableServiceLinks says (that only governs the other
  // Services of the pod's namespace, which localkube gives no variables). The container's env
  // may refer to them with $(VAR).
  std::map<std::string, std::string> defined;
  // A sandboxed pod reaches the API server at its node's bridge address.
  const std::string& api_host = pod.api_host.empty() ? api_host_ : pod.api_host;
  defined["KUBERNETES_SERVICE_HOST"] = api_host;
  if (api_port_ > 0) {
    std::string port = std::to_string(api_port_);
    std::string url = absl::StrCat("tcp://", api_host, ":", port);
    std::string prefix = absl::StrCat("KUBERNETES_PORT_", port, "_TCP");
    defined["KUBERNETES_SERVICE_PORT"] = port;
    defined["KUBERNETES_SERVICE_PORT_HTTPS"] = port;
    defined["KUBERNETES_PORT"] = url;
    defined[prefix] = url;
    defined[prefix + "_PROTO"] = "tcp";
    defined[prefix + "_PORT"] = port;
    defined[prefix + "_ADDR"] = api_host;
  }
  // envFrom, then env: later entries override earlier ones and may refer to them with $(NAME).
  for (const auto& from : c.spec.value("envFrom", json::array())) {
    if (!from.is_object()) continue;
    bool secret = from.contains("secretRef");
    const json ref = secret ? from["secretRef"] : from.value("configMapRef", json::object());
    std::string name = ref.value("name", "");
    auto keys = ReadKeys(api_->store(), secret, pod.ns, name);
    if (!keys) {
      if (ref.value("optional", false)) continue;
      *error = absl::StrCat(secret ? "secret" : "configmap", " \"", name, "\" not found");
      return env;
    }
    for (const auto& [k, v] : *keys) defined[from.value("prefix", "") + k] = v;
  }
  for (const auto& e : c.spec.value("env", json::array())) {
    std::string name = e.value("name", "");
    std::string value;
    if (e.contains("value") && e["value"].is_string()) {
      value = Expand(e["value"].get<std::string>(), defined);
    } else if (e.contains("valueFrom")) {
      const json& from = e["valueFrom"];
      if (from.contains("fieldRef")) {
        value = DownwardApiField(pod.object, from["fieldRef"].value("fieldPath", ""), pod.ip);
      } else if (from.contains("configMapKeyRef") || from.contains("secretKeyRef")) {
        bool secret = from.contains("secretKeyRef");
        const json& ref = secret ? from["secretKeyRef"] : from["configMapKeyRef"];
        std::string object = ref.value("name", ""), key = ref.value("key", "");
        bool optional = ref.value("optional", false);
        auto keys = ReadKeys(api_->store(), secret, pod.ns, object);
        if (!keys) {
          if (optional) continue;
          *error = absl::StrCat(secret ? "secret" : "configmap", " \"", object, "\" not found");
          return env;
        }
        auto it = keys->find(key);
        if (it == keys->end()) {
          if (optional) continue;
          *error = absl::StrCat("couldn't find key ", key, " in ", secret ? "Secret" : "ConfigMap",
                                " ", pod.ns, "/", object);
          return env;
        }
        value = it->second;
      }
    }
    defined[name] = value;
  }
  for (const auto& [k, v] : defined) env[k] = v;
  *vars = defined;
  return env;
}

std::string Kubelet::Mounts(const Pod& pod, const Container& c,
                            std::vector<ContainerMount>* out) const {
  for (const auto& m : c.spec.value("volumeMounts", json::array())) {
    if (!m.is_object()) continue;
    std::string name = m.value("name", ""), path = m.value("mountPath", "");
    auto it = pod.volumes.find(name);
    if (it == pod.volumes.end()) {
      return absl::StrCat("cannot find volume \"", name, "\" to mount into container \"", c.name,
                          "\" (add it to spec.volumes or fix volumeMounts[].name)");
    }
    if (path.empty() || path[0] != '/') {
      return absl::StrCat("volumeMounts[].mountPath \"", path, "\" of volume \"", name,
                          "\" in container \"", c.name, "\": must be an absolute path");
    }
    // In the oci runtime the container's root is its image's, where any mount point can be made.
    const bool host_root = pod.sandbox && options_.runtime != "oci";
    if (std::string problem = host_root ? MountPointProblem(path) : ""; !problem.empty()) {
      return absl::StrCat("volumeMounts[].mountPath \"", path, "\" of volume \"", name,
                          "\" in container \"", c.name, "\": ", problem);
    }
    ContainerMount mount{it->second.host_path, path,
                         it->second.read_only || m.value("readOnly", false)};
    std::string sub = m.value("subPath", "");
    if (!sub.empty()) {
      if (absl::Status st = CheckRelativePath(sub, "volumeMounts[].subPath"); !st.ok()) {
        return absl::StrCat("container \"", c.name, "\": ", st.message());
      }
      mount.host_path = absl::StrCat(mount.host_path, "/", sub);
      std::error_code ec;
      if (!std::filesystem::exists(mount.host_path, ec)) {
        if (it->second.read_only) {
          return absl::StrCat("volumeMounts[].subPath \"", sub, "\" of volume \"", name,
                              "\" in container \"", c.name, "\": no such file in the volume");
        }
        std::filesystem::create_directories(mount.host_path, ec);
      }
    }
    out->push_back(mount);
  }
  return "";
}

}  // namespace kubetrain::localkube
