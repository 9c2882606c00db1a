// The resource types localkube serves: the built-ins clients use plus every served version of
// every registered CustomResourceDefinition. Discovery, OpenAPI, routing and tables all read
// this one registry, so a CRD shows up everywhere the moment it is created.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kubetrain::localkube {

struct PrinterColumn {
  std::string name;
  std::string type;  // integer | number | string | boolean | date
  std::string format;
  std::string description;
  std::string json_path;
  int priority = 0;
};

struct ResourceType {
  std::string group;  // "" for core
  std::string version;
  std::string kind;
  std::string plural;
  std::string singular;
  std::string list_kind;
  bool namespaced = true;
  std::vector<std::string> short_names;
  std::vector<std::string> categories;
  bool status_subresource = false;
  bool scale_subresource = false;
  std::string spec_replicas_path;  // scale mapping, ".spec.replicas" style
  std::string status_replicas_path;
  std::string label_selector_path;
  bool custom = false;              // served from a CRD: no strategic merge patch
  nlohmann::json schema = nullptr;  // openAPIV3Schema of a custom resource
  std::vector<PrinterColumn> columns;
  bool has_generation = true;        // ConfigMaps and Secrets carry no generation
  bool unconditional_update = true;  // PUT without resourceVersion allowed (not for CRs, Leases)
  bool create_on_update = false;     // PUT on a missing object creates it (Leases)

  std::string GroupVersion() const { return group.empty() ? version : group + "/" + version; }
  // "pods" or "trainingjobs.kubetrain.dev": how messages name the collection.
  std::string Qualified() const { return group.empty() ? plural : plural + "." + group; }
  std::string QualifiedKind() const { return group.empty() ? kind : kind + "." + group; }
  // Storage key, independent of version: every version of a CRD shares one set of objects.
  std::string StorageKey() const { return group + "/" + plural; }
};

using ResourceTypePtr = std::shared_ptr<const ResourceType>;

// Owns the set of served types. Thread-safe: a mutex guards the list; readers get shared_ptrs
// that stay valid after a CRD is removed.
class Registry {
 public:
  Registry();

  ResourceTypePtr Find(absl::string_view group, absl::string_view version,
                       absl::string_view plural) const;
  ResourceTypePtr FindByKind(absl::string_view api_version, absl::string_view kind) const;
  std::vector<ResourceTypePtr> All() const;
  // Group versions in discovery order, e.g. {"", "v1"}, {"apps", "v1"}.
  std::vector<std::pair<std::string, std::string>> GroupVersions() const;

  // Replaces the types served for one CRD (by CRD name) with those its spec declares.
  absl::Status RegisterCrd(const nlohmann::json& crd);
  void UnregisterCrd(absl::string_view crd_name);
  // Bumped on every change, so OpenAPI hashes change and clients refetch.
  int64_t Generation() const;

 private:
  mutable std::mutex mu_;
  std::vector<ResourceTypePtr> types_;
  std::vector<std::pair<std::string, std::string>> crd_owner_;  // (crd name, storage key)
  int64_t generation_ = 1;
};

}  // namespace kubetrain::localkube
