// localkube's kubelet (see kubelet.h): the pod loop that admits pods, mounts their volumes,
// starts, restarts and stops their containers. What it reports (pod status, Events, logs) is in
// kubelet_status.cc; the pod IP block and the hosts file in kubelet_network.cc; what a container
// is started with (its environment, $(VAR) expansion, its volume mounts) in kubelet_env.cc; how it
// runs, in the runtime (container_process.h, oci_runtime.h).
#include "localkube/kubelet.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

std::string Now() { return KubeTime(absl::Now()); }

std::optional<int64_t> SecurityField(const json& pod, const json& container, const char* field) {
  for (const json* holder : {&container, &pod["spec"]}) {
    const json ctx = holder->value("securityContext", json::object());
    if (ctx.is_object() && ctx.contains(field) && ctx[field].is_number_integer()) {
      return ctx[field].get<int64_t>();
    }
  }
  return std::nullopt;
}

}  // namespace

Kubelet::Kubelet(KubeletOptions options, Api* api) : options_(std::move(options)), api_(api) {
  node_state_.assign(options_.node_names.size(), NodeState::kUp);
  if (options_.runtime == "oci") {
    runtime_ = std::make_unique<OciRuntime>(options_.oci);
  } else {
    runtime_ = std::make_unique<ProcessRuntime>(options_.image_map);
  }
  PodNetworkOptions network = options_.pod_network;
  network.nodes = std::max<int>(1, static_cast<int>(options_.node_names.size()));
  absl::StatusOr<std::unique_ptr<PodNetwork>> made = PodNetwork::Create(network);
  if (made.ok()) {
    network_ = std::move(*made);
  } else {
    pod_network_status_ = made.status();
  }
  if (!network_) ReserveIpBlock();
}

absl::Status Kubelet::CheckOptions(const KubeletOptions& options) {
  if (options.runtime == "process") return absl::OkStatus();
  if (options.runtime == "oci") return OciRuntime::Usable(options.oci);
  return absl::InvalidArgumentError(
      absl::StrCat("--runtime: unknown runtime \"", options.runtime, "\"; use process or oci"));
}

void Kubelet::SetApiServer(const std::string& host, int port) {
  api_host_ = host;
  api_port_ = port;
}

Kubelet::~Kubelet() {
  Stop();
  if (block_lock_fd_ >= 0) close(block_lock_fd_);
}

void Kubelet::Start() {
  // A log directory localkube makes is its own: logs and pod directories are no one else's.
  std::error_code ec;
  if (std::filesystem::create_directories(options_.log_dir, ec)) {
    chmod(options_.log_dir.c_str(), 0700);
  }
  if (!network_) {
    log::Info("Reserved pod IP block", {{"block", ip_block()}, {"runtime", runtime_->name()}});
  }
  if (auto* oci = dynamic_cast<OciRuntime*>(runtime_.get())) oci->Prepare();
  if (network_) StartClusterDns();
  WriteHosts();
  thread_ = std::thread([this] { Loop(); });
}

void Kubelet::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  // Bounded: every container is killed at once, then what the runtime holds is removed within
  // a second, so localkube still exits within 2 s of SIGTERM (architecture.md §9 "Stopping").
  absl::Time deadline = absl::Now() + absl::Seconds(1);
  auto kill = [](Pod& pod) {
    for (Container& c : pod.containers) {
      if (c.process) c.process->Signal(SIGKILL);
    }
    if (pod.sandbox) pod.sandbox->LeaveToNetworkTeardown();
  };
  for (auto& [key, pod] : pods_) kill(*pod);
  for (auto& pod : superseded_) kill(*pod);
  runtime_->Shutdown(deadline);  // from here on, containers leave their removal to Shutdown
  pods_.clear();                 // destructors reap every group, then remove the sandboxes
  superseded_.clear();
  runtime_->Shutdown(deadline);
  dns_.reset();
  network_.reset();  // the nodes' bridges
}

void Kubelet::Loop() {
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    Sync();
    api_->store()->WaitForChange(cursor_, absl::Now() + absl::Milliseconds(100));
  }
}

