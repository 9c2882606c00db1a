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
// The minimum writes per job are 11 for the default shape: 6 creates (the job's Secret, its
// Service, 4 pods), 3 status writes (Created, Running, Succeeded) and the cleanup the default
// cleanPodPolicy (Running) asks for once the chief succeeds while the PS and the other workers
// still run (one deletecollection of them, one Service delete); for other shapes 2 + pods + 3 + 2.
// Events count as writes and are not in the minimum; server-side dry runs store nothing and are
// reported apart. Goals: writes <= 1.1x the minimum, chief-to-job p99 <= 30 s, peak RSS <= 200 MiB.
// Nothing is asserted on timings: the CTest smoke run only checks that the report is printed.
//
// The harness (localkube, the CRD and the operator as child processes) is in cluster.h, what is
// read off the operator in operator_metrics.h, the report and its output in report.h.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/main.h"
#include "bench/operator_scale/cluster.h"
#include "bench/operator_scale/operator_metrics.h"
#include "bench/operator_scale/options.h"
#include "bench/operator_scale/report.h"
#include "bench/proc_status.h"
#include "bench/stats.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/program.h"
#include "common/status.h"
#include "operator/api/types.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/kube/informer.h"

namespace kubetrain::bench {
namespace {

namespace fs = std::filesystem;
using kube::Resource;
using nlohmann::json;

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
    // The summary a kubetrain-worker chief leaves as its termination message: the operator
    // takes the job's final figures from it and reads no log.
    if (*exit_code == 0) {
      cs["state"]["terminated"]["message"] =
          R"({"event":"training_complete","test_accuracy":0.85,"steps":100,"epochs":1,)"
          R"("examples_per_sec":1000})";
    }
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

class Bench {
 public:
  explicit Bench(Options opt) : opt_(std::move(opt)), cluster_(std::make_unique<Cluster>(opt_)) {}
  ~Bench() {
    // Informers before the API server they watch.
    pod_informer_.reset();
    job_informer_.reset();
    cluster_.reset();
  }

  absl::StatusOr<Report> Run();

 private:
  absl::Time Deadline() const { return start_ + opt_.timeout; }
  absl::Status Wait(const std::string& what, const std::function<bool()>& done);

  Options opt_;
  absl::Time start_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Tracker> tracker_;
  std::unique_ptr<kube::Informer> pod_informer_;
  std::unique_ptr<kube::Informer> job_informer_;
};

absl::Status Bench::Wait(const std::string& what, const std::function<bool()>& done) {
  // Short slices so a crashed child is reported at once rather than at the deadline.
  while (!tracker_->WaitFor(std::min(Deadline(), absl::Now() + absl::Seconds(1)), done)) {
    RETURN_IF_ERROR(cluster_->CheckChildren(), "waiting for ", what);
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
  RETURN_IF_ERROR(cluster_->Start(start_));
  log::Info("Operator ready", {{"pid", static_cast<int64_t>(cluster_->operator_pid())},
                               {"metrics_port", cluster_->metrics_port()},
                               {"logs", cluster_->dir()}});

  Report r;
  r.opt = opt_;
  r.pods_per_job = 1 + opt_.workers_per_job;
  const int total_pods = opt_.jobs * r.pods_per_job;
  tracker_ = std::make_unique<Tracker>(total_pods);
  kube::InformerOptions pod_options{.namespace_ = "default"};
  pod_options.label_selector = absl::StrCat(api::kLabelManagedBy, "=", api::kManagedByValue);
  pod_informer_ =
      std::make_unique<kube::Informer>(cluster_->client(), Resource::Pods(), pod_options);
  pod_informer_->AddHandlers({.on_add = [this](const json& o) { tracker_->PodSeen(o); }});
  job_informer_ = std::make_unique<kube::Informer>(cluster_->client(), Resource::TrainingJobs(),
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
  ASSIGN_OR_RETURN(Scrape baseline, ScrapeMetrics(cluster_->metrics_port()));

  // 2-3. Every job at once; the clock runs from the first create to the last pod seen.
  absl::Time created_start = absl::Now();
  RETURN_IF_ERROR(ParallelFor(opt_.jobs, opt_.client_threads,
                              [&](int i) -> absl::Status {
                                return cluster_->client()
                                    .Create(Resource::TrainingJobs(), "default",
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
                                return cluster_->client()
                                    .Patch(Resource::Pods(), "default", pod_name(i),
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
  RETURN_IF_ERROR(ParallelFor(opt_.jobs, opt_.client_threads,
                              [&](int job) -> absl::Status {
                                chief_sent[job] = absl::Now();
                                return cluster_->client()
                                    .Patch(Resource::Pods(), "default", JobName(job) + "-worker-0",
                                           kube::PatchType::kMerge,
                                           PodStatusPatch("Succeeded", job * r.pods_per_job + 1, 0),
                                           "status")
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
  r.success_p50_s = bench::Percentile(latencies, 0.50);
  r.success_p99_s = bench::Percentile(latencies, 0.99);
  r.success_max_s = bench::Percentile(latencies, 1.0);
  r.success_all_s = absl::ToDoubleSeconds(last - chiefs_start);
  int slowest =
      static_cast<int>(std::max_element(latencies.begin(), latencies.end()) - latencies.begin());
  r.slowest_job = JobName(slowest);
  log::Info("All jobs Succeeded", {{"p50", r.success_p50_s},
                                   {"p99", r.success_p99_s},
                                   {"slowest", r.slowest_job},
                                   {"chief_patched", kube::FormatMicroTime(chief_sent[slowest])}});

  // 5. Let the operator finish what the last reconciles started (events, cleanup: a few writes
  // per job, paced by its --qps), then count.
  Scrape now;
  double previous = -1;
  absl::Time settle_deadline =
      std::min(Deadline(), absl::Now() + absl::Seconds(30 + 6.0 * opt_.jobs / opt_.qps));
  while (true) {
    ASSIGN_OR_RETURN(now, ScrapeMetrics(cluster_->metrics_port()));
    if (now.Writes() == previous && now.queue_depth == 0) {
      r.settled = true;
      break;
    }
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
  ASSIGN_OR_RETURN(kube::ClusterConfig config, kube::LoadKubeconfig(cluster_->kubeconfig()));
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
  RETURN_IF_ERROR(cluster_->CheckChildren());
  // VmHWM: the kernel's high-water mark of resident memory over the operator's whole life.
  r.peak_rss_mib = static_cast<double>(ProcStatusKb("VmHWM", cluster_->operator_pid())) / 1024.0;
  r.final_rss_mib = static_cast<double>(ProcStatusKb("VmRSS", cluster_->operator_pid())) / 1024.0;
  std::optional<int> code = cluster_->StopOperator();
  if (code && *code != 0 && *code != 128 + SIGTERM) {
    log::Warn("Operator exited with an error on SIGTERM", {{"code", *code}});
  }
  r.wall_s = absl::ToDoubleSeconds(absl::Now() - start_);
  return r;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Options> opt = ParseFlags(argc, argv);
  if (!opt.ok()) return UsageExit("operator_scale", opt.status());
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
  return ReportExit("operator_scale", report, opt->json, ToJson, PrintTable);
}

}  // namespace
}  // namespace kubetrain::bench

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  return kubetrain::bench::Main(argc, argv);
}
