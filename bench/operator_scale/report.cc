// operator_scale's output (see report.h): the report as a table against its goals, or as JSON.
#include "bench/operator_scale/report.h"

#include <cstdio>

#include "absl/strings/str_format.h"

namespace kubetrain::bench {

using nlohmann::json;

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
          {"writes_settled", r.settled},
          {"events_per_job", r.EventsPerJob()},
          {"writes_per_job_excluding_events", r.NonEventWritesPerJob()},
          {"reads_per_job", r.ops.Reads() / r.opt.jobs},
          {"dry_runs_per_job", r.DryRunsPerJob()},
          {"minimum_writes_per_job", r.Minimum()},
          {"ratio_to_minimum", r.Ratio()},
          {"ratio_goal", kWritesGoal},
          {"ratio_to_minimum_without_events", r.RatioWithoutEvents()},
          {"latency_p99_goal_seconds", kLatencyP99Goal},
          {"operator_non_2xx_answers", r.Non2xx()},
          {"operator_peak_rss_mib", r.peak_rss_mib},
          {"operator_final_rss_mib", r.final_rss_mib},
          {"rss_goal_mib", kRssGoalMib},
          {"wall_seconds", r.wall_s}};
}

void PrintTable(const Report& r) {
  auto verb = [&](const char* v) {
    auto it = r.ops.by_verb.find(v);
    return it == r.ops.by_verb.end() ? 0.0 : it->second / r.opt.jobs;
  };
  auto row = [](const std::string& name, const std::string& value, const std::string& goal = "") {
    std::string line = absl::StrFormat("%-62s %10s  %s", name, value, goal);
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
  auto goal = [](bool met, const std::string& text) {
    return text + (met ? " (MET)" : " (MISSED)");
  };
  row("chief Succeeded -> job Succeeded p99 (s)", f(r.success_p99_s, 3),
      goal(r.success_p99_s <= kLatencyP99Goal, absl::StrFormat("<= %g", kLatencyP99Goal)));
  row("chief Succeeded -> job Succeeded max (s)", f(r.success_max_s, 3));
  row("operator API writes / job (all)", f(r.WritesPerJob()),
      r.settled ? "" : "(still writing when counted: cleanup unfinished, undercounted)");
  row("  create / update / patch / delete / deletecollection",
      absl::StrFormat("%.2f/%.2f/%.2f/%.2f/%.2f", verb("create"), verb("update"), verb("patch"),
                      verb("delete"), verb("deletecollection")));
  row("  of which Events", f(r.EventsPerJob()));
  row("  answers other than 2xx / job (409s)",
      absl::StrFormat("%.2f (%.2f)", r.Non2xx() / r.opt.jobs, r.ops.conflicts / r.opt.jobs));
  row("operator dry-run creates / job (store nothing)", f(r.DryRunsPerJob()));
  row(absl::StrFormat("ratio to the minimum (%d = %d creates + %d status + %d cleanup)",
                      r.Minimum(), kMinimumCreatesBase + r.pods_per_job, kMinimumStatusWrites,
                      kMinimumCleanupWrites),
      f(r.Ratio()),
      r.settled ? goal(r.Ratio() <= kWritesGoal, absl::StrFormat("<= %g", kWritesGoal))
                : absl::StrFormat("<= %g (not judged: undercounted)", kWritesGoal));
  row("  same, without Events", f(r.RatioWithoutEvents()));
  row("operator API reads / job (get/list/watch)", f(r.ops.Reads() / r.opt.jobs));
  row("operator peak RSS, VmHWM (MiB)", f(r.peak_rss_mib, 1),
      goal(r.peak_rss_mib <= kRssGoalMib, absl::StrFormat("<= %g", kRssGoalMib)));
  row("wall time (s)", f(r.wall_s, 1));
}

}  // namespace kubetrain::bench
