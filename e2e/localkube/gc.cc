// Deletion and garbage collection: DELETE and deletecollection with preconditions,
// propagationPolicy and finalizers, graceful pod deletion, the namespace controller (a deleted
// namespace's contents, then the namespace) and the ownerReference garbage collector. Not a
// thread: everything here runs under Api's write lock, the collector after every delete.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/status.h"
#include "e2e/localkube/api.h"
#include "e2e/localkube/errors.h"
#include "e2e/localkube/kinds.h"
#include "e2e/localkube/object_meta.h"

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
    if (HasFinalizers(object) || is_namespace) gc_pending_ = true;
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
    gc_pending_ = true;
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
  if (!gc_pending_) return;
  // Cleared first: what the rounds below remove is handled by their next round.
  gc_pending_ = false;
  for (int round = 0; round < 100; ++round) {
    bool changed = false;
    // Only objects with owners or a pending deletion can be acted on (most objects, Events
    // above all, have neither): copying the whole store on every delete made deletes O(objects).
    std::set<std::string> uids;
    std::vector<std::pair<std::string, json>> everything;
    store_->GarbageView(&uids, &everything);
    std::map<std::string, std::vector<const std::pair<std::string, json>*>> dependents;
    for (const auto& entry : everything) {
      for (const auto& ref : Meta(entry.second).value("ownerReferences", json::array())) {
        dependents[ref.value("uid", "")].push_back(&entry);
      }
    }
    for (auto& entry : everything) {
      // Plain references, not structured bindings: the lambdas below capture them, which
      // clang accepts only from version 16.
      auto& k = entry.first;
      auto& o = entry.second;
      const json& refs = Meta(o).value("ownerReferences", json::array());
      bool orphaned = !refs.empty() && !IsDeleting(o);
      for (const auto& ref : refs) orphaned = orphaned && !uids.count(ref.value("uid", ""));
      if (orphaned) {
        if (auto whole = store_->Get(k, NamespaceOf(o), NameOf(o))) {
          DeleteObjectLocked(k, *whole, DeleteOptions{});
        }
        changed = true;
        continue;
      }
      if (!IsDeleting(o)) continue;
      const json& fins = Meta(o).value("finalizers", json::array());
      auto has = [&](const char* f) {
        return std::find(fins.begin(), fins.end(), f) != fins.end();
      };
      auto& deps = dependents[UidOf(o)];
      bool release = false;
      if (has("orphan")) {
        for (const auto* dep : deps) {
          const std::string& dk = dep->first;
          const json& d = dep->second;
          (void)MutateLocked(dk, NamespaceOf(d), NameOf(d), [&](json& live) {
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
        if (deps.empty()) {
          release = true;
        } else {
          for (const auto* dep : deps) {
            const std::string& dk = dep->first;
            const json& d = dep->second;
            if (!IsDeleting(d)) {
              if (auto whole = store_->Get(dk, NamespaceOf(d), NameOf(d))) {
                DeleteObjectLocked(dk, *whole, DeleteOptions{"Foreground"});
              }
              changed = true;
            }
          }
        }
      } else if (HooksFor(k).namespace_lifecycle) {
        bool empty = std::none_of(everything.begin(), everything.end(), [&](const auto& e) {
          return !HooksFor(e.first).namespace_lifecycle && NamespaceOf(e.second) == NameOf(o);
        });
        if (empty) {
          RemoveLocked(k, "", NameOf(o));
          changed = true;
        }
        continue;
      }
      if (release) {
        std::optional<json> whole = store_->Get(k, NamespaceOf(o), NameOf(o));
        if (!whole) continue;
        json updated = *std::move(whole);
        json kept = json::array();
        for (const auto& f : fins) {
          if (f != "orphan" && f != "foregroundDeletion") kept.push_back(f);
        }
        updated["metadata"]["finalizers"] = kept;
        if (kept.empty()) {
          updated["metadata"].erase("finalizers");
          bool graceful_pod =
              GracefulLocked(k) && Meta(o).value("deletionGracePeriodSeconds", 0) > 0;
          if (!graceful_pod) {
            RemoveLocked(k, NamespaceOf(o), NameOf(o));
          } else {
            store_->Put(k, updated);
          }
        } else {
          store_->Put(k, updated);
        }
        changed = true;
      }
    }
    if (!changed) return;
  }
}

}  // namespace kubetrain::localkube
