// operator_scale's results (Report, filled in by the run in operator_scale.cc), the ratios it
// derives from them, and its output: a table, or JSON with --json.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/operator_scale/operator_metrics.h"
#include "bench/operator_scale/options.h"

namespace kubetrain::bench {

// "Ideal" writes per job: the Service and one create per pod, plus three status writes
// (Created, Running, Succeeded); see operator_scale.cc's header.
inline constexpr int kIdealCreatesBase = 1;  // the Service; pods are added per shape
inline constexpr int kIdealStatusWrites = 3;

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

nlohmann::json ToJson(const Report& r);
void PrintTable(const Report& r);

}  // namespace kubetrain::bench
