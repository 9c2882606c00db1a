#include "localkube/store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kubetrain::localkube {
namespace {

std::string ObjectKey(const std::string& ns, const std::string& name) { return ns + "/" + name; }

std::string KeyOf(const nlohmann::json& object) {
  const auto& meta = object["metadata"];
  return ObjectKey(meta.value("namespace", ""), meta.value("name", ""));
}

}  // namespace

std::optional<nlohmann::json> Store::Get(const std::string& key, const std::string& ns,
                                         const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto coll = objects_.find(key);
  if (coll == objects_.end()) return std::nullopt;
  auto it = coll->second.find(ObjectKey(ns, name));
  if (it == coll->second.end()) return std::nullopt;
  return it->second;
}

std::vector<nlohmann::json> Store::List(const std::string& key, const std::string& ns,
                                        int64_t* revision) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<nlohmann::json> out;
  if (revision) *revision = revision_;
  auto coll = objects_.find(key);
  if (coll == objects_.end()) return out;
  std::string prefix = ns.empty() ? "" : ns + "/";
  for (auto it = coll->second.lower_bound(prefix); it != coll->second.end(); ++it) {
    if (!prefix.empty() && it->first.compare(0, prefix.size(), prefix) != 0) break;
    out.push_back(it->second);
  }
  return out;
}

absl::Status Store::Scan(const std::string& key, const std::string& ns, const std::string& from,
                         int64_t revision, const std::function<bool(const nlohmann::json&)>& visit,
                         int64_t* read_at) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (revision == 0) revision = revision_;
  if (revision < compacted_) {
    return absl::OutOfRangeError(
        absl::StrCat("too old resource version: ", revision, " (", compacted_ + 1, ")"));
  }
  if (revision > revision_) {
    return absl::InvalidArgumentError(
        absl::StrCat("resource version ", revision, " is newer than the store (", revision_, ")"));
  }
  *read_at = revision;
  const std::string prefix = ns.empty() ? "" : ns + "/";
  const std::string start = std::max(prefix, from);
  auto in_range = [&](const std::string& k) {
    return prefix.empty() || k.compare(0, prefix.size(), prefix) == 0;
  };
  // The state at `revision` of every object written since: the `previous` of its earliest later
  // event (null: it did not exist then).
  std::map<std::string, const nlohmann::json*> then;
  for (auto it = history_.rbegin(); it != history_.rend() && it->revision > revision; ++it) {
    if (it->storage_key != key) continue;
    std::string k = KeyOf(it->object);
    if (k < start || !in_range(k)) continue;
    then[k] = it->previous.is_null() ? nullptr : &it->previous;
  }
  static const std::map<std::string, nlohmann::json> kNone;
  auto coll_it = objects_.find(key);
  const auto& coll = coll_it == objects_.end() ? kNone : coll_it->second;
  auto now = coll.lower_bound(start);
  auto old = then.begin();
  while (true) {
    bool have_now = now != coll.end() && in_range(now->first);
    bool have_old = old != then.end();
    if (!have_now && !have_old) break;
    const nlohmann::json* object = nullptr;
    if (have_old && (!have_now || old->first <= now->first)) {
      if (have_now && old->first == now->first) ++now;
      object = old->second;
      ++old;
    } else {
      object = &now->second;
      ++now;
    }
    if (object != nullptr && !visit(*object)) break;
  }
  return absl::OkStatus();
}

std::vector<std::pair<std::string, nlohmann::json>> Store::ListEverything() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, nlohmann::json>> out;
  for (const auto& [key, coll] : objects_) {
    for (const auto& [_, object] : coll) out.emplace_back(key, object);
  }
  return out;
}

std::optional<ObjectRef> Store::FindUid(const std::string& uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_uid_.find(uid);
  if (it == by_uid_.end()) return std::nullopt;
  return it->second;
}

std::vector<ObjectRef> Store::DependentsOf(const std::string& owner_uid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = dependents_.find(owner_uid);
  if (it == dependents_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

size_t Store::CountInNamespace(const std::string& ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_namespace_.find(ns);
  return it == in_namespace_.end() ? 0 : it->second;
}

std::vector<ObjectRef> Store::GarbageCandidates() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ObjectRef> out;
  for (const auto& [key, coll] : objects_) {
    for (const auto& [_, object] : coll) {
      const nlohmann::json& meta = object["metadata"];
      bool owned = meta.contains("ownerReferences") && !meta["ownerReferences"].empty();
      if (owned || meta.contains("deletionTimestamp")) {
        out.push_back({key, meta.value("namespace", ""), meta.value("name", "")});
      }
    }
  }
  return out;
}

std::optional<nlohmann::json> Store::GarbageMeta(const ObjectRef& ref) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto coll = objects_.find(ref.key);
  if (coll == objects_.end()) return std::nullopt;
  auto it = coll->second.find(ObjectKey(ref.ns, ref.name));
  if (it == coll->second.end()) return std::nullopt;
  const nlohmann::json& meta = it->second["metadata"];
  nlohmann::json slim = nlohmann::json::object();
  for (const char* field : {"name", "namespace", "uid", "ownerReferences", "finalizers",
                            "deletionTimestamp", "deletionGracePeriodSeconds"}) {
    if (meta.contains(field)) slim[field] = meta[field];
  }
  return nlohmann::json{{"metadata", std::move(slim)}};
}

