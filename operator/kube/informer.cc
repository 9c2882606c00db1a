#include "operator/kube/informer.h"

#include <random>

#include "absl/time/clock.h"
#include "common/backoff.h"
#include "common/logging.h"

namespace kubetrain::kube {

using nlohmann::json;

namespace {

// Objects without an object `metadata` are dropped at the door, so everything in the cache (and
// everything handlers see) can be read without checks.
bool WellFormed(const json& obj) {
  return obj.is_object() && obj.contains("metadata") && obj["metadata"].is_object();
}

}  // namespace

std::string ObjectKey(const json& obj) {
  if (!WellFormed(obj)) return "";
  const json& meta = obj["metadata"];
  std::string ns = meta.value("namespace", "");
  std::string name = meta.value("name", "");
  return ns.empty() ? name : ns + "/" + name;
}

Informer::Informer(Client& client, Resource resource, InformerOptions options)
    : client_(client), resource_(std::move(resource)), options_(std::move(options)) {}

Informer::~Informer() { Stop(); }

void Informer::AddHandlers(EventHandlers handlers) { handlers_.push_back(std::move(handlers)); }

void Informer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  stop_ = true;
  cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(absl::Duration timeout) const {
  absl::Time deadline = absl::Now() + timeout;
  while (!synced_.load()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

std::optional<json> Informer::Get(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(key);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> Informer::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<json> out;
  out.reserve(cache_.size());
  for (const auto& [key, obj] : cache_) out.push_back(obj);
  return out;
}

std::vector<json> Informer::ListByLabel(const std::string& ns, const std::string& key,
                                        const std::string& value) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<json> out;
  for (auto it = cache_.lower_bound(ns + "/"); it != cache_.end(); ++it) {
    if (it->first.compare(0, ns.size() + 1, ns + "/") != 0) break;
    const json& labels = it->second["metadata"].value("labels", json::object());
    if (labels.is_object() && labels.value(key, "") == value) out.push_back(it->second);
  }
  return out;
}

absl::Status Informer::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

std::string Informer::resource_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

void Informer::Run() {
  Backoff backoff({.initial = options_.initial_backoff, .max = options_.max_backoff});
  bool need_list = true;
  while (!stop_.load()) {
    absl::Status s = need_list ? Relist() : WatchOnce();
    if (stop_.load()) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = s;
    }
    if (s.ok()) {
      need_list = false;
      if (synced_.load()) backoff.Reset();
      continue;
    }
    // 410: our resourceVersion fell out of the server's history; only a fresh list helps.
    need_list = need_list || s.code() == absl::StatusCode::kOutOfRange;
    absl::Duration wait = backoff.Next();
    log::Warn(
        "Watch failed; retrying",
        {{"resource", resource_.plural}, {"error", s}, {"relist", need_list}, {"retry_in", wait}});
    absl::Time until = absl::Now() + wait;
    while (!stop_.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::Status Informer::Relist() {
  ListOptions o;
  o.label_selector = options_.label_selector;
  o.field_selector = options_.field_selector;
  // The first list may come from the server's cache; after a 410 it must be current.
  o.resource_version = relists_.load() == 0 ? "0" : "";
  absl::StatusOr<json> list = client_.ListAll(resource_, options_.namespace_, o);
  if (!list.ok()) return list.status();
  relists_++;
  std::map<std::string, json> fresh;
  for (json& item : (*list)["items"]) {
    if (!WellFormed(item)) continue;
    if (!item.contains("kind")) item["kind"] = resource_.kind;
    if (!item.contains("apiVersion")) item["apiVersion"] = resource_.ApiVersion();
    std::string key =
        ObjectKey(item);  // before the move: json's operator= takes its argument first
    fresh[key] = std::move(item);
  }
  std::vector<json> added, deleted;
  std::vector<std::pair<json, json>> updated;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, obj] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        added.push_back(obj);
      } else if (it->second != obj) {
        updated.emplace_back(it->second, obj);
      }
    }
    for (const auto& [key, obj] : cache_) {
      if (!fresh.count(key)) deleted.push_back(obj);
    }
    cache_ = std::move(fresh);
    resource_version_ = (*list)["metadata"].value("resourceVersion", "");
  }
  for (const auto& h : handlers_) {
    for (const json& o : added)
      if (h.on_add) h.on_add(o);
    for (const auto& [old_obj, new_obj] : updated)
      if (h.on_update) h.on_update(old_obj, new_obj);
    for (const json& o : deleted)
      if (h.on_delete) h.on_delete(o);
  }
  synced_ = true;
  return absl::OkStatus();
}

absl::Status Informer::WatchOnce() {
  static thread_local std::mt19937 rng(std::random_device{}());
  WatchOptions o;
  o.label_selector = options_.label_selector;
  o.field_selector = options_.field_selector;
  o.resource_version = resource_version();
  o.allow_bookmarks = options_.allow_bookmarks;
  int min_seconds = static_cast<int>(absl::ToInt64Seconds(options_.min_watch_timeout));
  o.timeout_seconds = min_seconds + std::uniform_int_distribution<int>(0, min_seconds)(rng);
  watches_++;
  return client_.Watch(
      resource_, options_.namespace_, o,
      [this](const WatchEvent& e) {
        Apply(e);
        return !stop_.load();
      },
      &cancel_);
}

void Informer::Apply(const WatchEvent& event) {
  if (!WellFormed(event.object)) {
    log::Warn("Ignored a malformed watch event",
              {{"resource", resource_.plural}, {"type", event.type}});
    return;
  }
  std::string rv = event.object["metadata"].value("resourceVersion", "");
  if (event.type == "BOOKMARK") {
    std::lock_guard<std::mutex> lock(mu_);
    resource_version_ = rv;
    return;
  }
  json obj = event.object;
  if (!obj.contains("kind")) obj["kind"] = resource_.kind;
  if (!obj.contains("apiVersion")) obj["apiVersion"] = resource_.ApiVersion();
  if (event.type == "DELETED") {
    Remove(obj);
  } else {
    Upsert(obj);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!rv.empty()) resource_version_ = rv;
}

void Informer::Upsert(const json& obj) {
  std::optional<json> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = cache_.try_emplace(ObjectKey(obj), obj);
    if (!inserted) {
      old = std::move(it->second);
      it->second = obj;
    }
  }
  for (const auto& h : handlers_) {
    if (old && h.on_update) h.on_update(*old, obj);
    if (!old && h.on_add) h.on_add(obj);
  }
}

void Informer::Remove(const json& obj) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.erase(ObjectKey(obj));
  }
  for (const auto& h : handlers_) {
    if (h.on_delete) h.on_delete(obj);
  }
}

}  // namespace kubetrain::kube
