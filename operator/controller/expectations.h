// What the reconciler did that the informer caches may not show yet (client-go's controllers
// call these "expectations"): its last status write per job, and the pods it deleted. Without
// them a pass that runs right after a write or a deletion (an event for another object arrives
// first) sees the world from before it and repeats what led to it: a job that just succeeded had
// its cleaned-up pods created again, a failure counted and deleted twice.
// docs/architecture.md §10 "Status is level-triggered". Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace kubetrain::controller {

class Expectations {
 public:
  // Job `key`'s status was written and the server returned `written`; each of `older` is a
  // resourceVersion that predates the write (resourceVersions are opaque: "is this one we know
  // to be older" is the only question that may be asked of them).
  void StatusWritten(const std::string& key, const std::set<std::string>& older,
                     nlohmann::json written);
  // The job to reconcile: `cached`, or `cached` with the last write's status, annotations and
  // resourceVersion while the cache still holds a version from before it (a conditional
  // /status PUT left everything else as that version had it). Forgets the write once the cache has
  // caught up with it (or moved past it).
  nlohmann::json NewestJob(const std::string& key, nlohmann::json cached);

  // Job `key`'s pod `uid` was deleted.
  void PodDeleted(const std::string& key, const std::string& uid);
  // Of the pods the cache shows now (`present` uids), those deleted here: they are going,
  // whatever the cache says. Deleted pods the cache no longer shows are forgotten.
  std::set<std::string> PodsGoing(const std::string& key, const std::set<std::string>& present);

  // The same for the job's Services: the cleanup of a finished job deletes them, and a pass
  // that runs before the Service informer has seen them go must not delete them again (404).
  void ServiceDeleted(const std::string& key, const std::string& uid);
  std::set<std::string> ServicesGoing(const std::string& key, const std::set<std::string>& present);

  // The job is gone: forget everything about it.
  void Forget(const std::string& key);

 private:
  // A /status PUT changes only status and resourceVersion, the restart ledger's patch only
  // annotations: those are kept, not a second copy
  // of the whole job beside the cache's (at 5,000 jobs, 100 MB).
  struct Write {
    std::set<std::string> older_versions;
    nlohmann::json status;
    nlohmann::json annotations;  // the restart ledger's (restart_ledger.h) as written; null: none
    std::string resource_version;
  };
  std::mutex mu_;
  std::map<std::string, Write> writes_;                            // job key → last status write
  using Deletions = std::map<std::string, std::set<std::string>>;  // job key → deleted uids
  // Of `deleted[key]`, those `present`; forgets the rest. Under mu_.
  static std::set<std::string> Going(Deletions& deleted, const std::string& key,
                                     const std::set<std::string>& present);
  Deletions deleted_pods_;
  Deletions deleted_services_;
};

}  // namespace kubetrain::controller
