// operator_scale: how the real kubetrain-operator binary copes with many TrainingJobs created at
// once, against a localkube API server this program starts itself (no --run-pods: pods are
// objects only, their status is written by this program as a kubelet would).
//
//   build/bin/operator_scale [--jobs=500] [--workers-per-job=3] [--operator-workers=4]
//                            [--qps=50] [--burst=100] [--timeout=15m] [--json]
//
// Phases, all in one run:
//   1. localkube + the TrainingJob CRD, then `kubetrain-operator` as a child process (metrics and
//      health on free 127.0.0.1 ports).
//   2. N TrainingJobs of 1 PS + W Workers are created at once from --client-threads threads.
//   3. Time until all N×(1+W) pods exist (seen by a pod informer).
//   4. Every pod is patched to Running (status subresource), then, once every job reports its
//      Running condition, each chief (worker-0) is patched to Succeeded with exit code 0, all at
//      once. Per job: time from sending the chief's patch to the job's Succeeded condition (seen
//      by a TrainingJob informer); p50/p99 over jobs.
//   5. The operator's own /metrics give its API requests by verb; Events it wrote are counted
//      with a list of core/v1 events (the metric does not split "create" by resource).
//
// "Ideal" writes per job are defined as 8: 5 creates (1 Service + 4 Pods for the default shape)
// plus 3 status writes (Created, Running, Succeeded). For other shapes it is 1 + pods + 3.
// Cleanup deletes (running PS/workers and the Service once the job succeeds) are real work the
// default cleanPodPolicy asks for, and they are counted in "writes", so the ratio cannot reach 1.
// Nothing is asserted on timings: the CTest smoke run only checks that the report is printed.
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags.h"
#include "common/host_port.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/api/types.h"
#include "operator/api/yaml.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/kube/informer.h"
#include "operator/local/process.h"

