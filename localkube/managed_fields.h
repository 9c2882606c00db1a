// metadata.managedFields as the API server records them on every write: one entry per
// (manager, operation, subresource; and apiVersion for Update), each with the set of fields that
// manager owns in the FieldsV1 encoding (`f:<field>`, `k:{<list-map keys>}`, `v:<set value>`,
// `.` for a map or list item owned as a whole besides its children).
//
// What is modelled, after structured-merge-diff's Updater:
//   - Update (create, PUT, merge/JSON/strategic patch): the writer's set becomes its previous set
//     less the fields the write removed, plus those it added or changed (compared with the live
//     object; a create compares with an empty object).
//   - Apply (server-side apply): the writer's set is the applied configuration's fields.
//   - Either way, every other manager loses the fields the write added, changed or removed.
//   - Fields the apiserver never tracks are left out (apiVersion, kind, metadata.name,
//     namespace, uid, resourceVersion, generation, creationTimestamp, managedFields); with a
//     status subresource, writes to the resource own nothing under status and /status writes own
//     only status.
//   - Entries are sorted as the apiserver sorts them (operation, time, manager, apiVersion,
//     subresource); a writer's time moves only when its write changes something.
// Approximations: lists are keyed as the built-in types' merge keys say (containers, env,
// volumes... by name, ports by port and protocol, ownerReferences by uid, conditions by type,
// finalizers as a set) or, for custom resources, as the CRD schema's x-kubernetes-list-type and
// x-kubernetes-list-map-keys say; every other list is atomic (one field, `f:args: {}`).
// Struct fields and map fields are not told apart, so a map's own `.` appears only where the map
// was added by the write, and nested structs a built-in's zero value would hold get a `.` too.
// There is no conflict detection (every apply acts as if forced), no pruning of fields an
// applier stops sending, and no cap on the number of Update entries.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "localkube/resources.h"

namespace kubetrain::localkube {

// One write, as managedFields records it.
struct FieldWrite {
  std::string manager;
  std::string operation = "Update";  // Update | Apply
  std::string subresource;           // "", "status", "scale"
  std::string api_version;
  // Apply: the applied configuration.
  const nlohmann::json* applied = nullptr;
  std::string time;  // RFC 3339, seconds
};

// The manager of a write: `fieldManager`, else the User-Agent up to its first '/' (printable
// characters, at most 128 bytes), as the apiserver names it.
std::string ManagerName(const std::string& field_manager, const std::string& user_agent);

// Sets metadata.managedFields of `object`, which `write` made from `live` (null for a create),
// from live's entries.
void RecordManagedFields(const ResourceType& type, const nlohmann::json* live,
                         nlohmann::json* object, const FieldWrite& write);

}  // namespace kubetrain::localkube
