// informer_memory: the resident memory a TrainingJob informer costs over many finished jobs,
// caching whole objects and caching them through kube::StripForCache, and at the peak of a
// relist (docs/architecture.md §9).
//
//   build/bin/informer_memory [--jobs=5000] [--page-size=500] [--client-threads=8]
//                             [--timeout=10m] [--json]
//
// Phases, all in one run:
//   1. localkube (plain HTTP on loopback, compacting its history every 200 ms) and the
//      TrainingJob CRD.
//   2. N TrainingJobs made from deploy/examples/*.yaml in turn (renamed), each carrying kubectl's
//      last-applied-configuration annotation (the manifest as JSON, as `kubectl apply` writes
//      it), created with field manager kubectl-client-side-apply, then given a finished status
//      through /status by field manager kubetrain-operator: Created, Running, Succeeded
//      conditions, replica counts, times and the final progress. localkube records the
//      managedFields a real API server would hold (one entry per manager).
//   3. For each case this program runs itself again as a fresh process (so each RSS is its own):
//      it makes a kube::Client, reads its RSS, starts one TrainingJob informer, waits for the
//      sync, reads VmHWM (peak) and VmRSS (also after malloc_trim, which hands freed pages back:
//      what stays is what the cache holds), resets the peak (/proc/self/clear_refs), forces a
//      relist and reads the peak again. The relist is forced as a real API server would force
//      it: a write the informer does not watch (a ConfigMap) and a compaction after it leave
//      the informer's resourceVersion out of the history, so its next watch (they last 1-2 s
//      here) is answered 410 Expired. Cases: whole objects, stripped, and stripped with the
//      whole list in one answer (--page-size=0, how the informer read it before paging).
//
// The ratio reported is stripped / unstripped, for the RSS the informer adds and for the cache's
// JSON size. Nothing is asserted: the CTest smoke run only checks that the report is printed.
//
// The cluster harness (localkube, the CRD, the finished jobs) is in informer_memory_cluster.h.
#include <malloc.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
#include "bench/informer_memory_cluster.h"
#include "bench/main.h"
#include "bench/proc_status.h"
#include "common/flags.h"
#include "common/logging.h"
#include "common/process.h"
#include "common/program.h"
#include "common/status.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/kube/informer.h"

namespace kubetrain {
namespace {

namespace fs = std::filesystem;
using bench::CreateJobs;
using bench::InstallCrd;
using bench::kLastApplied;
using bench::LoadExamples;
using bench::Localkube;
using bench::ProcStatusKb;
using bench::StartLocalkube;
using kube::Resource;
using nlohmann::json;

const Resource kConfigMaps{"", "v1", "configmaps", "ConfigMap", true};

struct Options {
  int jobs = 5000;
  int64_t page_size = 500;
  int client_threads = 8;
  absl::Duration timeout = absl::Minutes(10);
  bool json = false;
  std::string localkube;
  // Set when this program runs itself as one measurement.
  std::string measure;  // "unstripped" or "stripped"
  std::string server;   // localkube's URL
};

absl::StatusOr<Options> ParseFlags(int argc, char** argv) {
  Options o;
  FlagSet f("informer_memory",
            "Creates many finished TrainingJobs in a localkube it starts and reports the RSS of\n"
            "a TrainingJob informer over them, caching whole objects and stripped ones, and at\n"
            "the peak of a relist.");
  f.Add("jobs", &o.jobs, "finished TrainingJobs to create").Range(1, 100000);
  f.Add("page-size", &o.page_size, "objects per LIST page (0: the whole list in one answer)")
      .AtLeast(0);
  f.Add("client-threads", &o.client_threads, "threads creating the jobs").Range(1, 64);
  f.Add("timeout", &o.timeout, "give up after this long in all");
  f.Add("json", &o.json, "print the report as JSON instead of a table");
  f.Add("localkube", &o.localkube, "localkube binary (default: next to this executable)");
  f.Add("measure", &o.measure, "internal: run one measurement (unstripped or stripped)");
  f.Add("server", &o.server, "internal: the API server URL for --measure");
  ASSIGN_OR_RETURN(std::vector<std::string> rest, f.Parse(argc, argv));
  if (!rest.empty()) return absl::InvalidArgumentError("unexpected argument \"" + rest[0] + "\"");
  if (!o.measure.empty()) {
    if (o.measure != "unstripped" && o.measure != "stripped") {
      return absl::InvalidArgumentError("--measure: unstripped or stripped");
    }
    return o;
  }
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (o.localkube.empty()) {
    o.localkube = ((ec ? fs::path(".") : self.parent_path()) / "localkube").string();
  }
  if (!fs::exists(o.localkube)) return absl::NotFoundError("no such file: " + o.localkube);
  return o;
}

// ---- Memory of this process ----

// Resets VmHWM to the current RSS (Linux ≥ 4.0); false where the kernel refuses.
bool ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return out.good();
}

// ---- One measurement, in a fresh process ----

template <typename Pred>
bool WaitFor(Pred pred, absl::Duration timeout) {
  absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// Writes a ConfigMap (no TrainingJob informer sees it) and waits until localkube has compacted
// its history past that write: a watch from just before it is refused 410 Expired. Every
// resourceVersion older than the write is then too old to watch from.
absl::Status WriteAndWaitForCompaction(kube::Client& client, absl::Duration timeout) {
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"generateName", "informer-memory-"}, {"namespace", "kube-system"}}}};
  ASSIGN_OR_RETURN(json written, client.Create(kConfigMaps, "kube-system", cm));
  int64_t rv = 0;
  if (!absl::SimpleAtoi(written["metadata"].value("resourceVersion", ""), &rv) || rv < 2) {
    return absl::InternalError("the ConfigMap written has no resourceVersion");
  }
  absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    kube::WatchOptions w;
    w.resource_version = absl::StrCat(rv - 1);
    w.timeout_seconds = 5;
    // Not compacted yet: the ConfigMap's own event comes at once and ends the watch.
    absl::Status watched =
        client.Watch(kConfigMaps, "kube-system", w, [](const kube::WatchEvent&) { return false; });
    if (absl::IsOutOfRange(watched)) return absl::OkStatus();
    RETURN_IF_ERROR(watched, "watching for the compaction");
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError("localkube did not compact its history");
}