void Store::Index(const std::string& key, const nlohmann::json& object, bool add) {
  const nlohmann::json& meta = object["metadata"];
  ObjectRef ref{key, meta.value("namespace", ""), meta.value("name", "")};
  std::string uid = meta.value("uid", "");
  if (!uid.empty()) {
    if (add) {
      by_uid_[uid] = ref;
    } else if (auto it = by_uid_.find(uid); it != by_uid_.end() && it->second == ref) {
      by_uid_.erase(it);
    }
  }
  if (auto owners = meta.find("ownerReferences"); owners != meta.end() && owners->is_array()) {
    for (const auto& owner : *owners) {
      if (!owner.is_object()) continue;
      std::string owner_uid = owner.value("uid", "");
      if (add) {
        dependents_[owner_uid].insert(ref);
      } else if (auto it = dependents_.find(owner_uid); it != dependents_.end()) {
        it->second.erase(ref);
        if (it->second.empty()) dependents_.erase(it);
      }
    }
  }
  if (!ref.ns.empty()) {
    size_t& n = in_namespace_[ref.ns];
    n = add ? n + 1 : n - 1;
    if (n == 0) in_namespace_.erase(ref.ns);
  }
}

nlohmann::json Store::Put(const std::string& key, nlohmann::json object) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t rev = ++revision_;
  object["metadata"]["resourceVersion"] = std::to_string(rev);
  auto& coll = objects_[key];
  auto it = coll.find(KeyOf(object));
  StoreEvent event{rev, "ADDED", key, object, nullptr};
  if (it != coll.end()) {
    event.type = "MODIFIED";
    Index(key, it->second, false);
    event.previous = std::move(it->second);
    it->second = object;
  } else {
    coll.emplace(KeyOf(object), object);
  }
  Index(key, object, true);
  Record(std::move(event));
  return object;
}

std::optional<nlohmann::json> Store::Remove(const std::string& key, const std::string& ns,
                                            const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto coll = objects_.find(key);
  if (coll == objects_.end()) return std::nullopt;
  auto it = coll->second.find(ObjectKey(ns, name));
  if (it == coll->second.end()) return std::nullopt;
  Index(key, it->second, false);
  nlohmann::json last = std::move(it->second);
  coll->second.erase(it);
  int64_t rev = ++revision_;
  nlohmann::json deleted = last;
  deleted["metadata"]["resourceVersion"] = std::to_string(rev);
  Record({rev, "DELETED", key, deleted, last});
  return deleted;
}

void Store::Record(StoreEvent event) {
  history_.push_back(std::move(event));
  while (history_.size() > max_history_) {
    compacted_ = history_.front().revision;
    history_.pop_front();
  }
  changed_.notify_all();
}

int64_t Store::Revision() const {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

absl::Status Store::EventsAfter(const std::string& key, int64_t after, std::vector<StoreEvent>* out,
                                int64_t* scanned_to) const {
  return VisitEventsAfter(
      after,
      [&](const StoreEvent& e) {
        if (key.empty() || e.storage_key == key) out->push_back(e);
      },
      scanned_to);
}

absl::Status Store::VisitEventsAfter(int64_t after,
                                     const std::function<void(const StoreEvent&)>& visit,
                                     int64_t* scanned_to) const {
  std::lock_guard<std::mutex> lock(mu_);
  *scanned_to = revision_;
  if (after < compacted_) {
    return absl::OutOfRangeError(
        absl::StrCat("too old resource version: ", after, " (", compacted_ + 1, ")"));
  }
  auto first = std::upper_bound(history_.begin(), history_.end(), after,
                                [](int64_t rv, const StoreEvent& e) { return rv < e.revision; });
  for (auto it = first; it != history_.end(); ++it) visit(*it);
  return absl::OkStatus();
}

bool Store::WaitForChange(int64_t after, absl::Time deadline) const {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutdown_ && revision_ <= after) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    changed_.wait_for(lock, absl::ToChronoMilliseconds(std::min(left, absl::Seconds(1))));
  }
  return !shutdown_;
}

void Store::Compact() {
  std::lock_guard<std::mutex> lock(mu_);
  compacted_ = revision_;
  history_.clear();
}

void Store::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  changed_.notify_all();
}

}  // namespace kubetrain::localkube
