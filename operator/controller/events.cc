#include "operator/controller/events.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"

namespace kubetrain::controller {

using nlohmann::json;

void EventRecorder::Normal(const json& object, const std::string& reason,
                           const std::string& message) {
  Record(object, "Normal", reason, message);
}

void EventRecorder::Warning(const json& object, const std::string& reason,
                            const std::string& message) {
  Record(object, "Warning", reason, message);
}

void EventRecorder::Record(const json& object, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const json& meta = object["metadata"];
  std::string ns = meta.value("namespace", "default");
  absl::Time now = absl::Now();
  std::string key = absl::StrCat(meta.value("uid", ""), "\x1f", ns, "\x1f", meta.value("name", ""),
                                 "\x1f", type, "\x1f", reason, "\x1f", message);
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = seen_.find(key);
    if (it != seen_.end() && now - it->second.last < kAggregateWithin) {
      Seen& s = it->second;
      ++s.count;
      s.last = now;
      order_.splice(order_.end(), order_, s.age);
      std::string name = s.name;
      json patch = {{"count", s.count}, {"lastTimestamp", kube::FormatTime(now)}};
      lock.unlock();
      absl::StatusOr<json> patched =
          client_.Patch(kube::Resource::Events(), ns, name, kube::PatchType::kMerge, patch.dump());
      if (patched.ok()) return;
      if (patched.status().code() != absl::StatusCode::kNotFound) {
        log::Warn("Could not update an event", {{"reason", reason}, {"error", patched.status()}});
        return;
      }
      // The Event expired (events have a TTL) or was deleted: record it afresh.
      lock.lock();
      if (auto again = seen_.find(key); again != seen_.end()) {
        order_.erase(again->second.age);
        seen_.erase(again);
      }
    }
  }
  std::string stamp = kube::FormatTime(now);
  json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"generateName", meta.value("name", "object") + "."}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", object.value("apiVersion", "")},
        {"kind", object.value("kind", "")},
        {"name", meta.value("name", "")},
        {"namespace", ns},
        {"uid", meta.value("uid", "")},
        {"resourceVersion", meta.value("resourceVersion", "")}}},
      {"reason", reason},
      {"message", message},
      {"type", type},
      {"source", {{"component", component_}}},
      {"reportingComponent", component_},
      {"firstTimestamp", stamp},
      {"lastTimestamp", stamp},
      {"count", 1}};
  absl::StatusOr<json> created = client_.Create(kube::Resource::Events(), ns, event);
  if (!created.ok()) {
    log::Warn("Could not record an event", {{"reason", reason}, {"error", created.status()}});
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (seen_.count(key)) return;  // another thread recorded the same event meanwhile
  order_.push_back(key);
  seen_[key] = Seen{ns, (*created)["metadata"].value("name", ""), 1, now, std::prev(order_.end())};
  while (seen_.size() > kMaxSeen) {
    seen_.erase(order_.front());
    order_.pop_front();
  }
}

}  // namespace kubetrain::controller