absl::StatusOr<json> Measure(const Options& o) {
  kube::ClusterConfig config;
  RETURN_IF_ERROR(kube::ParseServerUrl(o.server, &config));
  config.source = "--server";
  ASSIGN_OR_RETURN(std::unique_ptr<kube::Client> client, kube::Client::Create(config, {.qps = 0}));
  RETURN_IF_ERROR(client->GetPath("/version").status(), "reaching ", o.server);
  malloc_trim(0);
  json r = {{"case", o.measure}, {"page_size", o.page_size}};
  r["baseline_kb"] = ProcStatusKb("VmRSS");
  ResetPeak();
  kube::InformerOptions options;
  options.namespace_ = "default";
  options.min_watch_timeout = absl::Seconds(1);
  options.initial_backoff = absl::Milliseconds(10);
  options.page_size = o.page_size;
  if (o.measure == "stripped") options.transform = kube::StripForCache;
  kube::Informer jobs(*client, Resource::TrainingJobs(), options);
  absl::Time start = absl::Now();
  jobs.Start();
  if (!jobs.WaitForSync(o.timeout)) {
    return absl::DeadlineExceededError(
        absl::StrCat("the informer did not sync: ", jobs.last_error().ToString()));
  }
  r["sync_seconds"] = absl::ToDoubleSeconds(absl::Now() - start);
  r["sync_peak_kb"] = ProcStatusKb("VmHWM");
  r["synced_kb"] = ProcStatusKb("VmRSS");
  malloc_trim(0);
  r["synced_trimmed_kb"] = ProcStatusKb("VmRSS");
  r["peak_reset"] = ResetPeak();
  RETURN_IF_ERROR(WriteAndWaitForCompaction(*client, o.timeout));
  // The relist starts when the informer's next watch is answered 410.
  absl::Time refused = absl::InfiniteFuture();
  if (!WaitFor(
          [&] {
            if (refused == absl::InfiniteFuture() && absl::IsOutOfRange(jobs.last_error())) {
              refused = absl::Now();
            }
            return jobs.relists() >= 2;
          },
          o.timeout)) {
    return absl::DeadlineExceededError("no relist after the compaction");
  }
  if (refused == absl::InfiniteFuture()) {
    return absl::InternalError("the relist came without a 410 the informer reported");
  }
  r["relist_seconds"] = absl::ToDoubleSeconds(absl::Now() - refused);
  r["relist_peak_kb"] = ProcStatusKb("VmHWM");
  r["relisted_kb"] = ProcStatusKb("VmRSS");
  jobs.Stop();
  // Read last: List() copies the whole cache.
  int64_t bytes = 0, managed = 0, last_applied = 0;
  std::vector<json> cached = jobs.List();
  for (const json& obj : cached) {
    bytes += static_cast<int64_t>(obj.dump().size());
    const json& meta = obj["metadata"];
    managed += meta.contains("managedFields");
    last_applied += meta.value("annotations", json::object()).contains(kLastApplied);
  }
  r["objects"] = cached.size();
  r["cache_json_bytes"] = bytes;
  r["with_managed_fields"] = managed;
  r["with_last_applied"] = last_applied;
  return r;
}

// ---- The run ----

