#include "operator/kube/informer.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
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

void StripForCache(json& obj) {
  if (!WellFormed(obj)) return;
  json& meta = obj["metadata"];
  meta.erase("managedFields");
  auto annotations = meta.find("annotations");
  if (annotations != meta.end() && annotations->is_object()) {
    annotations->erase("kubectl.kubernetes.io/last-applied-configuration");
    if (annotations->empty()) meta.erase(annotations);
  }
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

Informer::Entry Informer::Pack(const json& obj) const {
  auto packed = std::make_shared<Packed>();
  const json& meta = obj["metadata"];
  packed->resource_version = meta.value("resourceVersion", "");
  auto labels = meta.find("labels");
  if (labels != meta.end() && labels->is_object()) {
    std::string ns = meta.value("namespace", "");
    for (const std::string& label : options_.index_labels) {
      auto v = labels->find(label);
      if (v == labels->end() || !v->is_string()) continue;
      packed->index_slots.push_back(
          absl::StrCat(label, "\x1f", ns, "\x1f", v->get_ref<const std::string&>()));
    }
  }
  packed->msgpack = json::to_msgpack(obj);
  return packed;
}

json Informer::Unpack(const Entry& entry) { return json::from_msgpack(entry->msgpack); }

std::optional<json> Informer::Get(const std::string& key) const {
  Entry obj;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it == cache_.end()) return std::nullopt;
    obj = it->second;
  }
  return Unpack(obj);  // outside the lock: cached entries never change
}

std::vector<json> Informer::List() const {
  std::vector<Entry> objs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    objs.reserve(cache_.size());
    for (const auto& [key, obj] : cache_) objs.push_back(obj);
  }
  std::vector<json> out;
  out.reserve(objs.size());
  for (const Entry& obj : objs) out.push_back(Unpack(obj));
  return out;
}

std::vector<json> Informer::ListByLabel(const std::string& ns, const std::string& key,
                                        const std::string& value) const {
  const auto& indexed = options_.index_labels;
  const bool by_index = std::find(indexed.begin(), indexed.end(), key) != indexed.end();
  std::vector<Entry> objs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (by_index) {
      auto hit = index_.find(absl::StrCat(key, "\x1f", ns, "\x1f", value));
      if (hit != index_.end()) {
        for (const std::string& k : hit->second) {
          auto it = cache_.find(k);
          if (it != cache_.end()) objs.push_back(it->second);
        }
      }
    } else {
      for (auto it = cache_.lower_bound(ns + "/"); it != cache_.end(); ++it) {
        if (it->first.compare(0, ns.size() + 1, ns + "/") != 0) break;
        objs.push_back(it->second);
      }
    }
  }
  std::vector<json> out;
  for (const Entry& obj : objs) {
    json o = Unpack(obj);
    if (!by_index) {
      const json& meta = o["metadata"];
      auto labels = meta.find("labels");
      if (labels == meta.end() || !labels->is_object()) continue;
      auto v = labels->find(key);
      if (v == labels->end() || !v->is_string() || v->get_ref<const std::string&>() != value) {
        continue;
      }
    }
    out.push_back(std::move(o));
  }
  return out;
}

