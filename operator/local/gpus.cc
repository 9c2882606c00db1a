#include "operator/local/gpus.h"

#include <poll.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/process.h"

namespace kubetrain::local {
namespace {

bool IsIndex(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// `nvidia-smi -L`'s GPU count, or nullopt when it is not installed, fails or hangs.
std::optional<int> NvidiaSmiGpus() {
  const char* path_env = std::getenv("PATH");
  const std::string path = path_env != nullptr ? path_env : "/usr/bin:/bin";
  if (!FindInPath("nvidia-smi", path).has_value()) return std::nullopt;
  ProcessOptions options;
  options.argv = {"nvidia-smi", "-L"};
  options.env = {{"PATH", path}};
  absl::StatusOr<std::unique_ptr<Process>> started = Process::Start(options);
  if (!started.ok()) return std::nullopt;
  Process& process = **started;
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  std::string output;
  while (process.output_fd() >= 0 && output.size() < (size_t{1} << 20)) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;  // ~Process kills it
    pollfd fd{process.output_fd(), POLLIN, 0};
    poll(&fd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (!process.ReadOutput(&output)) break;
  }
  std::optional<int> code;
  while (!(code = process.Poll()).has_value() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (!code.has_value() || *code != 0) return std::nullopt;
  return CountNvidiaSmiGpus(output);
}

int ProcGpus() {
  std::error_code ec;
  int n = 0;
  for (std::filesystem::directory_iterator it("/proc/driver/nvidia/gpus", ec), end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

}  // namespace

std::vector<std::string> ParseCudaVisibleDevices(absl::string_view value) {
  std::vector<std::string> ids;
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (!IsIndex(entry) && !absl::StartsWith(entry, "GPU-") && !absl::StartsWith(entry, "MIG-")) {
      break;
    }
    ids.emplace_back(entry);
  }
  return ids;
}

int CountNvidiaSmiGpus(absl::string_view output) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StartsWith(line, "GPU ")) ++n;
  }
  return n;
}

std::vector<std::string> GpuIds(const std::optional<std::string>& cuda_visible_devices,
                                int counted) {
  if (cuda_visible_devices.has_value()) return ParseCudaVisibleDevices(*cuda_visible_devices);
  std::vector<std::string> ids;
  for (int i = 0; i < counted; ++i) ids.push_back(std::to_string(i));
  return ids;
}

std::vector<std::string> DetectGpus() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    return GpuIds(std::string(visible), 0);
  }
  std::optional<int> counted = NvidiaSmiGpus();
  return GpuIds(std::nullopt, counted.has_value() ? *counted : ProcGpus());
}

std::vector<std::string> AssignGpus(const std::vector<api::Task>& tasks,
                                    const std::vector<std::string>& gpus) {
  std::vector<std::string> assigned(tasks.size());
  if (gpus.empty()) return assigned;
  size_t next = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].type == api::ReplicaType::kPS) continue;
    assigned[i] = gpus[next++ % gpus.size()];
  }
  return assigned;
}

}  // namespace kubetrain::local
