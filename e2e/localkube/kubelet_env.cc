// What localkube's kubelet (kubelet.h) starts a container with: the environment by Kubernetes'
// rules (the host's, then the pod's own, then the container's env with fieldRef, configMapKeyRef
// and secretKeyRef values and $(VAR) references to earlier entries), and the binary an image
// and command name resolve to through the image map.
#include "e2e/localkube/kubelet.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

// "metadata.labels['app']" style fieldRef paths.
std::string FieldRef(const json& pod, const std::string& path, const std::string& ip) {
  const json& meta = pod["metadata"];
  if (path == "metadata.name") return meta.value("name", "");
  if (path == "metadata.namespace") return meta.value("namespace", "");
  if (path == "metadata.uid") return meta.value("uid", "");
  if (path == "status.podIP" || path == "status.hostIP") return ip;
  if (path == "spec.nodeName") return "localkube";
  if (path == "spec.serviceAccountName") return pod["spec"].value("serviceAccountName", "default");
  for (const char* field : {"labels", "annotations"}) {
    std::string prefix = absl::StrCat("metadata.", field, "['");
    if (absl::StartsWith(path, prefix) && absl::EndsWith(path, "']")) {
      std::string key = path.substr(prefix.size(), path.size() - prefix.size() - 2);
      return meta.value(field, json::object()).value(key, "");
    }
  }
  return "";
}

}  // namespace

std::string Kubelet::ResolveBinary(const std::string& image, std::string command) const {
  for (const auto& [prefix, dir] : options_.image_map) {
    if (!absl::StartsWith(image, prefix)) continue;
    if (command.empty()) {
      std::string base = image.substr(image.rfind('/') + 1);
      command = base.substr(0, base.find(':'));
    }
    std::string candidate = dir + "/" + command;
    if (command.find('/') == std::string::npos && access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return command;
}

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

std::map<std::string, std::string> Kubelet::Environment(
    const Pod& pod, const Container& c, std::map<std::string, std::string>* vars) const {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::string path = env["PATH"];
  for (const auto& [prefix, dir] : options_.image_map) path = dir + ":" + path;
  env["PATH"] = path;
  const json& spec = pod.object["spec"];
  env["HOSTNAME"] = spec.value("hostname", pod.name);
  env["KUBETRAIN_POD_IP"] = pod.ip;
  env["KUBETRAIN_HOSTS_FILE"] = options_.hosts_file;
  // Each pod has its own /tmp on a real node; sharing this host's would let one pod see files
  // another (or an earlier pod of the same name) left behind.
  std::string tmp = pod.dir + "/tmp";
  std::error_code ec;
  std::filesystem::create_directories(tmp, ec);
  env["TMPDIR"] = tmp;
  env["KUBERNETES_SERVICE_HOST"] = "127.0.0.1";
  // Container env: later entries may refer to earlier ones with $(NAME).
  std::map<std::string, std::string> defined;
  for (const auto& e : c.spec.value("env", json::array())) {
    std::string name = e.value("name", "");
    std::string value;
    if (e.contains("value")) {
      value = Expand(e["value"].get<std::string>(), defined);
    } else if (e.contains("valueFrom")) {
      const json& from = e["valueFrom"];
      if (from.contains("fieldRef")) {
        value = FieldRef(pod.object, from["fieldRef"].value("fieldPath", ""), pod.ip);
      } else if (from.contains("configMapKeyRef") || from.contains("secretKeyRef")) {
        bool secret = from.contains("secretKeyRef");
        const json& ref = secret ? from["secretKeyRef"] : from["configMapKeyRef"];
        auto obj =
            api_->store()->Get(secret ? "/secrets" : "/configmaps", pod.ns, ref.value("name", ""));
        if (obj) {
          std::string raw = (*obj).value("data", json::object()).value(ref.value("key", ""), "");
          if (secret) absl::Base64Unescape(raw, &value);
          if (!secret) value = raw;
        }
      }
    }
    defined[name] = value;
    env[name] = value;
  }
  *vars = defined;
  return env;
}

}  // namespace kubetrain::localkube