void Informer::IndexLocked(const std::string& key, const Entry& entry, bool add) {
  for (const std::string& slot : entry->index_slots) {
    if (add) {
      index_[slot].insert(key);
    } else if (auto it = index_.find(slot); it != index_.end()) {
      it->second.erase(key);
      if (it->second.empty()) index_.erase(it);
    }
  }
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
  o.limit = options_.page_size;
  // The first list may come from the server's cache; after a 410 it must be current.
  o.resource_version = relists_.load() == 0 ? "0" : "";
  Cache fresh;
  std::string version;
  bool expired = false;
  absl::Status listed = ListInto(o, &fresh, &version, &expired);
  if (!listed.ok() && expired) {
    // As client-go's pager does: the continue token outlived the server's history, so the rest
    // of that snapshot cannot be read; read the whole collection again in one answer.
    log::Info("Continue token expired while listing; listing everything at once",
              {{"resource", resource_.plural}, {"objects_read", fresh.size()}});
    fresh.clear();
    o.limit = 0;
    listed = ListInto(o, &fresh, &version, &expired);
  }
  if (!listed.ok()) return listed;
  relists_++;
  std::vector<Entry> added, deleted;
  std::vector<std::pair<Entry, Entry>> updated;
  // Only this thread writes cache_, so reading it here needs no lock.
  for (const auto& [key, obj] : fresh) {
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      added.push_back(obj);
    } else if (it->second != obj && it->second->msgpack != obj->msgpack) {
      updated.emplace_back(it->second, obj);
    }
  }
  for (const auto& [key, obj] : cache_) {
    if (!fresh.count(key)) deleted.push_back(obj);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.swap(fresh);
    index_.clear();
    for (const auto& [key, obj] : cache_) IndexLocked(key, obj, true);
    resource_version_ = version;
  }
  fresh.clear();  // the old cache, freed outside the lock
  if (!handlers_.empty()) {
    for (const Entry& obj : added) {
      const json o = Unpack(obj);
      for (const auto& h : handlers_)
        if (h.on_add) h.on_add(o);
    }
    for (const auto& [old_entry, new_entry] : updated) {
      const json old_obj = Unpack(old_entry), new_obj = Unpack(new_entry);
      for (const auto& h : handlers_)
        if (h.on_update) h.on_update(old_obj, new_obj);
    }
    for (const Entry& obj : deleted) {
      const json o = Unpack(obj);
      for (const auto& h : handlers_)
        if (h.on_delete) h.on_delete(o);
    }
  }
  synced_ = true;
  return absl::OkStatus();
}

absl::Status Informer::ListInto(const ListOptions& options, Cache* fresh,
                                std::string* resource_version, bool* continue_expired) {
  std::string token;
  for (bool first = true;; first = false) {
    // One page at a time: its raw JSON is gone before the next one is read.
    absl::StatusOr<json> page = client_.List(resource_, options_.namespace_, options, token);
    if (!page.ok()) {
      *continue_expired = !token.empty() && page.status().code() == absl::StatusCode::kOutOfRange;
      return page.status();
    }
    json meta = page->is_object() ? page->value("metadata", json::object()) : json::object();
    if (!meta.is_object()) meta = json::object();
    // Every page of a paginated list is one snapshot: the first page's version is the list's.
    if (first) *resource_version = meta.value("resourceVersion", "");
    auto items = page->find("items");
    if (items != page->end() && items->is_array()) {
      for (json& item : *items) AddListed(std::move(item), fresh);
    }
    token = meta.value("continue", "");
    if (token.empty()) return absl::OkStatus();
  }
}

void Informer::AddListed(json item, Cache* fresh) const {
  if (!WellFormed(item)) return;
  std::string key = ObjectKey(item);
  const json& meta = item["metadata"];
  auto rv = meta.find("resourceVersion");
  auto cached = cache_.find(key);
  if (cached != cache_.end() && rv != meta.end() && rv->is_string() && !rv->empty() &&
      cached->second->resource_version == rv->get_ref<const std::string&>()) {
    // Unchanged since it was cached: one copy serves the old cache and the new one.
    (*fresh)[key] = cached->second;
    return;
  }
  if (!item.contains("kind")) item["kind"] = resource_.kind;
  if (!item.contains("apiVersion")) item["apiVersion"] = resource_.ApiVersion();
  if (options_.transform) options_.transform(item);
  if (!WellFormed(item)) return;
  (*fresh)[key] = Pack(item);
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
  if (options_.transform) options_.transform(obj);
  if (WellFormed(obj)) {
    if (event.type == "DELETED") {
      Remove(ObjectKey(obj), obj);
    } else {
      Upsert(ObjectKey(obj), obj);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!rv.empty()) resource_version_ = rv;
}

void Informer::Upsert(const std::string& key, const json& obj) {
  Entry entry = Pack(obj);
  Entry old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& slot = cache_[key];
    old = std::exchange(slot, entry);
    if (old) IndexLocked(key, old, false);
    IndexLocked(key, entry, true);
  }
  if (handlers_.empty()) return;
  if (!old) {
    for (const auto& h : handlers_)
      if (h.on_add) h.on_add(obj);
    return;
  }
  const json old_obj = Unpack(old);
  for (const auto& h : handlers_)
    if (h.on_update) h.on_update(old_obj, obj);
}

void Informer::Remove(const std::string& key, const json& obj) {
  Entry gone;  // freed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      gone = std::move(it->second);
      cache_.erase(it);
      IndexLocked(key, gone, false);
    }
  }
  for (const auto& h : handlers_) {
    if (h.on_delete) h.on_delete(obj);
  }
}

}  // namespace kubetrain::kube
