#include "operator/api/pod_template_validation.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "operator/api/decode.h"
#include "operator/api/types.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

// The checks of one replica's pod template, each problem appended to `errors`.
class PodTemplateValidator {
 public:
  explicit PodTemplateValidator(FieldErrors* errors) : errors_(*errors) {}

  void Template(const json& tmpl, const std::string& path) {
    if (tmpl.is_null()) return;  // wrong type, already reported by the decoder
    if (tmpl.empty()) {
      Error(path, "required: a pod template with at least one container");
      return;
    }
    if (!tmpl.contains("spec")) {
      Error(path + ".spec", "required: a pod spec with at least one container");
      return;
    }
    const json& spec = tmpl["spec"];
    if (!spec.is_object()) {
      Error(path + ".spec", "must be an object, got " + Describe(spec));
      return;
    }
    if (spec.contains("restartPolicy")) {
      Error(path + ".spec.restartPolicy",
            "must not be set: the operator owns restarts; set " +
                path.substr(0, path.size() - std::string(".template").size()) +
                ".restartPolicy instead");
    }
    Containers(spec, path + ".spec.containers");
  }

 private:
  void Containers(const json& spec, const std::string& path) {
    if (!spec.contains("containers")) {
      Error(path, "required: at least one container");
      return;
    }
    const json& containers = spec["containers"];
    if (!containers.is_array()) {
      Error(path, "must be a list of containers, got " + Describe(containers));
      return;
    }
    if (containers.empty()) {
      Error(path, "must have at least one container");
      return;
    }
    for (size_t i = 0; i < containers.size(); ++i) {
      Container(containers[i], absl::StrCat(path, "[", i, "]"));
    }
    bool named = false;
    for (const json& c : containers) named |= StringField(c, "name") == kDefaultContainerName;
    if (!named) {
      Error(path, absl::StrCat("no container named \"", kDefaultContainerName,
                               "\"; name the training container \"", kDefaultContainerName,
                               "\" (an unnamed first container gets that name)"));
    }
  }

  void Container(const json& c, const std::string& path) {
    if (!c.is_object()) {
      Error(path, "must be an object, got " + Describe(c));
      return;
    }
    if (OptionalString(c, "name", path) && StringField(c, "name").empty()) {
      Error(path + ".name", "required");
    }
    if (!c.contains("image") || !c["image"].is_string() || c["image"].get<std::string>().empty()) {
      Error(path + ".image", c.contains("image") && !c["image"].is_string()
                                 ? "must be a string, got " + Describe(c["image"])
                                 : "required: the container image, e.g. kubetrain/worker:0.1.0");
    }
    StringList(c, "command", path);
    StringList(c, "args", path);
    OptionalString(c, "workingDir", path);
    if (c.contains("env")) Env(c["env"], path + ".env");
    if (c.contains("ports") && !c["ports"].is_array()) {
      Error(path + ".ports", "must be a list of ports, got " + Describe(c["ports"]));
    } else if (c.contains("ports")) {
      for (size_t i = 0; i < c["ports"].size(); ++i)
        Port(c["ports"][i], absl::StrCat(path, ".ports[", i, "]"));
    }
  }

  // Reports obj's `key` (at path.key) when it is set to something other than a string, the
  // message followed by `hint`; true when it is a string or absent.
  bool OptionalString(const json& obj, const char* key, const std::string& path,
                      const char* hint = "") {
    if (!obj.contains(key) || obj[key].is_string()) return true;
    Error(absl::StrCat(path, ".", key),
          absl::StrCat("must be a string, got ", Describe(obj[key]), hint));
    return false;
  }

  // The fields below are read when pods are built and run, so their types are checked here
  // rather than discovered by the kubelet (or by a local run) later.
  void StringList(const json& c, const char* key, const std::string& container_path) {
    if (!c.contains(key)) return;
    const std::string path = absl::StrCat(container_path, ".", key);
    const json& list = c[key];
    if (!list.is_array()) {
      Error(path, "must be a list of strings, got " + Describe(list));
      return;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string()) {
        Error(absl::StrCat(path, "[", i, "]"),
              "must be a string, got " + Describe(list[i]) + "; quote numbers and booleans");
      }
    }
  }

  void Env(const json& env, const std::string& path) {
    if (!env.is_array()) {
      Error(path, "must be a list of {name, value} entries, got " + Describe(env));
      return;
    }
    for (size_t i = 0; i < env.size(); ++i) {
      const json& e = env[i];
      const std::string item = absl::StrCat(path, "[", i, "]");
      if (!e.is_object()) {
        Error(item, "must be an object with name and value, got " + Describe(e));
        continue;
      }
      if (!e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty()) {
        Error(item + ".name", e.contains("name") && !e["name"].is_string()
                                  ? "must be a string, got " + Describe(e["name"])
                                  : std::string("required"));
      }
      OptionalString(e, "value", item, "; quote numbers and booleans");
      if (e.contains("valueFrom") && !e["valueFrom"].is_object()) {
        Error(item + ".valueFrom", "must be an object, got " + Describe(e["valueFrom"]));
      }
    }
  }

  void Port(const json& p, const std::string& path) {
    if (!p.is_object()) {
      Error(path, "must be an object with containerPort, got " + Describe(p));
      return;
    }
    OptionalString(p, "name", path);
    if (!p.contains("containerPort")) return;
    const json& port = p["containerPort"];
    if (!port.is_number_integer() || port.get<int64_t>() < 1 || port.get<int64_t>() > 65535) {
      Error(path + ".containerPort", "must be between 1 and 65535, got " + Describe(port));
    }
  }

  void Error(std::string path, std::string message) {
    errors_.push_back({std::move(path), std::move(message)});
  }

  FieldErrors& errors_;
};

}  // namespace

void ValidatePodTemplate(const json& pod_template, const std::string& path, FieldErrors* errors) {
  PodTemplateValidator(errors).Template(pod_template, path);
}

}  // namespace kubetrain::api
