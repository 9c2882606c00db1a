// An informer: LIST then WATCH of one resource, kept in an in-memory cache indexed by
// "namespace/name", with add/update/delete handlers. Resumes watches from the last
// resourceVersion (bookmarks keep it fresh), relists on 410 Expired, backs off 0.8 s → 30 s on
// failures, and tolerates events split across chunks (the client's job).
//
// Memory (docs/architecture.md §9): an optional transform trims every object before it is
// cached (StripForCache drops managedFields and kubectl's last-applied-configuration). A relist
// reads the collection page by page into the new cache, so one page of raw JSON is held at a
// time, and an object whose resourceVersion has not changed shares its cached copy between the
// old cache and the new one. A continue token refused with 410 Expired starts the list again in
// one unpaginated request, as client-go's pager does. Cached objects are kept packed as
// MessagePack (a stripped pod: ~1.2 KB, against ~6.3 KB as a json tree) and unpacked by Get and
// List, which hand out copies anyway.
//
// Owns its thread and cache. Thread-safe: Get/List may be called from any thread; handlers run
// on the informer's thread, one at a time, after the cache is updated.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "operator/kube/client.h"

namespace kubetrain::kube {

struct InformerOptions {
  std::string namespace_;  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  // Watches last a random 300–600 s, as client-go's reflector does, so many informers do not
  // reconnect in step.
  absl::Duration min_watch_timeout = absl::Minutes(5);
  absl::Duration initial_backoff = absl::Milliseconds(800);
  bool allow_bookmarks = true;  // bookmarks keep the resume point fresh across quiet periods
  absl::Duration max_backoff = absl::Seconds(30);
  // Applied to every object from LIST and WATCH (deletions included) before it is cached or
  // handed to handlers, as client-go's SetTransform: drop what no reader of the cache needs. It
  // must keep metadata.name, namespace and resourceVersion; it runs on the informer's thread.
  std::function<void(nlohmann::json&)> transform;
  // Objects per LIST page while (re)listing; 0 asks for the whole collection in one answer.
  int64_t page_size = 500;
  // Label keys ListByLabel answers from an index (namespace and value → objects), as client-go's
  // indexers do, instead of scanning the namespace: a job's pods among 20,000.
  std::vector<std::string> index_labels;
};

// The standard transform: removes metadata.managedFields and the annotation
// kubectl.kubernetes.io/last-applied-configuration (kubectl apply's copy of the whole applied
// manifest), and the annotations map if that leaves it empty. Nothing else is touched. Safe for
// objects that are only read, or written back through /status (the API server takes only status
// from that body); never PUT a stripped object whole (Client::Update): that would delete the
// annotation.
void StripForCache(nlohmann::json& obj);

struct EventHandlers {
  std::function<void(const nlohmann::json& obj)> on_add;
  std::function<void(const nlohmann::json& old_obj, const nlohmann::json& new_obj)> on_update;
  std::function<void(const nlohmann::json& obj)> on_delete;
};

// "namespace/name", or "name" for cluster-scoped objects.
std::string ObjectKey(const nlohmann::json& obj);

// What a reconciler reads of a cache: an Informer's, or kube::testing::FakeApiClient's store in
// unit tests (operator/kube/testing/fake_api.h).
class ObjectCache {
 public:
  virtual ~ObjectCache() = default;
  // By ObjectKey.
  virtual std::optional<nlohmann::json> Get(const std::string& key) const = 0;
  // Objects in `ns` whose label `key` equals `value` (the operator's "pods of job X").
  virtual std::vector<nlohmann::json> ListByLabel(const std::string& ns, const std::string& key,
                                                  const std::string& value) const = 0;
};

class Informer : public ObjectCache {
 public:
  Informer(Client& client, Resource resource, InformerOptions options = {});
  ~Informer() override;

  // Before Start.
  void AddHandlers(EventHandlers handlers);
  void Start();
  void Stop();

  bool HasSynced() const { return synced_.load(); }
  // Why the last LIST or WATCH failed; OK once one succeeds again.
  absl::Status last_error() const;
  const Resource& resource() const { return resource_; }
  // True once the first LIST is in the cache; false after `timeout`.
  bool WaitForSync(absl::Duration timeout) const;

  std::optional<nlohmann::json> Get(const std::string& key) const override;
  std::vector<nlohmann::json> List() const;
  std::vector<nlohmann::json> ListByLabel(const std::string& ns, const std::string& key,
                                          const std::string& value) const override;
  std::string resource_version() const;
  // Relists and rewatches done so far (for tests and metrics). A relist whose continue token
  // expired mid-way (410) and that read everything again counts once.
  int relists() const { return relists_.load(); }
  int watches() const { return watches_.load(); }

 private:
  // One cached object, packed. Immutable and shared: a relist keeps the old entry of an object
  // whose resourceVersion is unchanged.
  struct Packed {
    std::string resource_version;
    // "label\x1fnamespace\x1fvalue" for each of options_.index_labels the object carries.
    std::vector<std::string> index_slots;
    std::vector<std::uint8_t> msgpack;
  };
  using Entry = std::shared_ptr<const Packed>;
  using Cache = std::map<std::string, Entry>;

  Entry Pack(const nlohmann::json& obj) const;
  static nlohmann::json Unpack(const Entry& entry);

  void Run();
  absl::Status Relist();
  // Reads the collection with `options` (following continue tokens) into `fresh`. Sets
  // `*continue_expired` when a continue token was refused with 410.
  absl::Status ListInto(const ListOptions& options, Cache* fresh, std::string* resource_version,
                        bool* continue_expired);
  // Adds one listed object to `fresh`, sharing the cached entry when its resourceVersion is
  // unchanged and transforming it otherwise.
  void AddListed(nlohmann::json item, Cache* fresh) const;
  absl::Status WatchOnce();
  void Apply(const WatchEvent& event);
  void Upsert(const std::string& key, const nlohmann::json& obj);
  void Remove(const std::string& key, const nlohmann::json& obj);
  // Adds `entry` (under `key`) to the label index, or removes it; under mu_.
  void IndexLocked(const std::string& key, const Entry& entry, bool add);

  Client& client_;
  const Resource resource_;
  const InformerOptions options_;
  std::vector<EventHandlers> handlers_;

  // Written only on the informer's thread, always under `mu_`; that thread reads it without.
  mutable std::mutex mu_;
  Cache cache_;
  // "label\x1fnamespace\x1fvalue" → keys in cache_, for options_.index_labels.
  std::map<std::string, std::set<std::string>> index_;
  std::string resource_version_;
  absl::Status last_error_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> synced_{false};
  std::atomic<int> relists_{0};
  std::atomic<int> watches_{0};
  WatchCancel cancel_;
  std::thread thread_;
};

}  // namespace kubetrain::kube