// Runs this program again with --measure and returns the JSON it reports.
absl::StatusOr<json> RunCase(const std::string& measure, int64_t page_size,
                             const std::string& server, absl::Time deadline) {
  std::error_code ec;
  std::string self = fs::read_symlink("/proc/self/exe", ec).string();
  if (ec) return absl::InternalError("cannot read /proc/self/exe");
  kubetrain::ProcessOptions p;
  p.argv = {self, "--measure=" + measure, "--server=" + server,
            absl::StrCat("--page-size=", page_size),
            absl::StrCat("--timeout=", absl::ToInt64Seconds(deadline - absl::Now()), "s")};
  p.env = {{"PATH", "/usr/bin:/bin"}};
  ASSIGN_OR_RETURN(std::unique_ptr<kubetrain::Process> child, kubetrain::Process::Start(p));
  std::string out;
  std::optional<int> code;
  while (!(code = child->Poll())) {
    child->ReadOutput(&out);
    if (absl::Now() > deadline) return absl::DeadlineExceededError("measuring " + measure);
    absl::SleepFor(absl::Milliseconds(20));
  }
  child->ReadOutput(&out);  // all it wrote (process.h: one call after exit)
  if (*code != 0) return absl::InternalError(absl::StrCat("measuring ", measure, ": ", out));
  size_t at = out.rfind("RESULT ");
  if (at == std::string::npos) return absl::InternalError("no result from " + measure + ": " + out);
  size_t nl = out.find('\n', at);
  json r =
      json::parse(out.substr(at + 7, nl == std::string::npos ? nl : nl - at - 7), nullptr, false);
  if (!r.is_object()) return absl::InternalError("unreadable result: " + out.substr(at));
  return r;
}

struct Report {
  Options opt;
  int examples = 0;
  double create_seconds = 0;
  json unstripped, stripped, one_page;
};

