#include "localkube/pod_sandbox.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "localkube/container_process.h"

namespace kubetrain::localkube {
namespace {

// The name family of localkube's sandbox networks: a start sweeps what killed localkubes left.
constexpr char kFamily[] = "lk";

std::string BesideThisProgram(const std::string& name) {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? name : (exe.parent_path() / name).string();
}

}  // namespace

absl::StatusOr<int64_t> ParseBitRate(const std::string& text, const std::string& flag) {
  std::string lower = absl::AsciiStrToLower(text);
  const std::pair<const char*, double> units[] = {
      {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1}};
  double scale = 1;
  for (const auto& [unit, factor] : units) {
    if (lower.size() > std::strlen(unit) &&
        lower.compare(lower.size() - std::strlen(unit), std::string::npos, unit) == 0) {
      lower.resize(lower.size() - std::strlen(unit));
      scale = factor;
      break;
    }
  }
  double value = 0;
  if (!absl::SimpleAtod(lower, &value) || !std::isfinite(value) || value <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": \"", text,
        "\" is not a rate; write a positive number of bits per second with an optional unit "
        "kbit, Mbit or Gbit (as tc does), e.g. 100Mbit or 1Gbit"));
  }
  double bits = value * scale;
  if (bits < 64e3 || bits > 100e9) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": \"", text, "\" is outside the 64kbit to 100Gbit a node uplink can be shaped to"));
  }
  return static_cast<int64_t>(bits);
}

absl::StatusOr<std::unique_ptr<PodNetwork>> PodNetwork::Create(const PodNetworkOptions& options) {
  if (options.mode == "host") return nullptr;
  if (options.mode != "sandbox" && options.mode != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--pod-network: unknown mode \"", options.mode, "\"; use sandbox or host"));
  }
  std::string pod_init =
      options.pod_init.empty() ? BesideThisProgram("localkube-pod-init") : options.pod_init;
  absl::StatusOr<std::unique_ptr<sandbox::Network>> network = absl::FailedPreconditionError(
      absl::StrCat(pod_init, " is not an executable (build the localkube-pod-init target)"));
  if (access(pod_init.c_str(), X_OK) == 0) {
    network = sandbox::Network::Create({.family = kFamily,
                                        .nodes = std::max(1, options.nodes),
                                        .uplink_bits_per_second = options.uplink_bits_per_second});
  }
  if (!network.ok()) {
    if (options.mode == "sandbox" || !absl::IsFailedPrecondition(network.status())) {
      return network.status();
    }
    log::Warn("Running pods in the host's network: pod sandboxes cannot work here",
              {{"reason", std::string(network.status().message())}});
    return nullptr;
  }
  auto pods = std::unique_ptr<PodNetwork>(new PodNetwork());
  pods->network_ = std::move(*network);
  pods->pod_init_ = pod_init;
  log::Info("Created the pod network", {{"prefix", pods->network_->prefix()},
                                        {"nodes", pods->network_->nodes()},
                                        {"block", pods->network_->block_cidr()}});
  return pods;
}

absl::StatusOr<std::unique_ptr<PodSandbox>> PodNetwork::AddPod(int node, const std::string& uid) {
  node = std::clamp(node, 0, network_->nodes() - 1);
  absl::StatusOr<const sandbox::Sandbox*> s = network_->AddSandbox(node, uid);
  if (!s.ok()) return s.status();
  auto pod = std::unique_ptr<PodSandbox>(new PodSandbox());
  pod->network_ = network_.get();
  pod->sandbox_ = *s;
  pod->pod_init_ = pod_init_;
  return pod;
}

PodSandbox::~PodSandbox() {
  holder_.reset();                // SIGKILL and reap: the mount, IPC and UTS namespaces go with it
  if (network_teardown_) return;  // the whole network is removed at once right after
  if (absl::Status st = network_->RemoveSandbox(sandbox_->name()); !st.ok()) {
    log::Warn("Cannot remove a pod sandbox", {{"error", std::string(st.message())}});
  }
}

absl::Status PodSandbox::Hold(const std::string& hostname, const std::string& hosts_file,
                              const std::string& resolv_conf) {
  ProcessOptions options;
  options.argv = {pod_init_,       "hold",     "--netns", "/run/netns/" + sandbox_->netns(),
                  "--hostname",    hostname,   "--hosts", hosts_file,
                  "--resolv-conf", resolv_conf};
  options.env = {{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}};
  absl::StatusOr<std::unique_ptr<Process>> holder = Process::Start(options);
  if (!holder.ok()) return holder.status();
  // Setting up takes milliseconds; the deadline only bounds a holder that hangs.
  std::string output;
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (output.find("ready\n") == std::string::npos) {
    int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    pollfd p = {(*holder)->output_fd(), POLLIN, 0};
    if (left <= 0 || p.fd < 0 || poll(&p, 1, left) < 0 || !(*holder)->ReadOutput(&output)) {
      return absl::UnavailableError(
          absl::StrCat("cannot set up the pod's namespaces: ",
                       output.empty() ? "localkube-pod-init gave no answer" : output));
    }
  }
  holder_ = std::move(*holder);
  return absl::OkStatus();
}

ProcessOptions PodSandbox::Wrap(ProcessOptions options, const std::vector<ContainerMount>& mounts,
                                const ImageRoot* image) const {
  std::vector<std::string> argv = {pod_init_, "exec", "--pod", std::to_string(holder_->pid())};
  if (image) {
    argv.insert(argv.end(),
                {"--rootfs", image->rootfs, "--user", absl::StrCat(image->uid, ":", image->gid)});
  }
  for (const ContainerMount& m : mounts) {
    argv.insert(argv.end(), {m.read_only ? "--ro" : "--rw", m.host_path, m.container_path});
  }
  if (!options.working_dir.empty()) argv.insert(argv.end(), {"--workdir", options.working_dir});
  options.working_dir.clear();
  argv.push_back("--");
  argv.insert(argv.end(), options.argv.begin(), options.argv.end());
  options.argv = std::move(argv);
  return options;
}

}  // namespace kubetrain::localkube