void Kubelet::Sync() {
  std::vector<StoreEvent> events;
  int64_t scanned = cursor_;
  std::vector<json> current;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (resync_) cursor_ = 0;  // a node is back: what its kubelet missed is in no event it saw
    resync_ = false;
  }
  if (cursor_ == 0 || !api_->store()->EventsAfter("/pods", cursor_, &events, &scanned).ok()) {
    // First pass, or history was compacted under us: resync from a full list.
    current = api_->store()->List("/pods", "", &scanned);
    events.clear();
    for (auto& p : current) events.push_back({scanned, "MODIFIED", "/pods", p, p});
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& entry : pods_) {
      // Plain references, not structured bindings: the lambda below captures `key`, which
      // clang accepts only from version 16.
      const auto& key = entry.first;
      auto& pod = entry.second;
      // Gone, or a new pod of the same name (another uid) in its place.
      bool present = std::any_of(current.begin(), current.end(), [&](const json& p) {
        return Key(p["metadata"].value("namespace", ""), p["metadata"].value("name", "")) == key &&
               p["metadata"].value("uid", "") == pod->uid;
      });
      if (!present) events.push_back({scanned, "DELETED", "/pods", pod->object, pod->object});
    }
  }
  cursor_ = scanned;
  for (const StoreEvent& e : events) {
    const json& meta = e.object["metadata"];
    std::string key = Key(meta.value("namespace", ""), meta.value("name", ""));
    std::unique_lock<std::mutex> lock(mu_);
    auto it = pods_.find(key);
    bool bound = !e.object["spec"].value("nodeName", "").empty();
    if (it != pods_.end() && it->second->uid != meta.value("uid", "") &&
        !Connected(it->second->node) && bound && Connected(NodeIndex(e.object))) {
      // A new pod of the name on a node that answers, the old one's node cut off: each node has
      // a kubelet of its own, so the new one starts now and the old one is stopped once its node
      // is back (SetNodeState).
      superseded_.push_back(std::move(it->second));
      pods_.erase(it);
      it = pods_.end();
    }
    // A pod of a node whose kubelet is cut off or down: it learns of the change once back.
    if ((it != pods_.end() || bound) &&
        !Connected(it != pods_.end() ? it->second->node : NodeIndex(e.object))) {
      continue;
    }
    if (e.type == "DELETED") {
      if (it != pods_.end() && it->second->uid == meta.value("uid", "")) {
        std::string volumes = it->second->dir + "/volumes";
        pods_.erase(it);  // kills whatever still runs
        lock.unlock();
        // The pod's own volumes (emptyDir, configMap, secret, ...) go with it, as the kubelet
        // removes /var/lib/kubelet/pods/<uid>; its logs stay. Claims' volumes live elsewhere.
        std::error_code ignored;
        std::filesystem::remove_all(volumes, ignored);
        WriteHosts();
      }
      continue;
    }
    if (it == pods_.end() || it->second->uid != meta.value("uid", "")) {
      if (meta.contains("deletionTimestamp")) {
        lock.unlock();
        api_->FinishPodDeletion(meta.value("namespace", ""), meta.value("name", ""));
        continue;
      }
      lock.unlock();
      // Not (yet) bound to one of our nodes: the scheduler's Binding brings it back. A pod
      // bound to a node that does not exist stays Pending (a cluster's PodGC deletes it).
      if (!options_.node_names.empty() &&
          std::find(options_.node_names.begin(), options_.node_names.end(),
                    e.object["spec"].value("nodeName", "")) == options_.node_names.end()) {
        continue;
      }
      Admit(e.object);
      continue;
    }
    it->second->object = e.object;
    if (meta.contains("deletionTimestamp") && !it->second->terminating) {
      BeginTermination(*it->second, meta.value("deletionGracePeriodSeconds", int64_t{30}));
    }
  }
  std::vector<std::pair<std::string, std::string>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, pod] : pods_) {
      if (!node_state_.empty() && node_state_[pod->node] == NodeState::kDown) continue;
      Tick(*pod);
      bool alive = std::any_of(pod->containers.begin(), pod->containers.end(),
                               [](const Container& c) { return c.process && c.process->Alive(); });
      if (pod->terminating && !alive && Connected(pod->node)) {
        finished.emplace_back(pod->ns, pod->name);
      }
    }
  }
  for (auto& [ns, name] : finished) api_->FinishPodDeletion(ns, name);
  WriteHosts();  // a Service created or deleted since changes the names (a no-op otherwise)
}

void Kubelet::Admit(const json& object) {
  auto pod = std::make_unique<Pod>();
  pod->ns = object["metadata"].value("namespace", "");
  pod->name = object["metadata"].value("name", "");
  pod->uid = object["metadata"].value("uid", "");
  pod->object = object;
  pod->node = NodeIndex(object);
  if (!network_) {
    std::lock_guard<std::mutex> lock(mu_);
    pod->ip = AllocateIp();
  }
  pod->dir = absl::StrCat(options_.log_dir, "/", pod->ns, "_", pod->name, "_", pod->uid);
  pod->start_time = Now();
  // The pod's volumes (tokens, secrets) live below: open to localkube's user alone.
  std::filesystem::create_directories(pod->dir);
  chmod(pod->dir.c_str(), 0700);
  for (const auto& c : object["spec"].value("containers", json::array())) {
    Container container;
    container.name = c.value("name", "");
    container.spec = c;
    pod->containers.push_back(std::move(container));
  }
  Pod* raw = pod.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    pods_[Key(raw->ns, raw->name)] = std::move(pod);
  }
  std::lock_guard<std::mutex> lock(mu_);
  WriteHostsLocked();
  if ((!network_ || SetUpSandbox(*raw)) && MountVolumes(*raw)) {
    for (Container& c : raw->containers) StartContainer(*raw, c);
  }
  log::Info("Started Pod", {{"pod", Key(raw->ns, raw->name)}, {"ip", raw->ip}});
  PublishStatus(*raw);
}

