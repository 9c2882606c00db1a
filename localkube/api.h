// Kubernetes object semantics over the Store: create/get/list/update/patch/delete with
// resourceVersion concurrency, generation, status and scale subresources, CRD registration and
// schema handling, finalizers, namespace lifecycle and ownerReference garbage collection.
// The implementation is split by responsibility: api.cc (get, create, update, patch, scale),
// list.cc (paginated lists), gc.cc (deletion and garbage collection), and the per-kind hooks
// table in kinds.h.
//
// Thread-safe: writes are serialised by one (non-recursive) mutex, so read-check-write is
// atomic; reads go straight to the Store. Every public write locks it once and works through
// the private *Locked members, which expect it held and never call a public member.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "localkube/rbac.h"
#include "localkube/resources.h"
#include "localkube/selectors.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// What a request addresses: a collection (name empty) or an object, maybe a subresource.
struct Target {
  ResourceTypePtr type;
  std::string ns;
  std::string name;
  std::string subresource;  // "", "status", "scale", "log"
};

struct WriteOptions {
  bool dry_run = false;
  std::string field_manager;
  bool force = false;
  std::string field_validation = "Strict";  // Strict | Warn | Ignore
  // The requesting user when RBAC is on: OwnerReferencesPermissionEnforcement checks writes.
  std::optional<UserInfo> user;
  // Admission warnings for the response's `Warning` headers (may be null).
  std::vector<std::string>* warnings = nullptr;
  // The request's User-Agent: names the field manager when `field_manager` is empty.
  std::string user_agent;
  // Set by Patch for server-side apply: the applied configuration, whose fields the manager
  // then owns (managedFields operation Apply).
  const nlohmann::json* applied = nullptr;
  // The subresource managedFields records a write under when it is not the target's (scale
  // writes are stored through the resource itself).
  std::string fields_subresource;
};

struct ListOptions {
  LabelSelector labels;
  FieldSelector fields;
  int64_t limit = 0;
  std::string continue_token;
  int64_t resource_version = 0;  // parsed `resourceVersion`; 0: any
};

struct DeleteOptions {
  std::string propagation;  // Background (default) | Foreground | Orphan
  std::optional<int64_t> grace_seconds;
  bool dry_run = false;
  std::string precondition_uid;
  std::string precondition_rv;
};

// A fresh metadata.uid (a random version-4 UUID), as the API server assigns.
std::string NewUid();
// The 5 characters of k8s.io/apimachinery's vowel-free alphabet that generateName (and the
// controllers naming pods and volumes) append.
std::string RandomSuffix();

class Api {
 public:
  Api(Registry* registry, Store* store);

  // With graceful pods, deleting a running pod only marks it (deletionTimestamp); the kubelet
  // stops its processes and then calls FinishPodDeletion.
  void EnableGracefulPodDeletion() { graceful_pods_ = true; }

  absl::StatusOr<nlohmann::json> Get(const Target& target) const;
  absl::StatusOr<nlohmann::json> List(const Target& target, const ListOptions& options) const;
  // `created` tells the HTTP layer to answer 201.
  absl::StatusOr<nlohmann::json> Create(const Target& target, nlohmann::json body,
                                        const WriteOptions& options);
  absl::StatusOr<nlohmann::json> Update(const Target& target, nlohmann::json body,
                                        const WriteOptions& options, bool* created);
  absl::StatusOr<nlohmann::json> Patch(const Target& target, absl::string_view content_type,
                                       const std::string& body, const WriteOptions& options,
                                       bool* created);
  absl::StatusOr<nlohmann::json> Delete(const Target& target, const DeleteOptions& options);
  absl::StatusOr<nlohmann::json> DeleteCollection(const Target& target, const ListOptions& list,
                                                  const DeleteOptions& options);

  // For in-process controllers (the kubelet): applies `mutate` to the live object and stores it
  // if it returns true. NotFound when the object is gone.
  absl::Status Mutate(const std::string& storage_key, const std::string& ns,
                      const std::string& name, const std::function<bool(nlohmann::json&)>& mutate);
  // Removes a pod whose processes are gone (unless finalizers still hold it).
  void FinishPodDeletion(const std::string& ns, const std::string& name);

  Registry* registry() const { return registry_; }
  Store* store() const { return store_; }

 private:
  // Everything below expects write_mu_ held.
  absl::StatusOr<nlohmann::json> CreateLocked(const Target& target, nlohmann::json body,
                                              const WriteOptions& options);
  absl::StatusOr<nlohmann::json> UpdateLocked(const Target& target, nlohmann::json body,
                                              const nlohmann::json& old,
                                              const WriteOptions& options);
  absl::Status MutateLocked(const std::string& storage_key, const std::string& ns,
                            const std::string& name,
                            const std::function<bool(nlohmann::json&)>& mutate);
  // Deletes one stored object honouring finalizers, graceful pods and namespaces. Returns the
  // object as it stands afterwards (marked) or as it was removed (gc.cc).
  nlohmann::json DeleteObjectLocked(const std::string& key, nlohmann::json object,
                                    const DeleteOptions& options);
  // Removes an object from the store and runs its kind's `removed` hook.
  std::optional<nlohmann::json> RemoveLocked(const std::string& key, const std::string& ns,
                                             const std::string& name);
  // Whether objects under `key` with a grace period wait for the kubelet before removal.
  bool GracefulLocked(const std::string& key) const;
  // The garbage collector and namespace controller, run to a fixed point after every delete.
  void CollectGarbageLocked();
  // Acts on one object as the collector finds it: deletes it if every owner is gone, and for a
  // deletion in progress orphans or deletes its dependents (propagation policy) or, for a
  // namespace, removes it once empty; then releases the object's collector finalizer.
  void CollectLocked(const ObjectRef& ref);

  // Lock-free helpers (they only read their arguments and the registry).
  void PrepareForCreate(const ResourceType& type, nlohmann::json* object) const;
  absl::StatusOr<nlohmann::json> ScaleOf(const ResourceType& type,
                                         const nlohmann::json& object) const;
  absl::StatusOr<nlohmann::json> ApplyScale(const ResourceType& type, nlohmann::json object,
                                            const nlohmann::json& scale) const;
  // Sets `object`'s metadata.managedFields for a write that made it from `live` (null: create).
  void RecordFields(const Target& target, const nlohmann::json* live, nlohmann::json* object,
                    const WriteOptions& options) const;

  Registry* registry_;
  Store* store_;
  // Set before serving starts (EnableGracefulPodDeletion), read under write_mu_.
  bool graceful_pods_ = false;
  std::mutex write_mu_;
  // Under write_mu_: the store revision up to which the garbage collector has read the changes.
  int64_t gc_revision_ = 0;
};

// RFC 3339 UTC with second precision, as metadata timestamps use.
std::string NowTimestamp();

}  // namespace kubetrain::localkube
