// operator_scale's results (Report, filled in by the run in operator_scale.cc), the ratios it
// derives from them, and its output: a table, or JSON with --json.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/operator_scale/operator_metrics.h"
#include "bench/operator_scale/options.h"

namespace kubetrain::bench {

// The fewest API writes a job of this shape needs (see operator_scale.cc's header): its Secret,
// its Service and one create per pod; three status writes (Created, Running, Succeeded); and the
// cleanup the default cleanPodPolicy (Running) asks for once the chief succeeds, while the PS
// and the other workers still run: one deletecollection of those pods and one Service delete.
inline constexpr int kMinimumCreatesBase = 2;  // the Secret and the Service; pods per shape
inline constexpr int kMinimumStatusWrites = 3;
inline constexpr int kMinimumCleanupWrites = 2;
inline constexpr double kWritesGoal = 1.1;     // x the minimum, Events included
inline constexpr double kLatencyP99Goal = 30;  // s, chief Succeeded -> job Succeeded
inline constexpr double kRssGoalMib = 200;

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
  bool settled = false;     // the operator's writes had stopped when they were counted
  double events = 0;
  std::map<std::string, double> events_by_reason;
  double peak_rss_mib = 0;
  double final_rss_mib = 0;
  double wall_s = 0;

  int Minimum() const {
    return kMinimumCreatesBase + pods_per_job + kMinimumStatusWrites + kMinimumCleanupWrites;
  }
  double WritesPerJob() const { return ops.Writes() / opt.jobs; }
  double EventsPerJob() const { return events / opt.jobs; }
  double NonEventWritesPerJob() const { return (ops.Writes() - events) / opt.jobs; }
  double DryRunsPerJob() const { return ops.DryRuns() / opt.jobs; }
  double Ratio() const { return WritesPerJob() / Minimum(); }
  double RatioWithoutEvents() const { return NonEventWritesPerJob() / Minimum(); }
  // Answers other than 2xx (409 conflicts or AlreadyExists, 404 on deletes, 5xx, no answer).
  double Non2xx() const {
    double n = 0;
    for (const auto& [key, v] : ops.by_verb_code) {
      if (key.size() < 4 || key[key.size() - 3] != '2') n += v;
    }
    return n;
  }
};

nlohmann::json ToJson(const Report& r);
void PrintTable(const Report& r);

}  // namespace kubetrain::bench