int Kubelet::NodeIndex(const json& pod) const {
  const std::string node = pod["spec"].value("nodeName", "");
  for (size_t i = 0; i < options_.node_names.size(); ++i) {
    if (options_.node_names[i] == node) return static_cast<int>(i);
  }
  return 0;
}

bool Kubelet::SetUpSandbox(Pod& pod) {
  absl::Status st;
  if (!pod.sandbox) {
    absl::StatusOr<std::unique_ptr<PodSandbox>> sandbox = network_->AddPod(pod.node, pod.uid);
    if (sandbox.ok()) {
      pod.sandbox = std::move(*sandbox);
      pod.ip = pod.sandbox->ip();
      pod.host_ip = pod.api_host = network_->node_gateway(pod.node);
      WriteHostsLocked();  // the pod's /etc/hosts, before the holder mounts it
    }
    st = sandbox.status();
  }
  if (st.ok() && !pod.sandbox->holding()) {
    st = WriteResolvConf(pod);
    if (st.ok()) {
      st = pod.sandbox->Hold(pod.object["spec"].value("hostname", pod.name), pod.dir + "/etc-hosts",
                             pod.dir + "/resolv.conf");
    }
  }
  if (st.ok()) return true;
  for (Container& c : pod.containers) {
    c.waiting_reason = "ContainerCreating";
    c.waiting_message.clear();
  }
  pod.mount_retry_at = absl::Now() + pod.mount_backoff;
  pod.mount_backoff = std::min(pod.mount_backoff * 2, options_.max_backoff);
  RecordEvent(pod, "Warning", "FailedCreatePodSandBox",
              absl::StrCat("Failed to create pod sandbox: ", st.message()));
  return false;
}

bool Kubelet::MountVolumes(Pod& pod) {
  VolumeContext context{api_->store(), options_.service_account_token, pod.ip};
  absl::StatusOr<std::map<std::string, PodVolume>> volumes =
      SetUpVolumes(pod.object, pod.dir, context);
  if (!volumes.ok()) {
    // As a kubelet: the pod stays ContainerCreating, a FailedMount event says why, and the
    // mount is retried with backoff.
    for (Container& c : pod.containers) {
      c.waiting_reason = "ContainerCreating";
      c.waiting_message.clear();
    }
    pod.mount_retry_at = absl::Now() + pod.mount_backoff;
    pod.mount_backoff = std::min(pod.mount_backoff * 2, options_.max_backoff);
    RecordEvent(pod, "Warning", "FailedMount", std::string(volumes.status().message()));
    return false;
  }
  pod.volumes = std::move(*volumes);
  pod.volumes_ready = true;
  return true;
}

void Kubelet::Wait(Pod& pod, Container& c, const std::string& reason, const std::string& message) {
  c.waiting_reason = reason;
  c.waiting_message = message;
  c.terminated = false;
  c.restart_at = absl::Now() + c.backoff;
  c.backoff = std::min(c.backoff * 2, options_.max_backoff);
  RecordEvent(pod, "Warning", "Failed", absl::StrCat("Error: ", reason, ": ", message));
}

