#include "localkube/sandbox/tools.h"

#include <poll.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/process.h"
#include "common/status.h"

namespace kubetrain::sandbox {
namespace {

constexpr absl::string_view kSystemPath = "/usr/sbin:/usr/bin:/sbin:/bin";
constexpr absl::Duration kToolDeadline = absl::Seconds(10);

bool SaysNotFound(absl::string_view output) {
  for (absl::string_view phrase : {"Cannot find device", "No such file or directory",
                                   "No such device", "does not exist", "Cannot find specified"}) {
    if (absl::StrContains(output, phrase)) return true;
  }
  return false;
}

// Runs argv; `tool` and `args` name it in errors.
absl::StatusOr<std::string> Run(std::vector<std::string> argv, absl::string_view tool,
                                const std::vector<std::string>& args) {
  ProcessOptions options;
  options.argv = std::move(argv);
  options.env = {{"PATH", std::string(kSystemPath)}, {"LC_ALL", "C"}};
  ASSIGN_OR_RETURN(std::unique_ptr<Process> process, Process::Start(options));
  std::string output;
  const absl::Time deadline = absl::Now() + kToolDeadline;
  std::optional<int> code;
  while (!(code = process->Poll())) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("`", tool, " ", absl::StrJoin(args, " "),
                                                      "` did not finish within ",
                                                      absl::FormatDuration(kToolDeadline)));
    }
    struct pollfd readable = {.fd = process->output_fd(), .events = POLLIN, .revents = 0};
    if (readable.fd >= 0) ::poll(&readable, 1, 20);
    if (readable.fd < 0 || !process->ReadOutput(&output)) ::usleep(2000);
  }
  process->ReadOutput(&output);
  if (*code == 0) return output;
  std::string message = absl::StrCat("`", tool, " ", absl::StrJoin(args, " "), "` failed (exit ",
                                     *code, "): ", output);
  while (!message.empty() && message.back() == '\n') message.pop_back();
  if (SaysNotFound(output)) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

}  // namespace

absl::StatusOr<std::string> FindTool(absl::string_view tool) {
  std::optional<std::string> path = FindInPath(std::string(tool), std::string(kSystemPath));
  if (!path) {
    return absl::NotFoundError(
        absl::StrCat("iproute2's `", tool, "` is not installed (looked in ", kSystemPath, ")"));
  }
  return *path;
}

absl::StatusOr<std::string> RunTool(absl::string_view tool, const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(std::string path, FindTool(tool));
  std::vector<std::string> argv = {path};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(std::move(argv), tool, args);
}

absl::StatusOr<nlohmann::json> RunToolJson(absl::string_view tool,
                                           const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(std::string path, FindTool(tool));
  std::vector<std::string> json_args = {"-j"};
  json_args.insert(json_args.end(), args.begin(), args.end());
  // sh runs the tool with its arguments as positional parameters: nothing is re-parsed.
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>/dev/null", path};
  argv.insert(argv.end(), json_args.begin(), json_args.end());
  ASSIGN_OR_RETURN(std::string output, Run(std::move(argv), tool, json_args));
  if (output.find_first_not_of(" \n") == std::string::npos) return nlohmann::json::array();
  nlohmann::json parsed = nlohmann::json::parse(output, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) {
    return absl::InternalError(absl::StrCat("`", tool, " -j ", absl::StrJoin(args, " "),
                                            "` printed no JSON array: ", output.substr(0, 200)));
  }
  return parsed;
}

std::vector<std::string> ListNetns() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

}  // namespace kubetrain::sandbox
