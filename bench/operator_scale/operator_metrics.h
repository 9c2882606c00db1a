// What operator_scale reads off the running kubetrain-operator: its API requests by verb and
// code and its queue depth from its own /metrics, and its memory from /proc/<pid>/status.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"

namespace kubetrain::bench {

struct Scrape {
  std::map<std::string, double> by_verb;       // summed over codes
  std::map<std::string, double> by_verb_code;  // "create 201", "update 409", ...
  double conflicts = 0;                        // code 409 on any verb
  double errors = 0;                           // code 0 or >= 500
  double queue_depth = 0;

  double Writes() const {
    double w = 0;
    for (const char* v : {"create", "update", "patch", "delete", "deletecollection"}) {
      auto it = by_verb.find(v);
      if (it != by_verb.end()) w += it->second;
    }
    return w;
  }
  // Server-side dry runs (?dryRun=All): admission checks that store nothing, not writes.
  double DryRuns() const {
    auto it = by_verb.find("create-dry-run");
    return it == by_verb.end() ? 0 : it->second;
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

// GET /metrics on 127.0.0.1:`port`: kubetrain_operator_api_requests_total and
// kubetrain_operator_queue_depth.
absl::StatusOr<Scrape> ScrapeMetrics(int port);

}  // namespace kubetrain::bench
