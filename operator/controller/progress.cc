#include "operator/controller/progress.h"

#include <httplib.h>

#include <cmath>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kubetrain::controller {

absl::StatusOr<api::Progress> ParseProgress(absl::string_view text) {
  std::map<std::string, double> values;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line.front() == '#') continue;
    size_t name_end = line.find_first_of("{ ");
    size_t value_start = line.rfind(' ');
    if (name_end == absl::string_view::npos || value_start == absl::string_view::npos) continue;
    double v;
    if (!absl::SimpleAtod(line.substr(value_start + 1), &v)) continue;
    values[std::string(line.substr(0, name_end))] = v;
  }
  auto get = [&](const char* name) {
    auto it = values.find(name);
    return it == values.end() || std::isnan(it->second) ? 0.0 : it->second;
  };
  if (!values.count("kubetrain_worker_global_step")) {
    return absl::NotFoundError("no kubetrain_worker_global_step in the chief's metrics");
  }
  api::Progress p;
  p.step = static_cast<int64_t>(get("kubetrain_worker_global_step"));
  p.epoch = static_cast<int64_t>(get("kubetrain_worker_epoch"));
  p.loss = get("kubetrain_worker_loss");
  p.accuracy = get("kubetrain_worker_accuracy");
  p.examples_per_second = get("kubetrain_worker_examples_per_second");
  return p;
}

absl::StatusOr<api::Progress> ParseFinalSummary(absl::string_view text) {
  // The last summary wins: a restarted chief may have printed an earlier one.
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    absl::string_view line = absl::StripAsciiWhitespace(*it);
    size_t brace = line.find('{');
    if (brace == absl::string_view::npos) continue;
    nlohmann::json doc = nlohmann::json::parse(line.substr(brace), nullptr, false);
    if (!doc.is_object() || doc.value("event", "") != "training_complete") continue;
    auto number = [&](const char* key) {
      const nlohmann::json& v = doc.value(key, nlohmann::json());
      return v.is_number() && std::isfinite(v.get<double>()) ? v.get<double>() : 0.0;
    };
    api::Progress p;
    p.step = static_cast<int64_t>(number("steps"));
    p.epoch = static_cast<int64_t>(number("epochs"));
    p.loss = number("test_loss");
    p.accuracy = number("test_accuracy");
    p.examples_per_second = number("examples_per_sec");
    return p;
  }
  return absl::NotFoundError("no training_complete summary");
}

absl::StatusOr<api::Progress> FetchProgress(const std::string& ip, int port,
                                            absl::Duration timeout) {
  httplib::Client client(ip, port);
  client.set_connection_timeout(absl::ToChronoSeconds(timeout));
  client.set_read_timeout(absl::ToChronoSeconds(timeout));
  httplib::Result res = client.Get("/metrics");
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("chief metrics at ", ip, ":", port, ": ", httplib::to_string(res.error())));
  }
  if (res->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("chief metrics at ", ip, ":", port, ": HTTP ", res->status));
  }
  return ParseProgress(res->body);
}

}  // namespace kubetrain::controller
