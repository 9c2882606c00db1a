// In-memory object storage with one global revision counter (like etcd's) and a bounded event
// history that watches replay from. Knows nothing about Kubernetes semantics beyond stamping
// metadata.resourceVersion.
//
// Thread-safe: one mutex guards objects and history; a condition variable wakes watchers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kubetrain::localkube {

struct StoreEvent {
  int64_t revision = 0;
  std::string type;         // ADDED | MODIFIED | DELETED
  std::string storage_key;  // ResourceType::StorageKey()
  nlohmann::json object;    // state after the change (last state, new revision, for DELETED)
  nlohmann::json previous;  // state before (null for ADDED)
};

// Where one stored object lives: its collection's storage key, namespace and name.
struct ObjectRef {
  std::string key, ns, name;
  bool operator<(const ObjectRef& o) const {
    return std::tie(key, ns, name) < std::tie(o.key, o.ns, o.name);
  }
  bool operator==(const ObjectRef& o) const { return key == o.key && ns == o.ns && name == o.name; }
};

class Store {
 public:
  explicit Store(size_t max_history = 50000) : max_history_(max_history) {}

  std::optional<nlohmann::json> Get(const std::string& key, const std::string& ns,
                                    const std::string& name) const;
  // One collection (ns "" = every namespace), sorted by namespace/name, and the revision read at.
  std::vector<nlohmann::json> List(const std::string& key, const std::string& ns,
                                   int64_t* revision) const;
  // Visits the objects of one collection (ns "" = every namespace) whose "namespace/name" key is
  // at or after `from`, in key order, as they stood at `revision` (0: now), until `visit`
  // returns false. The objects changed since `revision` are rebuilt from the event history, so
  // OutOfRange when `revision` is older than it (compacted), and InvalidArgument when it is
  // newer than the store. `read_at` receives the revision read (the current one for 0).
  absl::Status Scan(const std::string& key, const std::string& ns, const std::string& from,
                    int64_t revision, const std::function<bool(const nlohmann::json&)>& visit,
                    int64_t* read_at) const;
  // Every object of every collection, as (storage key, object).
  std::vector<std::pair<std::string, nlohmann::json>> ListEverything() const;
  // Indexes a garbage collector reads instead of walking every object (gc.cc), kept with
  // each Put and Remove like the real collector's graph of owners and dependents:
  // the object with metadata.uid `uid`;
  std::optional<ObjectRef> FindUid(const std::string& uid) const;
  // the objects whose ownerReferences name `owner_uid`, in ObjectRef order;
  std::vector<ObjectRef> DependentsOf(const std::string& owner_uid) const;
  // how many objects live in namespace `ns`;
  size_t CountInNamespace(const std::string& ns) const;
  // and, when the collector has lost track of the changes (history compacted), every object it
  // could act on: those with ownerReferences or a deletionTimestamp.
  std::vector<ObjectRef> GarbageCandidates() const;
  // The metadata fields a collector decides on (name, namespace, uid, ownerReferences,
  // finalizers, deletion), as {"metadata": …}, without copying labels, spec or status.
  std::optional<nlohmann::json> GarbageMeta(const ObjectRef& ref) const;

  // Stores `object` under the next revision (written into metadata.resourceVersion) and records
  // ADDED or MODIFIED. Returns the stored object.
  nlohmann::json Put(const std::string& key, nlohmann::json object);
  // Removes an object and records DELETED; nullopt if it did not exist.
  std::optional<nlohmann::json> Remove(const std::string& key, const std::string& ns,
                                       const std::string& name);

  int64_t Revision() const;
  // Appends events for `key` (all keys when empty) newer than `after`. OutOfRange when `after`
  // is older than the retained history (the watch answers 410 Expired).
  // `scanned_to` receives the revision the scan covered, for the next call's `after`.
  absl::Status EventsAfter(const std::string& key, int64_t after, std::vector<StoreEvent>* out,
                           int64_t* scanned_to) const;
  // The same, visiting each event in place (under the store's lock: `visit` must not call the
  // store) instead of copying it.
  absl::Status VisitEventsAfter(int64_t after, const std::function<void(const StoreEvent&)>& visit,
                                int64_t* scanned_to) const;
  // Waits until the revision passes `after`, the deadline passes or Shutdown; false on shutdown.
  bool WaitForChange(int64_t after, absl::Time deadline) const;
  // Forgets all history: every watch resuming from an older revision gets 410, and so does a
  // Scan (a continue token) at an older revision.
  void Compact();
  // Wakes every waiter for good.
  void Shutdown();

 private:
  void Record(StoreEvent event);
  // Adds (`add`) or drops `object`'s entries in the indexes below.
  void Index(const std::string& key, const nlohmann::json& object, bool add);

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  size_t max_history_;
  int64_t revision_ = 1;
  int64_t compacted_ = 0;  // events at or below this revision are gone
  bool shutdown_ = false;
  std::unordered_map<std::string, std::map<std::string, nlohmann::json>> objects_;
  std::deque<StoreEvent> history_;
  std::unordered_map<std::string, ObjectRef> by_uid_;
  std::unordered_map<std::string, std::set<ObjectRef>> dependents_;  // by owner uid
  std::unordered_map<std::string, size_t> in_namespace_;
};

}  // namespace kubetrain::localkube
