// An API server in memory, for unit tests of controllers (docs/decisions/0004: the live tests
// against localkube stay the proof of the real semantics; these fakes make each reconcile rule
// testable in milliseconds beside them).
//
// What it does as the API server does: uids, resourceVersions, generation and
// creationTimestamp assigned on create; generateName; 409 AlreadyExists on a second create;
// dry-run creates that store nothing; deletecollection by label and field selectors; /status writes
// conditional on resourceVersion (409 Conflict → ABORTED when stale) that change only status; JSON
// merge patches; deletes with a uid precondition; a deleted pod lingers with a deletionTimestamp
// (the end of its grace period) until FinishDeletions (as a kubelet ends its containers first),
// unless deleted with gracePeriodSeconds 0; container logs. Not done:
// validation, admission, owner garbage collection, watches. Errors carry the codes kube::Client
// documents.
//
// Caches(): ObjectCache views of the store as an informer that has caught up shows it; Freeze()
// holds them at the current moment, to test passes that run against a stale cache.
// Thread-safe.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "operator/kube/client.h"
#include "operator/kube/informer.h"

namespace kubetrain::kube::testing {

class FakeApiClient : public ApiClient {
 public:
  explicit FakeApiClient(const Clock* clock = nullptr);
  ~FakeApiClient() override;

  absl::StatusOr<nlohmann::json> Get(const Resource& r, const std::string& ns,
                                     const std::string& name) override;
  absl::StatusOr<nlohmann::json> Create(const Resource& r, const std::string& ns,
                                        const nlohmann::json& object,
                                        const CreateOptions& options = {}) override;
  absl::StatusOr<nlohmann::json> UpdateStatus(const Resource& r, const std::string& ns,
                                              const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> Patch(const Resource& r, const std::string& ns,
                                       const std::string& name, PatchType type,
                                       const std::string& body,
                                       const std::string& subresource = "") override;
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {}) override;
  // Selectors of `key=value` and `key!=value` terms, comma-separated (labels; fields by dotted
  // path such as status.phase).
  absl::StatusOr<std::vector<nlohmann::json>> DeleteCollection(
      const Resource& r, const std::string& ns, const ListOptions& selectors,
      const DeleteOptions& options = {}) override;
  absl::StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod,
                                     const std::string& container, int tail_lines,
                                     int64_t limit_bytes = 64 << 10) override;

  // The next `times` requests of `verb` (get, create, update, patch, delete,
  // deletecollection, log) on resource
  // `plural` fail with `error` (before anything is stored).
  void FailNext(const std::string& verb, const std::string& plural, absl::Status error,
                int times = 1);
  // Sets a pod's phase as its kubelet would: Running (with a pod IP), Succeeded or Failed
  // (with the training container's exit code, if any).
  void SetPodPhase(const std::string& ns, const std::string& name, const std::string& phase,
                   std::optional<int> exit_code = std::nullopt);
  // Removes every pod whose deletion was requested (their containers have ended).
  void FinishDeletions();
  void SetLog(const std::string& ns, const std::string& pod, const std::string& text);

  std::optional<nlohmann::json> Object(const Resource& r, const std::string& ns,
                                       const std::string& name) const;
  std::vector<nlohmann::json> Objects(const Resource& r) const;
  // Every request so far, as "create pods default/job-worker-0" (dry runs say "create-dry-run").
  std::vector<std::string> Requests() const;

  // The cache of one resource, as ObjectCache (for the reconciler's informers).
  const ObjectCache& Cache(const Resource& r);
  // Caches keep showing the store as it is now until Thaw().
  void Freeze();
  void Thaw();

 private:
  class View;
  using Store = std::map<std::string, std::map<std::string, nlohmann::json>>;  // plural → key

  absl::Status Injected(const std::string& verb, const std::string& plural);
  void Record(const std::string& verb, const Resource& r, const std::string& ns,
              const std::string& name);
  // Records the request and returns the error injected for it, if any (Record, then Injected).
  absl::Status Received(const std::string& verb, const Resource& r, const std::string& ns,
                        const std::string& name);
  // The stored object, or NotFound as the API server words it.
  absl::StatusOr<std::map<std::string, nlohmann::json>::iterator> Stored(const Resource& r,
                                                                         const std::string& ns,
                                                                         const std::string& name);
  // Marks a pod deleting (it lingers until FinishDeletions; deletionTimestamp at the end of its
  // grace period) or removes it (grace 0) or any other object.
  void DeleteLocked(const Resource& r, std::map<std::string, nlohmann::json>::iterator it,
                    std::optional<int64_t> grace_seconds = std::nullopt);
  std::string NextVersion();

  const Clock& clock_;
  mutable std::mutex mu_;
  Store objects_;
  std::optional<Store> frozen_;
  std::map<std::string, std::string> logs_;                   // "ns/pod" → text
  std::map<std::string, std::deque<absl::Status>> failures_;  // "verb plural" → errors
  std::vector<std::string> requests_;
  int64_t version_ = 100;
  int64_t uid_ = 0;
  std::map<std::string, std::unique_ptr<View>> views_;  // plural → cache view
};

}  // namespace kubetrain::kube::testing
