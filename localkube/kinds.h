// Per-kind behaviour of the API: the hooks that set built-in kinds (Pods, Services, Namespaces,
// CRDs, ...) and custom resources apart from a plain stored object, registered in one table
// (kinds.cc), so that the generic create, update, patch and delete paths (api.cc, gc.cc) carry
// no kind names.
//
// Hooks run under Api's write lock: they may read and write the Store and the Registry, never
// call back into Api.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "localkube/api.h"
#include "localkube/resources.h"
#include "localkube/store.h"

namespace kubetrain::localkube {

// Storage keys the generic paths name: the kubelet's pods, and the namespaces every namespaced
// object lives in.
inline constexpr char kPodsKey[] = "/pods";
inline constexpr char kNamespacesKey[] = "/namespaces";

// What an admission hook sees of a create (`old` null) or an update.
struct Admission {
  const ResourceType& type;
  const Store& store;
  nlohmann::json* object;  // about to be stored: the hook may complete it
  const nlohmann::json* old;
  const std::string& subresource;  // the write's target subresource ("", "status", ...)
  const WriteOptions& options;
  // The object name the request's URL names ("" for a POST to the collection), as the
  // authorizer saw it.
  const std::string& request_name;
};

struct KindHooks {
  // Server-set defaults of a new object, after uid, timestamps and generation (metadata.name is
  // set): a Pod's restartPolicy and Pending phase, a Namespace's finalizer and Active phase.
  std::function<void(nlohmann::json& object)> defaults;
  // Admission of every create and update, dry runs included, after the generic checks: may
  // complete the object (a CRD's status, a custom resource's schema defaults) or refuse it
  // (Pod validation and Pod Security, custom resource schema validation).
  std::function<absl::Status(const Admission& admission)> admit;
  // After a create or update stored the object: a CRD registers the types it declares.
  std::function<absl::Status(Registry& registry, const nlohmann::json& stored)> stored;
  // After a create stored the object (not on dry runs): the objects the controllers make for it
  // at once, created through the same path (a Namespace's default ServiceAccount and
  // kube-root-ca.crt ConfigMap). Failures to create them are ignored.
  std::function<std::vector<nlohmann::json>(const Store& store, const nlohmann::json& stored)>
      companions;
  // After the object left the store: a CRD takes its types and their objects with it.
  std::function<void(Registry& registry, Store& store, const nlohmann::json& removed)> removed;
  // Namespace lifecycle: deletion always marks the object (status.phase Terminating), deletes
  // everything in the namespace, and the collector removes it once nothing is left inside.
  bool namespace_lifecycle = false;
  // With graceful deletion enabled (the kubelet runs pods), deleting with a grace period only
  // marks the object; Api::FinishPodDeletion removes it once its processes are gone.
  bool graceful_deletion = false;
  // DELETE answers with the deleted object rather than a Status.
  bool delete_returns_object = false;
  // Subresources served besides status and scale (their ResourceType flags say those).
  std::vector<std::string> subresources;
};

// The hooks of `type`: custom resources share one set (schema handling), built-ins are looked
// up by storage key; kinds without special behaviour get empty hooks.
const KindHooks& HooksFor(const ResourceType& type);
// The hooks of the objects stored under `storage_key` ("/pods"), for code that walks stored
// objects (garbage collection). Custom resources need none of the hooks used there.
const KindHooks& HooksFor(absl::string_view storage_key);

// NamespaceLifecycle admission for a create of `name` of `type` in namespace `ns`: 404 when the
// namespace does not exist, 403 while it is being terminated.
absl::Status AdmitIntoNamespace(const Store& store, const ResourceType& type, const std::string& ns,
                                const std::string& name);

}  // namespace kubetrain::localkube
