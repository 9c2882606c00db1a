// Turns a rendered pod (api::BuildPod) into the command line and environment of a local
// process, as a kubelet would: container env (values and the fieldRefs a process can have
// locally), $(VAR) expansion in command and args, and image → local binary mapping.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/process.h"

namespace kubetrain::local {

struct CommandContext {
  std::string bin_dir;                          // searched before PATH for the program
  std::map<std::string, std::string> base_env;  // inherited environment (PATH, HOME, ...)
  std::string pod_ip = "127.0.0.1";
  // Secrets that secretKeyRef may name: name → key → value (the job's own secret).
  std::map<std::string, std::map<std::string, std::string>> secrets;
};

// Kubernetes' $(VAR) expansion: $(NAME) → value when NAME is defined, kept verbatim otherwise;
// $$ → $.
std::string ExpandVars(absl::string_view input, const std::map<std::string, std::string>& vars);

// The program for a container: command[0], or from the image when there is no command:
// kubetrain/<name>[:tag] → kubetrain-<name>. Errors name the container field and the fix.
absl::StatusOr<std::vector<std::string>> ContainerArgv(
    const nlohmann::json& container, const std::map<std::string, std::string>& env,
    absl::string_view field_path);

// Process options for the "kubetrain" container of `pod`.
absl::StatusOr<ProcessOptions> ProcessForPod(const nlohmann::json& pod, const CommandContext& ctx);

}  // namespace kubetrain::local
