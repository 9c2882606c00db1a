// Over 500 lines on purpose: one pod's life (admit, mount, start, restart, stop, status, events)
// in one loop; the container environment and the runtimes are in files of their own.
// localkube's kubelet (see kubelet.h): the pod loop that admits pods, mounts their volumes,
// starts, restarts and stops their containers and publishes their status, the pod IP block and
// the hosts file. What a container is started with (its environment, $(VAR) expansion, its
// volume mounts) is in kubelet_env.cc; how it runs, in the runtime (container_process.h,
// oci_runtime.h).
#include "localkube/kubelet.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/errors.h"

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
  if (options_.runtime == "oci") {
    runtime_ = std::make_unique<OciRuntime>(options_.oci);
  } else {
    runtime_ = std::make_unique<ProcessRuntime>(options_.image_map);
  }
  ReserveIpBlock();
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

// Several localkubes share one machine's loopback: each takes a random 127.X.Y.0/24 (X >= 1,
// clear of 127.0.0.x) and holds an flock on a file naming it, so no two running instances
// ever hand out the same pod IP and pods of different instances never collide on ports.
void Kubelet::ReserveIpBlock() {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> x(1, 254), y(0, 255);
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::temp_directory_path() / "localkube-ip-blocks";
  std::filesystem::create_directories(dir, ec);
  for (int attempt = 0; attempt < 64; ++attempt) {
    block_x_ = x(rng), block_y_ = y(rng);
    std::string path = (dir / absl::StrCat("127.", block_x_, ".", block_y_)).string();
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) break;  // no lock directory: the random pick alone keeps collisions unlikely
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      block_lock_fd_ = fd;
      return;
    }
    close(fd);
  }
  log::Warn("Using an unreserved pod IP block", {{"block", ip_block()}});
}

std::string Kubelet::ip_block() const {
  return absl::StrCat("127.", block_x_, ".", block_y_, ".0/24");
}

std::string Kubelet::AllocateIp() {
  std::set<std::string> used;
  for (const auto& [key, pod] : pods_) used.insert(pod->ip);
  // Round robin over the block so a just-freed address is the last to be handed out again.
  for (int i = 0; i < 254; ++i) {
    std::string ip = absl::StrCat("127.", block_x_, ".", block_y_, ".", 1 + next_ip_++ % 254);
    if (!used.count(ip)) return ip;
  }
  // 254 live pods: spill into the following blocks, unreserved.
  int n = next_ip_++;
  return absl::StrCat("127.", block_x_, ".", (block_y_ + 1 + n / 254) % 256, ".", 1 + n % 254);
}

