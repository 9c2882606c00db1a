#include "operator/controller/progress.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

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

ProgressPoller::ProgressPoller(Options options,
                               std::function<void(const std::string& key)> worth_writing)
    : options_(options), worth_writing_(std::move(worth_writing)) {}

ProgressPoller::~ProgressPoller() { Stop(); }

void ProgressPoller::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!threads_.empty()) return;
  stop_ = false;
  for (int i = 0; i < std::max(1, options_.threads); ++i) threads_.emplace_back([this] { Loop(); });
}

void ProgressPoller::Stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    threads.swap(threads_);
  }
  wake_.notify_all();
  for (std::thread& t : threads) t.join();  // a read in flight ends within its timeout
}

void ProgressPoller::Track(const std::string& key, const std::string& host, int port) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    Target& t = targets_[key];
    if (t.generation != 0 && t.host == host && t.port == port) return;
    t.host = host;
    t.port = port;
    t.generation = ++generations_;
    t.due = absl::Now();
  }
  wake_.notify_one();
}

void ProgressPoller::Untrack(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  targets_.erase(key);
}

std::optional<api::Progress> ProgressPoller::Latest(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = targets_.find(key);
  if (it == targets_.end()) return std::nullopt;
  return it->second.latest;
}

bool ProgressPoller::WorthWriting(const std::optional<api::Progress>& written,
                                  absl::Time written_at, const api::Progress& latest,
                                  absl::Time now) const {
  if (!written) return true;
  if (*written == latest) return false;
  if (written->epoch != latest.epoch) return true;
  return now - written_at >= options_.min_write_interval;
}

void ProgressPoller::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    absl::Time now = absl::Now();
    auto next = targets_.end();
    for (auto it = targets_.begin(); it != targets_.end(); ++it) {
      if (it->second.busy) continue;
      if (next == targets_.end() || it->second.due < next->second.due) next = it;
    }
    if (next == targets_.end() || next->second.due > now) {
      absl::Duration wait = next == targets_.end() ? absl::Seconds(1) : next->second.due - now;
      wake_.wait_for(lock, absl::ToChronoMicroseconds(std::min(wait, absl::Seconds(1))));
      continue;
    }
    const std::string key = next->first;
    Target& t = next->second;
    t.busy = true;
    const std::string host = t.host;
    const int port = t.port;
    const uint64_t generation = t.generation;
    lock.unlock();
    absl::StatusOr<api::Progress> read = FetchProgress(host, port, options_.timeout);
    lock.lock();
    auto it = targets_.find(key);
    if (it == targets_.end()) continue;  // untracked meanwhile
    Target& after = it->second;
    after.busy = false;
    after.due = absl::Now() + options_.interval;
    if (after.generation != generation || !read.ok()) continue;
    after.latest = *read;
    now = absl::Now();
    if (!WorthWriting(after.announced, after.announced_at, *read, now)) continue;
    after.announced = *read;
    after.announced_at = now;
    lock.unlock();
    worth_writing_(key);
    lock.lock();
  }
}

}  // namespace kubetrain::controller
