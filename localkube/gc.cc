// Deletion and garbage collection: DELETE and deletecollection with preconditions,
// propagationPolicy and finalizers, graceful pod deletion, the namespace controller (a deleted
// namespace's contents, then the namespace) and the ownerReference garbage collector. Not a
// thread: everything here runs under Api's write lock, the collector after every delete, on
// what changed since its last pass.
#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/status.h"
#include "localkube/api.h"
#include "localkube/errors.h"
#include "localkube/kinds.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

absl::StatusOr<json> Api::Delete(const Target& target, const DeleteOptions& options) {
  std::lock_guard<std::mutex> lock(write_mu_);
  const ResourceType& type = *target.type;
  auto old = store_->Get(type.StorageKey(), target.ns, target.name);
  if (!old) return NotFoundError(type.Qualified(), target.name);
  if (!options.precondition_uid.empty() && options.precondition_uid != UidOf(*old)) {
    return ApiError(409, "Conflict",
                    absl::StrCat("Operation cannot be fulfilled on ", type.Qualified(), " \"",
                                 target.name, "\": Precondition failed: UID in precondition: ",
                                 options.precondition_uid, ", UID in object meta: ", UidOf(*old)));
  }
  std::string old_rv = Meta(*old).value("resourceVersion", "");
  if (!options.precondition_rv.empty() && options.precondition_rv != old_rv) {
    return ApiError(
        409, "Conflict",
        absl::StrCat("Operation cannot be fulfilled on ", type.Qualified(), " \"", target.name,
                     "\": the ResourceVersion in the precondition (", options.precondition_rv,
                     ") does not match the ResourceVersion in record (", old_rv,
                     "). The object might have been modified"));
  }
  if (options.dry_run) return *old;
  json result = DeleteObjectLocked(type.StorageKey(), *old, options);
  CollectGarbageLocked();
  if (store_->Get(type.StorageKey(), target.ns, target.name)) return result;
  if (HooksFor(type).delete_returns_object) return result;
  return SuccessStatus(
      {{"name", target.name}, {"group", type.group}, {"kind", type.plural}, {"uid", UidOf(*old)}});
}

absl::StatusOr<json> Api::DeleteCollection(const Target& target, const ListOptions& list,
                                           const DeleteOptions& options) {
  ASSIGN_OR_RETURN(json items, List(target, list));
  std::lock_guard<std::mutex> lock(write_mu_);
  for (const auto& o : items["items"]) {
    if (options.dry_run) continue;
    DeleteObjectLocked(target.type->StorageKey(), o, options);
  }
  CollectGarbageLocked();
  return items;
}

json Api::DeleteObjectLocked(const std::string& key, json object, const DeleteOptions& options) {
  json& meta = object["metadata"];
  std::string ns = meta.value("namespace", ""), name = meta.value("name", "");
  const bool is_namespace = HooksFor(key).namespace_lifecycle;
  if (options.propagation == "Foreground" || options.propagation == "Orphan") {
    std::string f = options.propagation == "Foreground" ? "foregroundDeletion" : "orphan";
    if (!meta.contains("finalizers")) meta["finalizers"] = json::array();
    if (std::find(meta["finalizers"].begin(), meta["finalizers"].end(), f) ==
        meta["finalizers"].end()) {
      meta["finalizers"].push_back(f);
    }
  }
  int64_t grace = options.grace_seconds.value_or(
      object.value("spec", json::object()).value("terminationGracePeriodSeconds", 30));
  bool graceful_pod = GracefulLocked(key) && grace > 0;
  if (HasFinalizers(object) || is_namespace || graceful_pod) {
    if (!meta.contains("deletionTimestamp")) {
      meta["deletionTimestamp"] =
          graceful_pod ? KubeTime(absl::Now() + absl::Seconds(grace)) : NowTimestamp();
      meta["deletionGracePeriodSeconds"] = graceful_pod ? grace : 0;
      if (meta.contains("generation")) meta["generation"] = meta["generation"].get<int64_t>() + 1;
    } else if (graceful_pod && grace < meta.value("deletionGracePeriodSeconds", int64_t{30})) {
      meta["deletionGracePeriodSeconds"] = grace;
    }
    if (is_namespace) object["status"]["phase"] = "Terminating";
    json stored = store_->Put(key, object);
    if (is_namespace) {
      // The namespace controller's job: delete everything inside, then the namespace itself.
      for (auto& [k, o] : store_->ListEverything()) {
        if (NamespaceOf(o) == name && !HooksFor(k).namespace_lifecycle && !IsDeleting(o)) {
          DeleteObjectLocked(k, o, DeleteOptions{});
        }
      }
    }
    return stored;
  }
  auto removed = RemoveLocked(key, ns, name);
  return removed ? *removed : object;
}

std::optional<json> Api::RemoveLocked(const std::string& key, const std::string& ns,
                                      const std::string& name) {
  auto removed = store_->Remove(key, ns, name);
  if (removed) {
    if (const auto& on_removed = HooksFor(key).removed) on_removed(*registry_, *store_, *removed);
  }
  return removed;
}

bool Api::GracefulLocked(const std::string& key) const {
  return graceful_pods_ && HooksFor(key).graceful_deletion;
}

