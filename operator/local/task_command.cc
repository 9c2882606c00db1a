#include "operator/local/task_command.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "operator/api/decode.h"
#include "operator/api/types.h"

namespace kubetrain::local {
namespace {

using nlohmann::json;

absl::StatusOr<std::string> FieldRef(const json& pod, const json& ref, const std::string& path,
                                     const CommandContext& ctx) {
  std::string field = api::StringField(ref, "fieldPath");
  if (field == "metadata.name")
    return pod.contains("metadata") ? api::StringField(pod["metadata"], "name") : "";
  if (field == "metadata.namespace")
    return pod.contains("metadata") ? api::StringField(pod["metadata"], "namespace", "default")
                                    : "default";
  if (field == "status.podIP" || field == "status.hostIP") return ctx.pod_ip;
  if (field == "spec.nodeName") return std::string("localhost");
  return absl::InvalidArgumentError(absl::StrCat(
      path, ".valueFrom.fieldRef.fieldPath: \"", field,
      "\" is not available to local runs; use metadata.name, metadata.namespace or status.podIP"));
}

absl::Status AddContainerEnv(const json& pod, const json& container, const std::string& path,
                             const CommandContext& ctx, std::map<std::string, std::string>* env) {
  if (!container.contains("env")) return absl::OkStatus();
  const json& list = container["env"];
  if (!list.is_array()) return absl::InvalidArgumentError(path + ".env: must be a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    std::string item = absl::StrCat(path, ".env[", i, "]");
    if (!e.is_object()) return absl::InvalidArgumentError(item + ": must be an object");
    std::string name = api::StringField(e, "name");
    if (e.contains("value")) {
      if (!e["value"].is_string())
        return absl::InvalidArgumentError(item + ".value: must be a string");
      (*env)[name] = ExpandVars(e["value"].get<std::string>(), *env);
    } else if (e.contains("valueFrom") && e["valueFrom"].contains("fieldRef")) {
      absl::StatusOr<std::string> v = FieldRef(pod, e["valueFrom"]["fieldRef"], item, ctx);
      if (!v.ok()) return v.status();
      (*env)[name] = *v;
    } else if (e.contains("valueFrom") && e["valueFrom"].is_object() &&
               e["valueFrom"].contains("secretKeyRef") &&
               ctx.secrets.count(api::StringField(e["valueFrom"]["secretKeyRef"], "name")) &&
               ctx.secrets.at(api::StringField(e["valueFrom"]["secretKeyRef"], "name"))
                   .count(api::StringField(e["valueFrom"]["secretKeyRef"], "key"))) {
      // The job's own Secret, which `kubetrain run` made for this run.
      const json& ref = e["valueFrom"]["secretKeyRef"];
      (*env)[name] = ctx.secrets.at(api::StringField(ref, "name")).at(api::StringField(ref, "key"));
    } else if (e.contains("valueFrom")) {
      return absl::InvalidArgumentError(
          absl::StrCat(item, ".valueFrom: only fieldRef and the job's own Secret are available to ",
                       "local runs (no other Secrets or ConfigMaps here); set a plain value"));
    } else {
      (*env)[name] = "";
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string ExpandVars(absl::string_view input, const std::map<std::string, std::string>& vars) {
  std::string out;
  for (size_t i = 0; i < input.size(); ++i) {
    if (input[i] != '$' || i + 1 >= input.size()) {
      out += input[i];
      continue;
    }
    if (input[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    size_t close = input[i + 1] == '(' ? input.find(')', i + 2) : absl::string_view::npos;
    if (close == absl::string_view::npos) {
      out += input[i];
      continue;
    }
    std::string name(input.substr(i + 2, close - i - 2));
    auto it = vars.find(name);
    out += it != vars.end() ? it->second : std::string(input.substr(i, close - i + 1));
    i = close;
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ContainerArgv(
    const json& container, const std::map<std::string, std::string>& env,
    absl::string_view field_path) {
  std::vector<std::string> argv;
  // Appends the container's `key` list (command or args), its $(VAR)s expanded.
  auto append = [&](const char* key) -> absl::Status {
    auto list = container.find(key);
    if (list == container.end() || !list->is_array()) return absl::OkStatus();
    for (const json& word : *list) {
      if (!word.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(field_path, ".", key, ": must be a list of strings"));
      }
      argv.push_back(ExpandVars(word.get<std::string>(), env));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(append("command"));
  if (argv.empty()) {
    std::string image = api::StringField(container, "image");
    std::string repo = image.substr(0, image.find_first_of(":@"));
    if (!absl::StartsWith(repo, "kubetrain/")) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_path, ": image \"", image, "\" has no local binary and no command; ",
                       "set command (local runs map kubetrain/<name> images to kubetrain-<name>)"));
    }
    argv.push_back("kubetrain-" + repo.substr(std::string("kubetrain/").size()));
  }
  RETURN_IF_ERROR(append("args"));
  return argv;
}

absl::StatusOr<ProcessOptions> ProcessForPod(const json& pod, const CommandContext& ctx) {
  if (!pod.is_object() || !pod.contains("spec") || !pod["spec"].is_object() ||
      !pod["spec"].contains("containers") || !pod["spec"]["containers"].is_array()) {
    return absl::InvalidArgumentError("pod has no list of containers");
  }
  const json& containers = pod["spec"]["containers"];
  for (size_t i = 0; i < containers.size(); ++i) {
    const json& c = containers[i];
    if (api::StringField(c, "name") != api::kDefaultContainerName) continue;
    std::string path = absl::StrCat("containers[", i, "]");
    ProcessOptions options;
    options.env = ctx.base_env;
    absl::Status s = AddContainerEnv(pod, c, path, ctx, &options.env);
    if (!s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> argv = ContainerArgv(c, options.env, path);
    if (!argv.ok()) return argv.status();
    options.argv = *argv;
    // The build's own binaries win over anything of the same name on PATH.
    std::string path_var = options.env.count("PATH") ? options.env["PATH"] : "/usr/bin:/bin";
    if (!ctx.bin_dir.empty()) options.env["PATH"] = ctx.bin_dir + ":" + path_var;
    options.working_dir = api::StringField(c, "workingDir");
    return options;
  }
  return absl::InvalidArgumentError("pod has no container named \"kubetrain\"");
}

}  // namespace kubetrain::local