namespace kubetrain {
namespace {

namespace fs = std::filesystem;
using kube::Resource;
using nlohmann::json;

constexpr int kIdealCreatesBase = 1;  // the Service; pods are added per shape
constexpr int kIdealStatusWrites = 3;

struct Options {
  int jobs = 500;
  int workers_per_job = 3;
  int operator_workers = 4;
  double qps = 50;  // the operator's own defaults: measure what ships
  int burst = 100;
  int client_threads = 4;
  std::string localkube;
  std::string operator_path;
  std::string crd =
      std::string(KUBETRAIN_SOURCE_DIR) + "/deploy/crd/kubetrain.dev_trainingjobs.yaml";
  absl::Duration timeout = absl::Minutes(15);
  bool json = false;
  bool keep_logs = false;
};

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  FlagSet f("operator_scale",
            "Creates many TrainingJobs at once against a localkube it starts, runs the real\n"
            "kubetrain-operator on them, and reports pod-creation time, job-success latency,\n"
            "API writes per job and the operator's peak RSS.");
  f.Add("jobs", &o.jobs, "TrainingJobs created at once");
  f.Add("workers-per-job", &o.workers_per_job, "Worker replicas per job (plus 1 PS)");
  f.Add("operator-workers", &o.operator_workers, "the operator's --workers");
  f.Add("qps", &o.qps, "the operator's --qps");
  f.Add("burst", &o.burst, "the operator's --burst");
  f.Add("client-threads", &o.client_threads, "threads creating jobs and patching pods");
  f.Add("localkube", &o.localkube, "localkube binary (default: next to this executable)");
  f.Add("operator", &o.operator_path,
        "kubetrain-operator binary (default: next to this executable)");
  f.Add("crd", &o.crd, "TrainingJob CRD manifest");
  f.Add("timeout", &o.timeout, "give up after this long in all");
  f.Add("json", &o.json, "print the report as JSON instead of a table");
  f.Add("keep-logs", &o.keep_logs, "keep the temp dir with localkube's and the operator's logs");
  ASSIGN_OR_RETURN(std::vector<std::string> rest, f.Parse(argc, argv));
  if (!rest.empty()) return absl::InvalidArgumentError("unexpected argument \"" + rest[0] + "\"");
  if (o.jobs < 1) return absl::InvalidArgumentError("--jobs: must be >= 1");
  if (o.workers_per_job < 1) return absl::InvalidArgumentError("--workers-per-job: must be >= 1");
  if (o.operator_workers < 1) return absl::InvalidArgumentError("--operator-workers: must be >= 1");
  if (o.client_threads < 1) return absl::InvalidArgumentError("--client-threads: must be >= 1");
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  fs::path dir = ec ? fs::path(".") : self.parent_path();
  if (o.localkube.empty()) o.localkube = (dir / "localkube").string();
  if (o.operator_path.empty()) o.operator_path = (dir / "kubetrain-operator").string();
  for (const std::string& p : {o.localkube, o.operator_path, o.crd}) {
    if (!fs::exists(p)) return absl::NotFoundError("no such file: " + p);
  }
  return o;
}

// ---- Small helpers ----

// A field of /proc/<pid>/status in kB (VmHWM, VmRSS); -1 when the process is gone.
int64_t ProcStatusKb(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    int64_t kb = -1;
    std::istringstream rest(line.substr(field.size() + 1));
    rest >> kb;
    return kb;
  }
  return -1;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: p99 of 500 samples is the 495th, never an interpolation below a real sample.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// ---- Child processes ----

// Runs localkube and the operator, drains their merged output into log files (an undrained pipe
// would block a chatty child once 64 KiB are buffered) and notices when one exits. Process is
// not thread-safe, so every call on it is made under `mu_`.
class Supervisor {
 public:
  explicit Supervisor(std::string dir) : dir_(std::move(dir)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Supervisor() {
    // The operator first: it must not log errors about a vanished API server.
    for (auto it = children_.rbegin(); it != children_.rend(); ++it) Stop((*it)->name);
    stop_ = true;
    thread_.join();
  }

  absl::StatusOr<pid_t> Start(const std::string& name, const local::ProcessOptions& options) {
    auto child = std::make_unique<Child>();
    child->name = name;
    child->log_path = dir_ + "/" + name + ".log";
    child->log = std::fopen(child->log_path.c_str(), "w");
    if (child->log == nullptr) return absl::InternalError("cannot write " + child->log_path);
    ASSIGN_OR_RETURN(child->process, local::Process::Start(options), "starting ", name);
    pid_t pid = child->process->pid();
    std::lock_guard<std::mutex> lock(mu_);
    children_.push_back(std::move(child));
    return pid;
  }

  // The exit code if `name` has ended.
  std::optional<int> Exited(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    Child* c = Find(name);
    return c ? c->exit : std::nullopt;
  }

  // The last `bytes` of a child's output, for error reports.
  std::string Tail(const std::string& name, size_t bytes = 3000) {
    std::lock_guard<std::mutex> lock(mu_);
    Child* c = Find(name);
    if (c == nullptr) return "";
    std::fflush(c->log);
    std::ifstream in(c->log_path);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return all.size() > bytes ? all.substr(all.size() - bytes) : all;
  }

  // SIGTERM, a grace period, then the Process destructor's SIGKILL. Returns the exit code.
  std::optional<int> Stop(const std::string& name, absl::Duration grace = absl::Seconds(5)) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Child* c = Find(name);
      if (c == nullptr || !c->process) return std::nullopt;
      if (!c->exit) c->process->Signal(SIGTERM);
    }
    absl::Time deadline = absl::Now() + grace;
    while (!Exited(name) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    if (!Exited(name)) {
      log::Warn("Child did not exit on SIGTERM; killing it", {{"child", name}, {"grace", grace}});
    }
    std::lock_guard<std::mutex> lock(mu_);
    Child* c = Find(name);
    Drain(*c);
    std::optional<int> code = c->exit;
    c->process.reset();
    std::fclose(c->log);
    c->log = nullptr;
    return code;
  }

 private:
  struct Child {
    std::string name;
    std::string log_path;
    std::FILE* log = nullptr;
    std::unique_ptr<local::Process> process;
    std::optional<int> exit;
  };

  Child* Find(const std::string& name) {
    for (auto& c : children_) {
      if (c->name == name) return c.get();
    }
    return nullptr;
  }

  void Drain(Child& c) {
    if (!c.process) return;
    std::string out;
    c.process->ReadOutput(&out);
    if (!out.empty() && c.log) std::fwrite(out.data(), 1, out.size(), c.log);
    if (!c.exit) c.exit = c.process->Poll();
  }