void Kubelet::StartContainer(Pod& pod, Container& c) {
  std::map<std::string, std::string> vars;
  std::string config_error;
  ContainerConfig config;
  config.env = Environment(pod, c, &vars, &config_error);
  if (config_error.empty()) config_error = Mounts(pod, c, &config.mounts);
  if (!config_error.empty()) {
    Wait(pod, c, "CreateContainerConfigError", config_error);
    return;
  }
  if (pod.sandbox) {
    // The programs images map to (--image-map) stay visible where the pod's own /tmp, /run and
    // /dev/shm cover the host's, as an image's files are in its container: read-only, at the
    // same path.
    for (const auto& [prefix, dir] : options_.image_map) {
      for (const char* covered : {"/tmp/", "/run/", "/dev/shm/"}) {
        std::error_code ec;
        if (absl::StartsWith(dir, covered) && std::filesystem::is_directory(dir, ec)) {
          config.mounts.push_back({.host_path = dir, .container_path = dir, .read_only = true});
        }
      }
    }
  }
  for (const auto& s : c.spec.value("command", json::array())) {
    if (s.is_string()) config.command.push_back(Expand(s, vars));
  }
  for (const auto& s : c.spec.value("args", json::array())) {
    if (s.is_string()) config.args.push_back(Expand(s, vars));
  }
  config.image = c.spec.value("image", "");
  config.working_dir = c.spec.value("workingDir", "");
  config.run_as_user = SecurityField(pod.object, c.spec, "runAsUser");
  config.run_as_group = SecurityField(pod.object, c.spec, "runAsGroup");
  for (const json* holder : {&c.spec, &pod.object["spec"]}) {
    const json ctx = holder->value("securityContext", json::object());
    if (ctx.is_object() && ctx.contains("runAsNonRoot") && ctx["runAsNonRoot"].is_boolean()) {
      config.run_as_non_root = ctx["runAsNonRoot"].get<bool>();
      break;
    }
  }
  config.id = absl::StrCat(pod.uid, "-", c.name, "-", c.run + 1);
  config.etc_hosts = pod.dir + "/etc-hosts";
  config.sandbox = pod.sandbox.get();
  config.pod_dir = pod.dir;
  config.log_path = absl::StrCat(pod.dir, "/", c.name, ".", c.run + 1, ".log");
  std::ofstream(config.log_path, std::ios::app).flush();
  c.restart_at = absl::InfiniteFuture();
  StartFailure failure;
  std::unique_ptr<RunningContainer> started = runtime_->Start(config, &failure);
  if (!started && failure.reason != "StartError") {
    Wait(pod, c, failure.reason, failure.message);
    return;
  }
  c.run++;
  c.started_at = Now();
  c.terminated = false;
  c.waiting_reason.clear();
  c.waiting_message.clear();
  if (!started) {
    c.terminated = true;
    c.exec_failed = true;
    c.exit_code = 128;
    c.failure_message = failure.message;
    c.finished_at = Now();
    return;
  }
  c.exec_failed = false;
  c.failure_message.clear();
  c.container_id = started->id();
  c.process = std::move(started);
}

void Kubelet::BeginTermination(Pod& pod, int64_t grace_seconds) {
  pod.terminating = true;
  pod.kill_at = absl::Now() + absl::Seconds(grace_seconds);
  for (Container& c : pod.containers) {
    if (c.process && !c.terminated) c.process->Signal(SIGTERM);
  }
  log::Info("Stopping Pod", {{"pod", Key(pod.ns, pod.name)}, {"grace_seconds", grace_seconds}});
}

void Kubelet::Tick(Pod& pod) {
  bool changed = false;
  std::string policy = pod.object["spec"].value("restartPolicy", "Always");
  if (!pod.volumes_ready && !pod.terminating && absl::Now() >= pod.mount_retry_at) {
    if ((!network_ || SetUpSandbox(pod)) && MountVolumes(pod)) {
      for (Container& c : pod.containers) StartContainer(pod, c);
      changed = true;
    }
  }
  for (Container& c : pod.containers) {
    if (!c.waiting_reason.empty() && pod.volumes_ready && !pod.terminating &&
        absl::Now() >= c.restart_at) {
      std::string before = c.waiting_reason + "\n" + c.waiting_message;
      StartContainer(pod, c);
      changed = changed || before != c.waiting_reason + "\n" + c.waiting_message;
      continue;
    }
    int code = 0;
    if (c.process && !c.terminated && c.process->Poll(&code)) {
      c.terminated = true;
      c.exit_code = code;
      c.finished_at = Now();
      changed = true;
      bool restart =
          !pod.terminating && (policy == "Always" || (policy == "OnFailure" && code != 0));
      if (restart) {
        c.restart_at = absl::Now() + c.backoff;
        c.backoff = std::min(c.backoff * 2, options_.max_backoff);
      }
    }
    if (c.terminated && !pod.terminating && absl::Now() >= c.restart_at) {
      c.last_state = {{"terminated",
                       {{"exitCode", c.exit_code},
                        {"reason", c.exit_code == 0 ? "Completed" : "Error"},
                        {"startedAt", c.started_at},
                        {"finishedAt", c.finished_at}}}};
      c.process.reset();
      StartContainer(pod, c);
      changed = true;
    }
  }
  if (pod.terminating && absl::Now() >= pod.kill_at) {
    for (Container& c : pod.containers) {
      if (c.process) c.process->Signal(SIGKILL);
    }
    pod.kill_at = absl::InfiniteFuture();
  }
  if (changed && !pod.terminating) PublishStatus(pod);
}

}  // namespace kubetrain::localkube
