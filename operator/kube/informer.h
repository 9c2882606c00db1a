// An informer: LIST then WATCH of one resource, kept in an in-memory cache indexed by
// "namespace/name", with add/update/delete handlers. Resumes watches from the last
// resourceVersion (bookmarks keep it fresh), relists on 410 Expired, backs off 0.8 s → 30 s on
// failures, and tolerates events split across chunks (the client's job).
//
// Owns its thread and cache. Thread-safe: Get/List may be called from any thread; handlers run
// on the informer's thread, one at a time, after the cache is updated.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
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
};

struct EventHandlers {
  std::function<void(const nlohmann::json& obj)> on_add;
  std::function<void(const nlohmann::json& old_obj, const nlohmann::json& new_obj)> on_update;
  std::function<void(const nlohmann::json& obj)> on_delete;
};

// "namespace/name", or "name" for cluster-scoped objects.
std::string ObjectKey(const nlohmann::json& obj);

class Informer {
 public:
  Informer(Client& client, Resource resource, InformerOptions options = {});
  ~Informer();

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

  std::optional<nlohmann::json> Get(const std::string& key) const;
  std::vector<nlohmann::json> List() const;
  // Objects in `ns` whose label `key` equals `value` (the operator's "pods of job X").
  std::vector<nlohmann::json> ListByLabel(const std::string& ns, const std::string& key,
                                          const std::string& value) const;
  std::string resource_version() const;
  // Relists and rewatches done so far (for tests and metrics).
  int relists() const { return relists_.load(); }
  int watches() const { return watches_.load(); }

 private:
  void Run();
  absl::Status Relist();
  absl::Status WatchOnce();
  void Apply(const WatchEvent& event);
  void Upsert(const nlohmann::json& obj);
  void Remove(const nlohmann::json& obj);

  Client& client_;
  const Resource resource_;
  const InformerOptions options_;
  std::vector<EventHandlers> handlers_;

  mutable std::mutex mu_;
  std::map<std::string, nlohmann::json> cache_;
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