  void Loop() {
    while (!stop_.load()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (auto& c : children_) Drain(*c);
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  std::string dir_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Child>> children_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- The operator's /metrics ----

struct Scrape {
  std::map<std::string, double> by_verb;       // summed over codes
  std::map<std::string, double> by_verb_code;  // "create 201", "update 409", ...
  double conflicts = 0;                        // code 409 on any verb
  double errors = 0;                           // code 0 or >= 500
  double queue_depth = 0;

  double Writes() const {
    double w = 0;
    for (const char* v : {"create", "update", "patch", "delete"}) {
      auto it = by_verb.find(v);
      if (it != by_verb.end()) w += it->second;
    }
    return w;
  }
  double Reads() const {
    double r = 0;
    for (const char* v : {"get", "list", "watch"}) {
      auto it = by_verb.find(v);
      if (it != by_verb.end()) r += it->second;
    }
    return r;
  }
};

// The value of label `key` in a Prometheus sample's `{a="x",b="y"}` part.
std::string Label(const std::string& labels, const std::string& key) {
  std::string needle = key + "=\"";
  size_t at = labels.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  size_t end = labels.find('"', at);
  return end == std::string::npos ? "" : labels.substr(at, end - at);
}

absl::StatusOr<Scrape> ScrapeMetrics(int port) {
  httplib::Client http("127.0.0.1", port);
  http.set_connection_timeout(5);
  http.set_read_timeout(10);
  httplib::Result res = http.Get("/metrics");
  if (!res || res->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET /metrics on 127.0.0.1:", port, " failed"));
  }
  Scrape s;
  std::istringstream in(res->body);
  std::string line;
  const std::string requests = "kubetrain_operator_api_requests_total{";
  const std::string depth = "kubetrain_operator_queue_depth";
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t space = line.rfind(' ');
    double value = 0;
    if (space == std::string::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) continue;
    if (line.rfind(requests, 0) == 0) {
      std::string labels = line.substr(0, space);
      std::string verb = Label(labels, "verb");
      std::string code = Label(labels, "code");
      s.by_verb[verb] += value;
      s.by_verb_code[verb + " " + code] += value;
      if (code == "409") s.conflicts += value;
      if (code == "0" || (code.size() == 3 && code[0] == '5')) s.errors += value;
    } else if (line.rfind(depth, 0) == 0 &&
               (line[depth.size()] == ' ' || line[depth.size()] == '{')) {
      s.queue_depth = value;
    }
  }
  return s;
}

// ---- What the informers see ----

// Timestamps of what the bench is waiting for, written by informer handlers, read by main.
class Tracker {
 public:
  explicit Tracker(size_t total_pods) : total_pods_(total_pods) {}

  void PodSeen(const json& pod) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pods_.insert(pod["metadata"].value("name", "")).second) return;
    if (pods_.size() == total_pods_) {
      all_pods_ = absl::Now();
      cv_.notify_all();
    }
  }

  void JobSeen(const json& job) {
    const json& conditions = job.value("status", json::object()).value("conditions", json::array());
    std::string name = job["metadata"].value("name", "");
    absl::Time now = absl::Now();
    std::lock_guard<std::mutex> lock(mu_);
    for (const json& c : conditions) {
      if (c.value("status", "") != "True") continue;
      std::string type = c.value("type", "");
      if (type == "Running") running_.emplace(name, now);
      if (type == "Succeeded") succeeded_.emplace(name, now);
      if (type == "Failed" && failed_.emplace(name, c.value("message", "")).second) {
        log::Warn("TrainingJob failed", {{"job", name}, {"message", c.value("message", "")}});
      }
    }
    cv_.notify_all();
  }

  // Waits until `done()` (called under the lock) or the deadline; false on timeout.
  bool WaitFor(absl::Time deadline, const std::function<bool()>& done) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done()) {
      if (absl::Now() >= deadline) return false;
      cv_.wait_for(lock, std::chrono::milliseconds(100));
    }
    return true;
  }

  // Accessors for use inside WaitFor's predicate (already locked) or after the waits.
  size_t pods() const { return pods_.size(); }
  std::optional<absl::Time> all_pods() const { return all_pods_; }
  size_t running() const { return running_.size(); }
  size_t succeeded() const { return succeeded_.size(); }
  size_t failed() const { return failed_.size(); }
  std::map<std::string, absl::Time> succeeded_times() {
    std::lock_guard<std::mutex> lock(mu_);
    return succeeded_;
  }
  std::string first_failure() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_.empty() ? "" : failed_.begin()->first + ": " + failed_.begin()->second;
  }

 private:
  const size_t total_pods_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> pods_;
  std::optional<absl::Time> all_pods_;
  std::map<std::string, absl::Time> running_;
  std::map<std::string, absl::Time> succeeded_;
  std::map<std::string, std::string> failed_;
};

// ---- Objects ----

std::string JobName(int i) { return absl::StrFormat("scale-%05d", i); }

json Replica(int replicas) {
  return {{"replicas", replicas},
          {"template",
           {{"spec",
             {{"containers", json::array({{{"name", "kubetrain"},
                                           {"image", "kubetrain/worker:0.1.0"},
                                           {"args", json::array({"--model=mlp"})}}})}}}}}};
}

json Job(const std::string& name, int workers) {
  return {{"apiVersion", "kubetrain.dev/v1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", {{"replicaSpecs", {{"PS", Replica(1)}, {"Worker", Replica(workers)}}}}}};
}

