// What operator_scale reads off the running kubetrain-operator: its /metrics (Prometheus text)
// and its memory from /proc (see operator_metrics.h).
#include "bench/operator_scale/operator_metrics.h"

#include <httplib.h>

#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::bench {
namespace {

// The value of label `key` in a Prometheus sample's `{a="x",b="y"}` part.
std::string Label(const std::string& labels, const std::string& key) {
  std::string needle = key + "=\"";
  size_t at = labels.find(needle);
  if (at == std::string::npos) return "";
  at += needle.size();
  size_t end = labels.find('"', at);
  return end == std::string::npos ? "" : labels.substr(at, end - at);
}

}  // namespace

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

}  // namespace kubetrain::bench
