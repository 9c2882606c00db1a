// localkube's kubelet (see kubelet.h): the pod loop that admits pods, starts, restarts and
// stops their containers and publishes their status, the pod IP block and the hosts file. What
// a container is started with (its environment, $(VAR) expansion, the binary its image names) is
// in kubelet_env.cc.
#include "e2e/localkube/kubelet.h"

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
#include "e2e/localkube/errors.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

std::string Now() { return KubeTime(absl::Now()); }

}  // namespace

Kubelet::Kubelet(KubeletOptions options, Api* api) : options_(std::move(options)), api_(api) {
  ReserveIpBlock();
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
  std::filesystem::create_directories(options_.log_dir);
  log::Info("Reserved pod IP block", {{"block", ip_block()}});
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
  pods_.clear();  // Process destructors kill and reap every group
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
  std::filesystem::create_directories(pod->dir);
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
  for (Container& c : raw->containers) StartContainer(*raw, c);
  log::Info("Started Pod", {{"pod", Key(raw->ns, raw->name)}, {"ip", raw->ip}});
  PublishStatus(*raw);
}

void Kubelet::StartContainer(Pod& pod, Container& c) {
  std::map<std::string, std::string> vars;
  ProcessOptions spec;
  spec.env = Environment(pod, c, &vars);
  std::vector<std::string> command, args;
  for (const auto& s : c.spec.value("command", json::array())) command.push_back(Expand(s, vars));
  for (const auto& s : c.spec.value("args", json::array())) args.push_back(Expand(s, vars));
  std::string image = c.spec.value("image", "");
  std::string first = ResolveBinary(image, command.empty() ? "" : command[0]);
  if (command.empty()) {
    spec.argv.push_back(first);
  } else {
    spec.argv = command;
    spec.argv[0] = first;
  }
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.working_dir = c.spec.value("workingDir", "");
  spec.not_found_exits_127 = true;  // a missing command is the container's exit 127
  c.run++;
  const std::string log_path = absl::StrCat(pod.dir, "/", c.name, ".", c.run, ".log");
  std::ofstream(log_path, std::ios::app).flush();
  c.started_at = Now();
  c.terminated = false;
  c.restart_at = absl::InfiniteFuture();
  auto process = ContainerProcess::Start(spec, log_path);
  if (!process.ok() || spec.argv[0].empty()) {
    c.terminated = true;
    c.exec_failed = true;
    c.exit_code = 128;
    c.finished_at = Now();
    return;
  }
  c.process = std::move(*process);
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
  for (Container& c : pod.containers) {
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
  int running = 0, succeeded = 0, failed = 0;
  for (const Container& c : pod.containers) {
    json state;
    if (!c.terminated) {
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
      (c.exit_code == 0 ? succeeded : failed)++;
    }
    json last = c.terminated && c.restart_at != absl::InfiniteFuture()
                    ? json{{"terminated",
                            {{"exitCode", c.exit_code},
                             {"reason", c.exit_code == 0 ? "Completed" : "Error"},
                             {"startedAt", c.started_at},
                             {"finishedAt", c.finished_at}}}}
                    : c.last_state;
    statuses.push_back(
        {{"name", c.name},
         {"image", c.spec.value("image", "")},
         {"imageID", ""},
         {"containerID", absl::StrCat("localkube://", c.process ? c.process->pid() : 0)},
         {"ready", !c.terminated},
         {"started", !c.terminated},
         {"restartCount", std::max(0, c.run - 1)},
         {"state", state},
         {"lastState", last}});
  }
  size_t n = pod.containers.size();
  std::string phase = "Running";
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
  if (options_.hosts_file.empty()) return;
  std::string text = "127.0.0.1 localhost\n";
  {
    std::lock_guard<std::mutex> lock(mu_);
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
      text += absl::StrCat(pod->ip, " ", absl::StrJoin(names, " "), "\n");
    }
  }
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