void Kubelet::Start() {
  // A log directory localkube makes is its own: logs and pod directories are no one else's.
  std::error_code ec;
  if (std::filesystem::create_directories(options_.log_dir, ec)) {
    chmod(options_.log_dir.c_str(), 0700);
  }
  log::Info("Reserved pod IP block", {{"block", ip_block()}, {"runtime", runtime_->name()}});
  if (auto* oci = dynamic_cast<OciRuntime*>(runtime_.get())) oci->Prepare();
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
  for (auto& [key, pod] : pods_) {
    for (Container& c : pod->containers) {
      if (c.process) c.process->Signal(SIGKILL);
    }
  }
  runtime_->Shutdown(deadline);  // from here on, containers leave their removal to Shutdown
  pods_.clear();                 // destructors reap every group
  runtime_->Shutdown(deadline);
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
      bool present = std::any_of(current.begin(), current.end(), [&](const json& p) {
        return Key(p["metadata"].value("namespace", ""), p["metadata"].value("name", "")) == key;
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
    if (e.type == "DELETED") {
      if (it != pods_.end() && it->second->uid == meta.value("uid", "")) {
        pods_.erase(it);  // kills whatever still runs
        lock.unlock();
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
      Tick(*pod);
      bool alive = std::any_of(pod->containers.begin(), pod->containers.end(),
                               [](const Container& c) { return c.process && c.process->Alive(); });
      if (pod->terminating && !alive) finished.emplace_back(pod->ns, pod->name);
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
  {
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
  WriteHosts();
  std::lock_guard<std::mutex> lock(mu_);
  if (MountVolumes(*raw)) {
    for (Container& c : raw->containers) StartContainer(*raw, c);
  }
  log::Info("Started Pod", {{"pod", Key(raw->ns, raw->name)}, {"ip", raw->ip}});
  PublishStatus(*raw);
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

// An Event about the pod, as the kubelet posts them; a repeat of the same reason and message
// raises the count of the first.
void Kubelet::RecordEvent(Pod& pod, const std::string& type, const std::string& reason,
                          const std::string& message) {
  std::string now = Now();
  std::string key = reason + "\n" + message;
  auto it = pod.events.find(key);
  if (it != pod.events.end()) {
    (void)api_->Mutate("/events", pod.ns, it->second, [&](json& e) {
      e["count"] = e.value("count", 1) + 1;
      e["lastTimestamp"] = now;
      return true;
    });
    return;
  }
  ResourceTypePtr type_ptr = api_->registry()->Find("", "v1", "events");
  if (!type_ptr) return;
  std::string name = absl::StrCat(pod.name, ".", absl::ToUnixNanos(absl::Now()));
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"name", name}, {"namespace", pod.ns}}},
                {"involvedObject",
                 {{"apiVersion", "v1"},
                  {"kind", "Pod"},
                  {"namespace", pod.ns},
                  {"name", pod.name},
                  {"uid", pod.uid}}},
                {"reason", reason},
                {"message", message},
                {"type", type},
                {"source", {{"component", "kubelet"}, {"host", "localkube"}}},
                {"reportingComponent", "kubelet"},
                {"reportingInstance", "localkube"},
                {"firstTimestamp", now},
                {"lastTimestamp", now},
                {"count", 1}};
  if (api_->Create(Target{type_ptr, pod.ns, "", ""}, event, WriteOptions{}).ok()) {
    pod.events[key] = name;
  }
  log::Warn("Pod event",
            {{"pod", Key(pod.ns, pod.name)}, {"reason", reason}, {"message", message}});
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
    if (MountVolumes(pod)) {
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

void Kubelet::PublishStatus(Pod& pod) {
  json statuses = json::array();
  int running = 0, succeeded = 0, failed = 0, pending = 0;
  for (const Container& c : pod.containers) {
    json state;
    if (!c.waiting_reason.empty()) {
      state = {{"waiting", {{"reason", c.waiting_reason}}}};
      if (!c.waiting_message.empty()) state["waiting"]["message"] = c.waiting_message;
      if (c.run == 0) ++pending;
    } else if (!c.terminated) {
      state = {{"running", {{"startedAt", c.started_at}}}};
      ++running;
    } else if (c.restart_at != absl::InfiniteFuture()) {
      state = {{"waiting",
                {{"reason", "CrashLoopBackOff"},
                 {"message", absl::StrCat("back-off restarting failed container ", c.name)}}}};
    } else {
      state = {{"terminated",
                {{"exitCode", c.exit_code},
                 {"reason", c.exec_failed      ? "StartError"
                            : c.exit_code == 0 ? "Completed"
                                               : "Error"},
                 {"startedAt", c.started_at},
                 {"finishedAt", c.finished_at}}}};
      if (c.exec_failed && !c.failure_message.empty()) {
        state["terminated"]["message"] = c.failure_message;
      }
      (c.exit_code == 0 ? succeeded : failed)++;
    }
    json last = c.terminated && c.restart_at != absl::InfiniteFuture()
                    ? json{{"terminated",
                            {{"exitCode", c.exit_code},
                             {"reason", c.exit_code == 0 ? "Completed" : "Error"},
                             {"startedAt", c.started_at},
                             {"finishedAt", c.finished_at}}}}
                    : c.last_state;
    const bool is_running = c.waiting_reason.empty() && !c.terminated;
    json status = {{"name", c.name},        {"image", c.spec.value("image", "")},
                   {"imageID", ""},         {"ready", is_running},
                   {"started", is_running}, {"restartCount", std::max(0, c.run - 1)},
                   {"state", state},        {"lastState", last}};
    if (!c.container_id.empty()) status["containerID"] = c.container_id;
    statuses.push_back(status);
  }
  size_t n = pod.containers.size();
  std::string phase = "Running";
  if (pending > 0) phase = "Pending";  // a container that never started yet
  if (running == 0 && succeeded == static_cast<int>(n)) phase = "Succeeded";
  if (running == 0 && failed > 0 && succeeded + failed == static_cast<int>(n)) {
    std::string policy = pod.object["spec"].value("restartPolicy", "Always");
    bool will_restart =
        std::any_of(pod.containers.begin(), pod.containers.end(),
                    [](const Container& c) { return c.restart_at != absl::InfiniteFuture(); });
    if (!will_restart) phase = "Failed";
  }
  std::string ready = running == static_cast<int>(n) && n > 0 ? "True" : "False";
  std::string now = Now();
  json conditions = json::array();
  for (const char* type : {"PodScheduled", "Initialized", "ContainersReady", "Ready"}) {
    bool always = std::string(type) == "PodScheduled" || std::string(type) == "Initialized";
    conditions.push_back({{"type", type},
                          {"status", always ? "True" : ready},
                          {"lastProbeTime", nullptr},
                          {"lastTransitionTime", now}});
  }
  std::string ip = pod.ip;
  std::string start = pod.start_time;
  (void)api_->Mutate("/pods", pod.ns, pod.name, [&](json& live) {
    if (live["metadata"].value("uid", "") != pod.uid) return false;
    live["spec"]["nodeName"] = "localkube";
    json& status = live["status"];
    // Keep transition times stable when a condition's status did not change.
    for (auto& c : conditions) {
      for (const auto& old : status.value("conditions", json::array())) {
        if (old.value("type", "") == c["type"] && old.value("status", "") == c["status"]) {
          c["lastTransitionTime"] = old.value("lastTransitionTime", now);
        }
      }
    }
    status["phase"] = phase;
    status["podIP"] = ip;
    status["podIPs"] = {{{"ip", ip}}};
    status["hostIP"] = ip;
    status["hostIPs"] = {{{"ip", ip}}};
    status["startTime"] = start;
    status["conditions"] = conditions;
    status["containerStatuses"] = statuses;
    return true;
  });
}

void Kubelet::WriteHosts() {
  // Cluster DNS for headless Services with a selector: <svc>.<ns>.svc[.cluster.local] names the
  // IPs of the pods it selects, as CoreDNS answers for a headless Service's endpoints.
  struct Headless {
    std::string name, ns;
    std::vector<std::pair<std::string, std::string>> selector;
  };
  std::vector<Headless> services;
  int64_t revision = 0;
  for (const json& svc : api_->store()->List("/services", "", &revision)) {
    const json& spec = svc.value("spec", json::object());
    const json& selector = spec.value("selector", json::object());
    if (spec.value("clusterIP", "") != "None" || !selector.is_object() || selector.empty())
      continue;
    Headless h{svc["metadata"].value("name", ""), svc["metadata"].value("namespace", ""), {}};
    for (const auto& [k, v] : selector.items()) {
      if (v.is_string()) h.selector.emplace_back(k, v.get<std::string>());
    }
    if (!h.selector.empty()) services.push_back(std::move(h));
  }
  std::string text = "127.0.0.1 localhost\n";
  std::vector<std::string> copies;  // each pod's own copy (a real kubelet's etc-hosts)
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Pods by "namespace\nkey=value" of each label: a Service's candidates are the pods with its
    // first selector label, then checked against the rest.
    std::map<std::string, std::vector<const Pod*>> by_label;
    for (const auto& [key, pod] : pods_) {
      const json& labels = pod->object["metadata"].value("labels", json::object());
      if (!labels.is_object()) continue;
      for (const auto& [k, v] : labels.items()) {
        if (v.is_string())
          by_label[absl::StrCat(pod->ns, "\n", k, "=", v.get<std::string>())].push_back(pod.get());
      }
    }
    std::map<const Pod*, std::vector<std::string>> service_names;
    for (const Headless& h : services) {
      auto it =
          by_label.find(absl::StrCat(h.ns, "\n", h.selector[0].first, "=", h.selector[0].second));
      if (it == by_label.end()) continue;
      for (const Pod* pod : it->second) {
        const json& labels = pod->object["metadata"]["labels"];
        bool selected = true;
        for (const auto& [k, v] : h.selector) selected = selected && labels.value(k, json()) == v;
        if (!selected) continue;
        std::string fq = absl::StrCat(h.name, ".", h.ns, ".svc");
        service_names[pod].push_back(fq);
        service_names[pod].push_back(fq + ".cluster.local");
      }
    }
    for (const auto& [key, pod] : pods_) {
      const json& spec = pod->object["spec"];
      std::string host = spec.value("hostname", pod->name);
      std::vector<std::string> names = {host};
      std::string sub = spec.value("subdomain", "");
      if (!sub.empty()) {
        std::string fq = absl::StrCat(host, ".", sub, ".", pod->ns, ".svc");
        names.push_back(host + "." + sub);
        names.push_back(fq);
        names.push_back(fq + ".cluster.local");
      }
      auto extra = service_names.find(pod.get());
      if (extra != service_names.end()) {
        names.insert(names.end(), extra->second.begin(), extra->second.end());
      }
      text += absl::StrCat(pod->ip, " ", absl::StrJoin(names, " "), "\n");
    }
    // Rewritten in place so that the mount sees the change; unchanged text goes only to the
    // copies of pods that have none yet.
    const bool changed = text != hosts_text_;
    std::set<std::string> dirs;
    for (const auto& [key, pod] : pods_) {
      dirs.insert(pod->dir);
      if (changed || !hosts_dirs_.count(pod->dir)) copies.push_back(pod->dir + "/etc-hosts");
    }
    hosts_dirs_ = std::move(dirs);
    if (!changed && copies.empty()) return;
    hosts_text_ = text;
  }
  for (const std::string& copy : copies) std::ofstream(copy, std::ios::trunc) << text;
  if (options_.hosts_file.empty()) return;
  std::string tmp = options_.hosts_file + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), options_.hosts_file.c_str());
}

absl::StatusOr<std::string> Kubelet::LogPath(const std::string& ns, const std::string& pod,
                                             const std::string& container, bool previous) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(Key(ns, pod));
  if (it == pods_.end()) {
    return BadRequestError(absl::StrCat("container \"", container, "\" in pod \"", pod,
                                        "\" is waiting to start: ContainerCreating"));
  }
  for (const Container& c : it->second->containers) {
    if (c.name != container) continue;
    if (!previous && c.run < 1) {
      return BadRequestError(
          absl::StrCat("container \"", container, "\" in pod \"", pod, "\" is waiting to start: ",
                       c.waiting_reason.empty() ? "ContainerCreating" : c.waiting_reason));
    }
    int run = previous ? c.run - 1 : c.run;
    if (run < 1) {
      return BadRequestError(absl::StrCat("previous terminated container \"", container,
                                          "\" in pod \"", pod, "\" not found"));
    }
    return absl::StrCat(it->second->dir, "/", c.name, ".", run, ".log");
  }
  return BadRequestError(absl::StrCat("container ", container, " is not valid for pod ", pod));
}

bool Kubelet::Running(const std::string& ns, const std::string& pod, const std::string& container) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pods_.find(Key(ns, pod));
  if (it == pods_.end()) return false;
  for (const Container& c : it->second->containers) {
    if (c.name == container) return c.process && c.process->Alive();
  }
  return false;
}

}  // namespace kubetrain::localkube