absl::StatusOr<Report> Run(const Options& o) {
  absl::Time deadline = absl::Now() + o.timeout;
  Report report{.opt = o};
  Localkube lk;
  kube::ClusterConfig config;
  RETURN_IF_ERROR(StartLocalkube(o.localkube, &lk, &config));
  ASSIGN_OR_RETURN(std::unique_ptr<kube::Client> client, kube::Client::Create(config, {.qps = 0}));
  ASSIGN_OR_RETURN(
      std::unique_ptr<kube::Client> kubectl,
      kube::Client::Create(config, {.qps = 0, .field_manager = "kubectl-client-side-apply"}));
  RETURN_IF_ERROR(InstallCrd(*client));
  ASSIGN_OR_RETURN(std::vector<json> examples, LoadExamples());
  report.examples = static_cast<int>(examples.size());
  absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(o.client_threads);
  for (int t = 0; t < o.client_threads; ++t) {
    int begin = static_cast<int>(int64_t{o.jobs} * t / o.client_threads);
    int end = static_cast<int>(int64_t{o.jobs} * (t + 1) / o.client_threads);
    threads.emplace_back([&, t, begin, end] {
      results[t] = CreateJobs(*kubectl, *client, examples, begin, end, deadline);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) RETURN_IF_ERROR(s);
  report.create_seconds = absl::ToDoubleSeconds(absl::Now() - start);

  std::string server = absl::StrCat("http://", config.host, ":", config.port);
  ASSIGN_OR_RETURN(report.unstripped, RunCase("unstripped", o.page_size, server, deadline));
  ASSIGN_OR_RETURN(report.stripped, RunCase("stripped", o.page_size, server, deadline));
  ASSIGN_OR_RETURN(report.one_page, RunCase("stripped", 0, server, deadline));
  for (const json* r : {&report.unstripped, &report.stripped, &report.one_page}) {
    if ((*r)["objects"] != o.jobs) {
      return absl::InternalError(
          absl::StrCat("an informer cached ", (*r)["objects"].dump(), " jobs, not ", o.jobs));
    }
  }
  return report;
}

// ---- Output ----

double Mib(const json& r, const std::string& key) { return r.value(key, 0.0) / 1024.0; }
// What the informer adds to the process: RSS after the sync (freed pages handed back) less the
// RSS before the informer started.
double InformerMib(const json& r) { return Mib(r, "synced_trimmed_kb") - Mib(r, "baseline_kb"); }

json ToJson(const Report& r) {
  double cache_ratio = r.stripped.value("cache_json_bytes", 0.0) /
                       std::max(1.0, r.unstripped.value("cache_json_bytes", 0.0));
  double rss_ratio = InformerMib(r.stripped) / std::max(1e-9, InformerMib(r.unstripped));
  return {{"jobs", r.opt.jobs},
          {"examples", r.examples},
          {"page_size", r.opt.page_size},
          {"create_seconds", r.create_seconds},
          {"unstripped", r.unstripped},
          {"stripped", r.stripped},
          {"stripped_one_page", r.one_page},
          {"ratio_stripped_to_unstripped_informer_rss", rss_ratio},
          {"ratio_stripped_to_unstripped_cache_json", cache_ratio}};
}

void PrintTable(const Report& r) {
  std::printf(
      "informer_memory: %d finished TrainingJobs (deploy/examples/*.yaml in turn, %d files), with "
      "kubectl's last-applied-configuration and the managedFields localkube records; created in "
      "%.1f s\n\n",
      r.opt.jobs, r.examples, r.create_seconds);
  std::string one_page_head = "stripped, 1 page";
  std::printf("%-44s %12s %12s %12s %18s\n", "", "unstripped", "stripped", "ratio",
              one_page_head.c_str());
  std::printf("%-44s %12lld %12lld %12s %18s\n", "LIST page size (objects)",
              static_cast<long long>(r.opt.page_size), static_cast<long long>(r.opt.page_size), "",
              "all");
  auto row = [&](const std::string& name, double u, double s, double one, bool ratio,
                 int digits = 1) {
    std::string rt = ratio && u > 0 ? absl::StrFormat("%.2f", s / u) : "";
    std::printf("%-44s %12.*f %12.*f %12s %18.*f\n", name.c_str(), digits, u, digits, s, rt.c_str(),
                digits, one);
  };
  const json &u = r.unstripped, &s = r.stripped, &o = r.one_page;
  row("cached objects as JSON (MiB)", u.value("cache_json_bytes", 0.0) / (1 << 20),
      s.value("cache_json_bytes", 0.0) / (1 << 20), o.value("cache_json_bytes", 0.0) / (1 << 20),
      true);
  row("RSS before the informer (MiB)", Mib(u, "baseline_kb"), Mib(s, "baseline_kb"),
      Mib(o, "baseline_kb"), false);
  row("peak RSS during the first sync, VmHWM (MiB)", Mib(u, "sync_peak_kb"), Mib(s, "sync_peak_kb"),
      Mib(o, "sync_peak_kb"), true);
  row("RSS after the sync, VmRSS (MiB)", Mib(u, "synced_kb"), Mib(s, "synced_kb"),
      Mib(o, "synced_kb"), true);
  row("RSS after the sync, after malloc_trim (MiB)", Mib(u, "synced_trimmed_kb"),
      Mib(s, "synced_trimmed_kb"), Mib(o, "synced_trimmed_kb"), true);
  row("  the informer's share: that less the baseline", InformerMib(u), InformerMib(s),
      InformerMib(o), true);
  row("peak RSS during a forced relist (MiB)", Mib(u, "relist_peak_kb"), Mib(s, "relist_peak_kb"),
      Mib(o, "relist_peak_kb"), true);
  row("  over the RSS before the relist (MiB)",
      Mib(u, "relist_peak_kb") - Mib(u, "synced_trimmed_kb"),
      Mib(s, "relist_peak_kb") - Mib(s, "synced_trimmed_kb"),
      Mib(o, "relist_peak_kb") - Mib(o, "synced_trimmed_kb"), true);
  row("RSS after the relist (MiB)", Mib(u, "relisted_kb"), Mib(s, "relisted_kb"),
      Mib(o, "relisted_kb"), true);
  row("first sync (s)", u.value("sync_seconds", 0.0), s.value("sync_seconds", 0.0),
      o.value("sync_seconds", 0.0), false, 2);
  row("relist after the watch's 410 (s)", u.value("relist_seconds", 0.0),
      s.value("relist_seconds", 0.0), o.value("relist_seconds", 0.0), false, 2);
  std::printf("\nstripped/unstripped: informer RSS %.2f, cached JSON %.2f\n",
              InformerMib(s) / std::max(1e-9, InformerMib(u)),
              s.value("cache_json_bytes", 0.0) / std::max(1.0, u.value("cache_json_bytes", 0.0)));
  if (!s.value("peak_reset", false)) {
    std::printf("(the kernel refused to reset VmHWM: relist peaks are the whole run's)\n");
  }
}

int Main(int argc, char** argv) {
  absl::StatusOr<Options> opt = ParseFlags(argc, argv);
  if (!opt.ok()) return UsageExit("informer_memory", opt.status());
  signal(SIGPIPE, SIG_IGN);
  if (!opt->measure.empty()) {
    absl::StatusOr<json> r = Measure(*opt);
    if (!r.ok()) return bench::FailureExit("informer_memory --measure", r.status());
    std::printf("RESULT %s\n", r->dump().c_str());
    return 0;
  }
  return bench::ReportExit("informer_memory", Run(*opt), opt->json, ToJson, PrintTable);
}

}  // namespace
}  // namespace kubetrain

int main(int argc, char** argv) {
  kubetrain::SetUpProgram();
  return kubetrain::Main(argc, argv);
}