// A pod status as a kubelet writes it (the shape localkube's pod status schema accepts). Each
// pod gets its own 127.0.x.y address nobody listens on, as localkube's kubelet would assign, so
// the operator's progress reads from the chief fail fast instead of reaching a real server.
std::string PodStatusPatch(const std::string& phase, int pod_index, std::optional<int> exit_code) {
  json cs = {{"name", "kubetrain"}, {"ready", phase == "Running"},
             {"restartCount", 0},   {"image", "kubetrain/worker:0.1.0"},
             {"imageID", ""},       {"state", json::object()}};
  if (exit_code) {
    cs["state"]["terminated"] = {{"exitCode", *exit_code}, {"reason", "Completed"}};
  } else {
    cs["state"]["running"] = {{"startedAt", kube::FormatTime(absl::Now())}};
  }
  std::string ip = absl::StrCat("127.0.", 100 + pod_index / 250, ".", 1 + pod_index % 250);
  return json({{"status", {{"phase", phase}, {"podIP", ip}, {"containerStatuses", {cs}}}}}).dump();
}

// Retries a bench request that found no server. The client gives up at once when a pooled TLS
// connection the server closed while idle (localkube keeps them 30 s) fails on write; a fresh
// connection then works. AlreadyExists on a retried create means the first attempt landed.
absl::Status Retry(const std::function<absl::Status()>& call) {
  absl::Status s;
  for (int attempt = 0; attempt < 4; ++attempt) {
    s = call();
    if (attempt > 0 && s.code() == absl::StatusCode::kAlreadyExists) return absl::OkStatus();
    if (s.code() != absl::StatusCode::kUnavailable) return s;
    absl::SleepFor(absl::Milliseconds(100) * (attempt + 1));
  }
  return s;
}

// Runs fn(i) for i in [0, n) on `threads` threads, each call under Retry; the first error wins.
absl::Status ParallelFor(int n, int threads, const std::function<absl::Status(int)>& fn) {
  std::atomic<int> next{0};
  std::mutex mu;
  absl::Status first = absl::OkStatus();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) {
        absl::Status s = Retry([&] { return fn(i); });
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first.ok()) first = s;
          next = n;  // stop handing out work
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  return first;
}

// ---- The run ----

struct Report {
  Options opt;
  int pods_per_job = 0;
  double all_pods_s = 0;
  double all_running_s = 0;  // from the last Running patch to every job's Running condition
  double success_p50_s = 0;
  double success_p99_s = 0;
  double success_max_s = 0;
  double success_all_s = 0;
  std::string slowest_job;  // first chief patch to the last job Succeeded
  Scrape ops;               // operator requests during the run (start-up excluded)
  double events = 0;
  std::map<std::string, double> events_by_reason;
  double peak_rss_mib = 0;
  double final_rss_mib = 0;
  double wall_s = 0;

  int Ideal() const { return kIdealCreatesBase + pods_per_job + kIdealStatusWrites; }
  double WritesPerJob() const { return ops.Writes() / opt.jobs; }
  double EventsPerJob() const { return events / opt.jobs; }
  double NonEventWritesPerJob() const { return (ops.Writes() - events) / opt.jobs; }
  double Ratio() const { return NonEventWritesPerJob() / Ideal(); }
  // Without the cleanup deletes that cleanPodPolicy Running (the default) and the Service's
  // removal ask for once the chief succeeds: PS and non-chief workers are still Running then.
  double DeletesPerJob() const {
    auto it = ops.by_verb.find("delete");
    return it == ops.by_verb.end() ? 0 : it->second / opt.jobs;
  }
  double RatioWithoutCleanup() const {
    return (NonEventWritesPerJob() - DeletesPerJob()) / Ideal();
  }
  // Answers other than 2xx (409 conflicts or AlreadyExists, 404 on deletes, 5xx, no answer).
  double Non2xx() const {
    double n = 0;
    for (const auto& [key, v] : ops.by_verb_code) {
      if (key.size() < 4 || key[key.size() - 3] != '2') n += v;
    }
    return n;
  }
};

class Bench {
 public:
  explicit Bench(Options opt) : opt_(std::move(opt)) {}
  ~Bench() {
    // Informers before the API server they watch, children before their temp dir.
    pod_informer_.reset();
    job_informer_.reset();
    client_.reset();
    supervisor_.reset();
    std::error_code ec;
    if (!dir_.empty() && !opt_.keep_logs) fs::remove_all(dir_, ec);
  }

  absl::StatusOr<Report> Run();

 private:
  absl::Time Deadline() const { return start_ + opt_.timeout; }
  absl::Status StartLocalkube();
  absl::Status InstallCrd();
  absl::Status StartOperator();
  absl::Status CheckChildren();
  absl::Status Wait(const std::string& what, const std::function<bool()>& done);

  Options opt_;
  absl::Time start_;
  std::string dir_;
  std::unique_ptr<Supervisor> supervisor_;
  std::string kubeconfig_;
  std::unique_ptr<kube::Client> client_;
  pid_t operator_pid_ = 0;
  int metrics_port_ = 0;
  std::unique_ptr<Tracker> tracker_;
  std::unique_ptr<kube::Informer> pod_informer_;
  std::unique_ptr<kube::Informer> job_informer_;
};