void Api::FinishPodDeletion(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> lock(write_mu_);
  auto pod = store_->Get(kPodsKey, ns, name);
  if (!pod || !IsDeleting(*pod) || HasFinalizers(*pod)) return;
  RemoveLocked(kPodsKey, ns, name);
  CollectGarbageLocked();
}

void Api::CollectGarbageLocked() {
  // Like the real collector, this one works from what changed since its last pass (the store's
  // event history is its informer), not from a walk of everything stored: a job's cleanup costs
  // in proportion to the job, whatever else the cluster holds. An object is examined when it was
  // written with owners or a deletion pending, when one of its owners or dependents was
  // removed, and (a namespace) when something inside it was removed. When the history no longer
  // reaches back to the last pass, every object the collector could act on is examined, as an
  // informer relists after 410 Gone.
  const std::string namespaces_key = registry_->Find("", "v1", "namespaces")->StorageKey();
  for (int round = 0; round < 100; ++round) {
    std::set<ObjectRef> work;
    std::set<std::string> removed_uids, owner_uids, namespaces;
    int64_t scanned = 0;
    absl::Status history = store_->VisitEventsAfter(
        gc_revision_,
        [&](const StoreEvent& e) {
          const json& meta = Meta(e.object);
          auto owners = meta.find("ownerReferences");
          bool owned = owners != meta.end() && owners->is_array() && !owners->empty();
          if (e.type != "DELETED") {
            if (owned || meta.contains("deletionTimestamp")) {
              work.insert({e.storage_key, meta.value("namespace", ""), meta.value("name", "")});
            }
            return;
          }
          removed_uids.insert(meta.value("uid", ""));
          if (owned) {
            for (const auto& owner : *owners) {
              if (owner.is_object()) owner_uids.insert(owner.value("uid", ""));
            }
          }
          std::string ns = meta.value("namespace", "");
          if (!ns.empty()) namespaces.insert(std::move(ns));
        },
        &scanned);
    gc_revision_ = scanned;
    if (!history.ok()) {
      for (ObjectRef& ref : store_->GarbageCandidates()) work.insert(std::move(ref));
    }
    for (const std::string& uid : removed_uids) {
      for (ObjectRef& dependent : store_->DependentsOf(uid)) work.insert(std::move(dependent));
    }
    for (const std::string& uid : owner_uids) {
      if (auto owner = store_->FindUid(uid)) work.insert(*std::move(owner));
    }
    for (const std::string& ns : namespaces) work.insert({namespaces_key, "", ns});
    if (work.empty()) return;
    for (const ObjectRef& ref : work) CollectLocked(ref);
  }
}

void Api::CollectLocked(const ObjectRef& ref) {
  std::optional<json> slim = store_->GarbageMeta(ref);
  if (!slim) return;
  const json& o = *slim;
  const std::string& k = ref.key;
  const json& refs = Meta(o).value("ownerReferences", json::array());
  if (!refs.empty() && !IsDeleting(o)) {
    bool orphaned = std::none_of(refs.begin(), refs.end(), [&](const json& owner) {
      return store_->FindUid(owner.value("uid", "")).has_value();
    });
    if (orphaned) {
      if (auto whole = store_->Get(k, ref.ns, ref.name)) {
        DeleteObjectLocked(k, *whole, DeleteOptions{});
      }
    }
    return;
  }
  if (!IsDeleting(o)) return;
  const json& fins = Meta(o).value("finalizers", json::array());
  auto has = [&](const char* f) { return std::find(fins.begin(), fins.end(), f) != fins.end(); };
  bool release = false;
  if (has("orphan")) {
    for (const ObjectRef& dep : store_->DependentsOf(UidOf(o))) {
      (void)MutateLocked(dep.key, dep.ns, dep.name, [&](json& live) {
        json kept = json::array();
        for (const auto& r : live["metadata"]["ownerReferences"]) {
          if (r.value("uid", "") != UidOf(o)) kept.push_back(r);
        }
        live["metadata"]["ownerReferences"] = kept;
        return true;
      });
    }
    release = true;
  } else if (has("foregroundDeletion")) {
    std::vector<ObjectRef> deps = store_->DependentsOf(UidOf(o));
    release = deps.empty();
    for (const ObjectRef& dep : deps) {
      auto whole = store_->Get(dep.key, dep.ns, dep.name);
      if (whole && !IsDeleting(*whole)) {
        DeleteObjectLocked(dep.key, *whole, DeleteOptions{"Foreground"});
      }
    }
  } else if (HooksFor(k).namespace_lifecycle) {
    if (store_->CountInNamespace(NameOf(o)) == 0) RemoveLocked(k, "", NameOf(o));
    return;
  }
  if (!release) return;
  std::optional<json> whole = store_->Get(k, ref.ns, ref.name);
  if (!whole) return;
  json updated = *std::move(whole);
  json kept = json::array();
  for (const auto& f : fins) {
    if (f != "orphan" && f != "foregroundDeletion") kept.push_back(f);
  }
  updated["metadata"]["finalizers"] = kept;
  if (kept.empty()) {
    updated["metadata"].erase("finalizers");
    bool graceful_pod = GracefulLocked(k) && Meta(o).value("deletionGracePeriodSeconds", 0) > 0;
    if (!graceful_pod) {
      RemoveLocked(k, ref.ns, ref.name);
      return;
    }
  }
  store_->Put(k, updated);
}

}  // namespace kubetrain::localkube
