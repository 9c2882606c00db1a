#include "localkube/container_process.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "localkube/pod_sandbox.h"

extern char** environ;

namespace kubetrain::localkube {
namespace {

std::string Stamp() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E9SZ", absl::Now(), absl::UTCTimeZone());
}

// Copies the child's output to the log, one stamped line per line of output, and closes `fd`.
// Once `stop` is set it drains for at most half a second more: a grandchild that left the
// process group can hold the pipe open for as long as it likes, and must not hold up its owner's
// destruction.
void CopyLines(int fd, const std::string& path, std::atomic<bool>* done,
               const std::atomic<bool>* stop) {
  std::ofstream log(path, std::ios::app);
  std::string pending;
  char buf[4096];
  absl::Time give_up = absl::InfiniteFuture();
  for (;;) {
    if (*stop && give_up == absl::InfiniteFuture()) give_up = absl::Now() + absl::Milliseconds(500);
    if (absl::Now() >= give_up) break;
    pollfd p = {fd, POLLIN, 0};
    int ready = poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    ssize_t n = read(fd, buf, sizeof(buf));  // the pipe is non-blocking
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;
    pending.append(buf, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      log << Stamp() << ' ' << pending.substr(0, nl) << '\n';
      pending.erase(0, nl + 1);
    }
    log.flush();
  }
  if (!pending.empty()) log << Stamp() << ' ' << pending << '\n';
  log.flush();
  close(fd);
  *done = true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ContainerProcess>> ContainerProcess::Start(
    const ProcessOptions& options, const std::string& log_path) {
  absl::StatusOr<std::unique_ptr<Process>> process = Process::Start(options);
  if (!process.ok()) return process.status();
  auto container = std::unique_ptr<ContainerProcess>(new ContainerProcess(std::move(*process)));
  container->reader_ = std::thread(CopyLines, container->process_->ReleaseOutput(), log_path,
                                   &container->reader_done_, &container->stop_reader_);
  return container;
}

ContainerProcess::~ContainerProcess() {
  process_.reset();  // SIGKILLs the group and reaps the child
  stop_reader_ = true;
  if (reader_.joinable()) reader_.join();
}

std::string ContainerProcess::id() const { return absl::StrCat("localkube://", pid()); }

bool ContainerProcess::Poll(int* exit_code) {
  const bool had_exited = process_->exit_code().has_value();
  std::optional<int> code = process_->Poll();
  if (!code) return false;
  // Grandchildren that still hold the output pipe go with their parent.
  if (!had_exited) process_->Signal(SIGKILL);
  if (exit_code) *exit_code = *code;
  return true;
}

std::string ProcessRuntime::ResolveBinary(
    const std::vector<std::pair<std::string, std::string>>& image_map, const std::string& image,
    std::string command) {
  // With no command the image's entrypoint runs: the program named after the image, or the
  // kubetrain- program (kubetrain/operator's entrypoint is kubetrain-operator).
  std::vector<std::string> names = {command};
  if (command.empty()) {
    std::string base = image.substr(image.rfind('/') + 1);
    base = base.substr(0, base.find(':'));
    names = {base, "kubetrain-" + base};
  }
  for (const auto& [prefix, dir] : image_map) {
    if (!absl::StartsWith(image, prefix)) continue;
    for (const std::string& name : names) {
      std::string candidate = dir + "/" + name;
      if (name.find('/') == std::string::npos && access(candidate.c_str(), X_OK) == 0) {
        return candidate;
      }
    }
  }
  return names[0];
}

std::unique_ptr<RunningContainer> ProcessRuntime::Start(const ContainerConfig& config,
                                                        StartFailure* failure) {
  ProcessOptions spec;
  if (config.sandbox) {
    // A container's base environment, not localkube's: what an image without ENV gets.
    spec.env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
                {"HOME", "/root"}};
  } else {
    // localkube's own environment and a TMPDIR of the pod's own: without a sandbox pods share
    // this host's /tmp, and one pod would see files another (or an earlier pod of the same
    // name) left behind.
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      size_t eq = kv.find('=');
      if (eq != std::string::npos) spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (!config.pod_dir.empty()) {
      std::string tmp = config.pod_dir + "/tmp";
      std::error_code ec;
      std::filesystem::create_directories(tmp, ec);
      spec.env["TMPDIR"] = tmp;
    }
  }
  // The mapped image directories first on PATH.
  std::string path = spec.env["PATH"];
  for (const auto& [prefix, dir] : image_map_) path = dir + ":" + path;
  spec.env["PATH"] = path;
  for (const auto& [k, v] : config.env) spec.env[k] = v;
  std::string first =
      ResolveBinary(image_map_, config.image, config.command.empty() ? "" : config.command[0]);
  if (config.command.empty()) {
    spec.argv.push_back(first);
  } else {
    spec.argv = config.command;
    spec.argv[0] = first;
  }
  spec.argv.insert(spec.argv.end(), config.args.begin(), config.args.end());
  spec.working_dir = config.working_dir;
  spec.not_found_exits_127 = true;  // a missing command is the container's exit 127
  if (spec.argv[0].empty()) {
    *failure = {"StartError",
                "no command specified: the pod gives no command and --image-map "
                "maps no binary for image \"" +
                    config.image + "\""};
    return nullptr;
  }
  if (config.sandbox) spec = config.sandbox->Wrap(std::move(spec), config.mounts);
  auto process = ContainerProcess::Start(spec, config.log_path);
  if (!process.ok()) {
    *failure = {"StartError", std::string(process.status().message())};
    return nullptr;
  }
  return std::move(*process);
}

}  // namespace kubetrain::localkube