absl::Status Bench::StartLocalkube() {
  local::ProcessOptions p;
  p.argv = {opt_.localkube, "--port=0", "--kubeconfig-out=" + kubeconfig_,
            "--address-file=" + dir_ + "/address", "--log-level=warn"};
  p.env = {{"PATH", "/usr/bin:/bin"}, {"TMPDIR", dir_}};
  RETURN_IF_ERROR(supervisor_->Start("localkube", p).status());
  while (!fs::exists(dir_ + "/address") || !fs::exists(kubeconfig_)) {
    if (supervisor_->Exited("localkube")) {
      return absl::InternalError("localkube exited: " + supervisor_->Tail("localkube"));
    }
    if (absl::Now() > start_ + absl::Seconds(30)) {
      return absl::DeadlineExceededError("localkube did not start in 30s");
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSIGN_OR_RETURN(kube::ClusterConfig config, kube::LoadKubeconfig(kubeconfig_));
  // The bench's own client is unthrottled: only the operator's limits are under test.
  ASSIGN_OR_RETURN(client_,
                   kube::Client::Create(config, {.qps = 0, .user_agent = "operator_scale"}));
  return absl::OkStatus();
}

absl::Status Bench::InstallCrd() {
  ASSIGN_OR_RETURN(std::string text, api::ReadFileOrStdin(opt_.crd));
  ASSIGN_OR_RETURN(std::vector<json> docs, api::ParseYamlDocuments(text));
  if (docs.size() != 1) return absl::InvalidArgumentError(opt_.crd + ": expected one document");
  Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                "CustomResourceDefinition", false};
  RETURN_IF_ERROR(client_->Create(crds, "", docs[0]).status(), "creating the CRD");
  absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!client_->List(Resource::TrainingJobs(), "default", {.limit = 1}).ok()) {
    if (absl::Now() > deadline) return absl::DeadlineExceededError("CRD not served in 10s");
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status Bench::StartOperator() {
  ASSIGN_OR_RETURN(metrics_port_, FreeLoopbackPort());
  ASSIGN_OR_RETURN(int health_port, FreeLoopbackPort());
  local::ProcessOptions p;
  p.argv = {opt_.operator_path,
            "--kubeconfig=" + kubeconfig_,
            "--namespace=default",
            absl::StrCat("--qps=", opt_.qps),
            absl::StrCat("--burst=", opt_.burst),
            absl::StrCat("--workers=", opt_.operator_workers),
            absl::StrCat("--metrics-address=127.0.0.1:", metrics_port_),
            absl::StrCat("--health-address=127.0.0.1:", health_port),
            "--log-level=info"};
  p.env = {{"PATH", "/usr/bin:/bin"}, {"HOME", dir_}};
  ASSIGN_OR_RETURN(operator_pid_, supervisor_->Start("operator", p));
  httplib::Client http("127.0.0.1", health_port);
  http.set_connection_timeout(1);
  absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (true) {
    if (auto code = supervisor_->Exited("operator")) {
      return absl::InternalError(absl::StrCat("kubetrain-operator exited with ", *code, ":\n",
                                              supervisor_->Tail("operator")));
    }
    httplib::Result res = http.Get("/readyz");
    if (res && res->status == 200) return absl::OkStatus();
    if (absl::Now() > deadline) return absl::DeadlineExceededError("operator not ready in 60s");
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status Bench::CheckChildren() {
  for (const char* name : {"localkube", "operator"}) {
    if (auto code = supervisor_->Exited(name)) {
      return absl::InternalError(
          absl::StrCat(name, " exited with ", *code, " mid-run:\n", supervisor_->Tail(name)));
    }
  }
  return absl::OkStatus();
}

absl::Status Bench::Wait(const std::string& what, const std::function<bool()>& done) {
  // Short slices so a crashed child is reported at once rather than at the deadline.
  while (!tracker_->WaitFor(std::min(Deadline(), absl::Now() + absl::Seconds(1)), done)) {
    RETURN_IF_ERROR(CheckChildren(), "waiting for ", what);
    if (tracker_->failed() > 0) {
      return absl::InternalError("a TrainingJob failed: " + tracker_->first_failure());
    }
    if (absl::Now() >= Deadline()) {
      return absl::DeadlineExceededError(
          absl::StrCat("timed out (--timeout=", absl::FormatDuration(opt_.timeout),
                       ") waiting for ", what, "; pods=", tracker_->pods(),
                       " running=", tracker_->running(), " succeeded=", tracker_->succeeded()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Report> Bench::Run() {
  start_ = absl::Now();
  char tmpl[] = "/tmp/operator-scale-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  dir_ = tmpl;
  kubeconfig_ = dir_ + "/kubeconfig";
  supervisor_ = std::make_unique<Supervisor>(dir_);

  RETURN_IF_ERROR(StartLocalkube());
  RETURN_IF_ERROR(InstallCrd());
  RETURN_IF_ERROR(StartOperator());
  log::Info("Operator ready", {{"pid", static_cast<int64_t>(operator_pid_)},
                               {"metrics_port", metrics_port_},
                               {"logs", dir_}});

  Report r;
  r.opt = opt_;
  r.pods_per_job = 1 + opt_.workers_per_job;
  const int total_pods = opt_.jobs * r.pods_per_job;
  tracker_ = std::make_unique<Tracker>(total_pods);
  kube::InformerOptions pod_options{.namespace_ = "default"};
  pod_options.label_selector = absl::StrCat(api::kLabelManagedBy, "=", api::kManagedByValue);
  pod_informer_ = std::make_unique<kube::Informer>(*client_, Resource::Pods(), pod_options);
  pod_informer_->AddHandlers({.on_add = [this](const json& o) { tracker_->PodSeen(o); }});
  job_informer_ = std::make_unique<kube::Informer>(*client_, Resource::TrainingJobs(),
                                                   kube::InformerOptions{.namespace_ = "default"});
  job_informer_->AddHandlers({[this](const json& o) { tracker_->JobSeen(o); },
                              [this](const json&, const json& o) { tracker_->JobSeen(o); },
                              {}});
  pod_informer_->Start();
  job_informer_->Start();
  if (!pod_informer_->WaitForSync(absl::Seconds(30)) ||
      !job_informer_->WaitForSync(absl::Seconds(30))) {
    return absl::DeadlineExceededError("the bench's informers did not sync");
  }
  ASSIGN_OR_RETURN(Scrape baseline, ScrapeMetrics(metrics_port_));

  // 2-3. Every job at once; the clock runs from the first create to the last pod seen.
  absl::Time created_start = absl::Now();
  RETURN_IF_ERROR(ParallelFor(opt_.jobs, opt_.client_threads,
                              [&](int i) -> absl::Status {
                                return client_
                                    ->Create(Resource::TrainingJobs(), "default",
                                             Job(JobName(i), opt_.workers_per_job))
                                    .status();
                              }),
                  "creating TrainingJobs");
  absl::Time created_end = absl::Now();
  log::Info("Created TrainingJobs",
            {{"jobs", opt_.jobs}, {"seconds", absl::ToDoubleSeconds(created_end - created_start)}});
  RETURN_IF_ERROR(Wait("all pods to exist", [&] { return tracker_->all_pods().has_value(); }));
  r.all_pods_s = absl::ToDoubleSeconds(*tracker_->all_pods() - created_start);
  log::Info("All pods exist", {{"pods", total_pods}, {"seconds", r.all_pods_s}});

  // 4a. Every pod Running, as a kubelet would report it.
  auto pod_name = [&](int i) {
    int job = i / r.pods_per_job, k = i % r.pods_per_job;
    return k == 0 ? JobName(job) + "-ps-0" : absl::StrCat(JobName(job), "-worker-", k - 1);
  };
  RETURN_IF_ERROR(ParallelFor(total_pods, opt_.client_threads,
                              [&](int i) -> absl::Status {
                                return client_
                                    ->Patch(Resource::Pods(), "default", pod_name(i),
                                            kube::PatchType::kMerge,
                                            PodStatusPatch("Running", i, std::nullopt), "status")
                                    .status();
                              }),
                  "marking pods Running");
  absl::Time running_patched = absl::Now();
  RETURN_IF_ERROR(Wait("every job's Running condition",
                       [&] { return tracker_->running() == static_cast<size_t>(opt_.jobs); }));
  r.all_running_s = absl::ToDoubleSeconds(absl::Now() - running_patched);
  log::Info("All jobs Running", {{"seconds", r.all_running_s}});

  // 4b. Every chief (worker-0) Succeeded, all at once: the backlog the operator must clear.
  std::vector<absl::Time> chief_sent(opt_.jobs);
  absl::Time chiefs_start = absl::Now();
  RETURN_IF_ERROR(
      ParallelFor(opt_.jobs, opt_.client_threads,
                  [&](int job) -> absl::Status {
                    chief_sent[job] = absl::Now();
                    return client_
                        ->Patch(Resource::Pods(), "default", JobName(job) + "-worker-0",
                                kube::PatchType::kMerge,
                                PodStatusPatch("Succeeded", job * r.pods_per_job + 1, 0), "status")
                        .status();
                  }),
      "marking chiefs Succeeded");
  RETURN_IF_ERROR(Wait("every job's Succeeded condition",
                       [&] { return tracker_->succeeded() == static_cast<size_t>(opt_.jobs); }));
  std::map<std::string, absl::Time> succeeded = tracker_->succeeded_times();
  std::vector<double> latencies;
  absl::Time last = chiefs_start;
  for (int job = 0; job < opt_.jobs; ++job) {
    absl::Time done = succeeded.at(JobName(job));
    last = std::max(last, done);
    latencies.push_back(std::max(0.0, absl::ToDoubleSeconds(done - chief_sent[job])));
  }
  r.success_p50_s = Percentile(latencies, 0.50);
  r.success_p99_s = Percentile(latencies, 0.99);
  r.success_max_s = Percentile(latencies, 1.0);
  r.success_all_s = absl::ToDoubleSeconds(last - chiefs_start);
  int slowest =
      static_cast<int>(std::max_element(latencies.begin(), latencies.end()) - latencies.begin());
  r.slowest_job = JobName(slowest);
  log::Info("All jobs Succeeded", {{"p50", r.success_p50_s},
                                   {"p99", r.success_p99_s},
                                   {"slowest", r.slowest_job},
                                   {"chief_patched", kube::FormatMicroTime(chief_sent[slowest])}});

  // 5. Let the operator finish what the last reconciles started (events, cleanup), then count.
  Scrape now;
  double previous = -1;
  absl::Time settle_deadline = std::min(Deadline(), absl::Now() + absl::Seconds(30));
  while (true) {
    ASSIGN_OR_RETURN(now, ScrapeMetrics(metrics_port_));
    if (now.Writes() == previous && now.queue_depth == 0) break;
    if (absl::Now() > settle_deadline) break;
    previous = now.Writes();
    absl::SleepFor(absl::Milliseconds(500));
  }
  r.ops = now;
  for (auto& [verb, n] : r.ops.by_verb) {
    auto it = baseline.by_verb.find(verb);
    if (it != baseline.by_verb.end()) n -= it->second;
  }
  for (auto& [key, n] : r.ops.by_verb_code) {
    auto it = baseline.by_verb_code.find(key);
    if (it != baseline.by_verb_code.end()) n -= it->second;
  }
  r.ops.conflicts -= baseline.conflicts;
  r.ops.errors -= baseline.errors;
  // A fresh client: the pooled connections sat idle through the waits above, longer than
  // localkube's 30 s keep-alive, and kube::Client does not redial a pooled connection that fails.
  ASSIGN_OR_RETURN(kube::ClusterConfig config, kube::LoadKubeconfig(kubeconfig_));
  ASSIGN_OR_RETURN(std::unique_ptr<kube::Client> lister,
                   kube::Client::Create(config, {.qps = 0, .user_agent = "operator_scale"}));
  absl::StatusOr<json> events = lister->ListAll(Resource::Events(), "default", {});
  RETURN_IF_ERROR(events.status(), "listing Events");
  for (const json& e : (*events)["items"]) {
    if (e.value("source", json::object()).value("component", "") == "kubetrain-operator") {
      ++r.events;
      ++r.events_by_reason[e.value("reason", "")];
    }
  }
  RETURN_IF_ERROR(CheckChildren());
  // VmHWM: the kernel's high-water mark of resident memory over the operator's whole life.
  r.peak_rss_mib = static_cast<double>(ProcStatusKb(operator_pid_, "VmHWM")) / 1024.0;
  r.final_rss_mib = static_cast<double>(ProcStatusKb(operator_pid_, "VmRSS")) / 1024.0;
  std::optional<int> code = supervisor_->Stop("operator");
  if (code && *code != 0 && *code != 128 + SIGTERM) {
    log::Warn("Operator exited with an error on SIGTERM", {{"code", *code}});
  }
  r.wall_s = absl::ToDoubleSeconds(absl::Now() - start_);
  return r;
}

// ---- Output ----

json ToJson(const Report& r) {
  json verbs = json::object();
  for (const auto& [verb, n] : r.ops.by_verb) verbs[verb] = n;
  json codes = json::object();
  for (const auto& [key, n] : r.ops.by_verb_code) codes[key] = n;
  return {{"jobs", r.opt.jobs},
          {"pods_per_job", r.pods_per_job},
          {"operator_workers", r.opt.operator_workers},
          {"operator_qps", r.opt.qps},
          {"operator_burst", r.opt.burst},
          {"all_pods_exist_seconds", r.all_pods_s},
          {"all_jobs_running_seconds", r.all_running_s},
          {"job_succeeded_latency_p50_seconds", r.success_p50_s},
          {"job_succeeded_latency_p99_seconds", r.success_p99_s},
          {"job_succeeded_latency_max_seconds", r.success_max_s},
          {"slowest_job", r.slowest_job},
          {"all_jobs_succeeded_seconds", r.success_all_s},
          {"operator_requests_by_verb", verbs},
          {"operator_requests_by_verb_and_code", codes},
          {"operator_conflicts", r.ops.conflicts},
          {"operator_request_errors", r.ops.errors},
          {"operator_events", r.events},
          {"operator_events_by_reason", r.events_by_reason},
          {"writes_per_job", r.WritesPerJob()},
          {"events_per_job", r.EventsPerJob()},
          {"writes_per_job_excluding_events", r.NonEventWritesPerJob()},
          {"reads_per_job", r.ops.Reads() / r.opt.jobs},
          {"ideal_writes_per_job", r.Ideal()},
          {"ratio_to_ideal", r.Ratio()},
          {"ratio_goal", 1.5},
          {"ratio_to_ideal_without_cleanup_deletes", r.RatioWithoutCleanup()},
          {"operator_non_2xx_answers", r.Non2xx()},
          {"operator_peak_rss_mib", r.peak_rss_mib},
          {"operator_final_rss_mib", r.final_rss_mib},
          {"rss_goal_mib", 150},
          {"wall_seconds", r.wall_s}};
}

void PrintTable(const Report& r) {
  auto verb = [&](const char* v) {
    auto it = r.ops.by_verb.find(v);
    return it == r.ops.by_verb.end() ? 0.0 : it->second / r.opt.jobs;
  };
  auto row = [](const std::string& name, const std::string& value, const std::string& goal = "") {
    std::string line = absl::StrFormat("%-46s %14s  %s", name, value, goal);
    line.erase(line.find_last_not_of(' ') + 1);
    std::printf("%s\n", line.c_str());
  };
  auto f = [](double v, int digits = 2) { return absl::StrFormat("%.*f", digits, v); };
  std::printf(
      "operator_scale: %d TrainingJobs x (1 PS + %d Workers) = %d pods; operator --workers=%d "
      "--qps=%g --burst=%d\n\n",
      r.opt.jobs, r.opt.workers_per_job, r.opt.jobs * r.pods_per_job, r.opt.operator_workers,
      r.opt.qps, r.opt.burst);
  row("metric", "value", "goal");
  row("time to all pods existing (s)", f(r.all_pods_s));
  row("pods Running -> all jobs Running (s)", f(r.all_running_s));
  row("chief Succeeded -> job Succeeded p50 (s)", f(r.success_p50_s, 3));
  row("chief Succeeded -> job Succeeded p99 (s)", f(r.success_p99_s, 3));
  row("chief Succeeded -> job Succeeded max (s)", f(r.success_max_s, 3));
  row("operator API writes / job (all)", f(r.WritesPerJob()));
  row("  create / update / patch / delete",
      absl::StrFormat("%.2f/%.2f/%.2f/%.2f", verb("create"), verb("update"), verb("patch"),
                      verb("delete")));
  row("  answers other than 2xx / job (409s)",
      absl::StrFormat("%.2f (%.2f)", r.Non2xx() / r.opt.jobs, r.ops.conflicts / r.opt.jobs));
  row("operator Events / job", f(r.EventsPerJob()));
  row("operator API writes / job excluding Events", f(r.NonEventWritesPerJob()));
  row(absl::StrFormat("ratio to ideal (%d = %d creates + %d status)", r.Ideal(),
                      kIdealCreatesBase + r.pods_per_job, kIdealStatusWrites),
      f(r.Ratio()), r.Ratio() <= 1.5 ? "<= 1.5 (met)" : "<= 1.5 (MISSED)");
  row("  same, without the cleanup deletes", f(r.RatioWithoutCleanup()));
  row("operator API reads / job (get/list/watch)", f(r.ops.Reads() / r.opt.jobs));
  row("operator peak RSS, VmHWM (MiB)", f(r.peak_rss_mib, 1),
      r.peak_rss_mib <= 150 ? "<= 150 (met)" : "<= 150 (MISSED)");
  row("wall time (s)", f(r.wall_s, 1));
}

int Main(int argc, char** argv) {
  absl::StatusOr<Options> opt = ParseFlags(argc, argv);
  if (opt.status().code() == absl::StatusCode::kCancelled) return 0;  // --help
  if (!opt.ok()) {
    std::fprintf(stderr, "operator_scale: %s\n", std::string(opt.status().message()).c_str());
    return 2;
  }
  // A child closing a pipe or socket must be an error return here, never a silent exit.
  signal(SIGPIPE, SIG_IGN);
  absl::StatusOr<Report> report;
  bool keep = opt->keep_logs;
  {
    Bench bench(*opt);
    report = bench.Run();
    if (!report.ok() && !keep) {
      std::fprintf(stderr, "operator_scale: rerun with --keep-logs to keep the child logs\n");
    }
  }
  if (!report.ok()) {
    std::fprintf(stderr, "operator_scale: %s\n", report.status().ToString().c_str());
    return 1;
  }
  if (opt->json) {
    std::printf("%s\n", ToJson(*report).dump(2).c_str());
  } else {
    PrintTable(*report);
  }
  return 0;
}

}  // namespace
}  // namespace kubetrain

int main(int argc, char** argv) { return kubetrain::Main(argc, argv); }
