// kube-controller-manager's persistent volume controllers and a local-path provisioner, for the
// claims of localkube's pods:
//  - the `local-path` StorageClass (LocalPathStorageClass: provisioner localkube.io/local-path,
//    WaitForFirstConsumer, reclaimPolicy Delete, the default class), created at start;
//  - provisioning: a claim of a class whose provisioner is localkube.io/local-path gets a
//    PersistentVolume `pvc-<claim uid>`: a directory <data_dir>/<node>/pvc-<uid> (hostPath,
//    DirectoryOrCreate) with spec.nodeAffinity requiring kubernetes.io/hostname=<node>, the
//    claim's request as capacity, its access modes, a claimRef, the class's reclaim policy.
//    WaitForFirstConsumer claims wait (event WaitForFirstConsumer) until the scheduler's
//    pre-bind (PreBind, or anyone) sets volume.kubernetes.io/selected-node; Immediate claims are
//    provisioned at once on `immediate_node`. Event ProvisioningSucceeded / ProvisioningFailed.
//  - binding: PV status Bound; the claim's spec.volumeName, status (Bound, capacity, access
//    modes) and the pv.kubernetes.io/bind-completed, bound-by-controller and
//    volume.kubernetes.io/storage-provisioner annotations;
//  - pvc-protection: a deleted claim keeps its kubernetes.io/pvc-protection finalizer while a
//    pod that has not finished uses it; pv-protection: a deleted PV keeps its finalizer while
//    Bound;
//  - reclaim: a PV whose claim is gone is Released; reclaim policy Delete removes its directory
//    and the PV, Retain keeps both.
//  - the `shared-path` StorageClass (SharedPathStorageClass: provisioner localkube.io/shared-path,
//    Immediate, reclaimPolicy Delete, not the default): network storage as a cluster's NFS or
//    cloud file share is, reachable from every node. A claim of it is provisioned as soon as it
//    is made, in <data_dir>/shared/pvc-<uid>, with no node affinity, so a pod that lost its node
//    mounts the same data on another; any access mode (ReadWriteOnce, ReadWriteMany, ...) is
//    kept as asked. localkube enforces no single attachment for either class.
// Claims of classes with another provisioner, or of no class, are left Pending (an event says
// why): localkube binds no hand-made PersistentVolumes.
//
// Owns one thread woken by the store's changes (and a resync every few seconds, which retries a
// failed provisioning). A mutex serialises provisioning between that thread and PreBind (the
// scheduler's thread). Writes go through Api.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "localkube/api.h"
#include "localkube/scheduler_plugins.h"

namespace kubetrain::localkube {

inline constexpr char kLocalPathProvisioner[] = "localkube.io/local-path";
inline constexpr char kLocalPathClass[] = "local-path";
inline constexpr char kSharedPathProvisioner[] = "localkube.io/shared-path";
inline constexpr char kSharedPathClass[] = "shared-path";

// The `local-path` StorageClass localkube starts with (the default class).
nlohmann::json LocalPathStorageClass();
// The `shared-path` StorageClass localkube starts with: storage every node reaches.
nlohmann::json SharedPathStorageClass();

struct PersistentVolumeOptions {
  // local-path volumes live in <data_dir>/<node>/pvc-<uid>, shared-path ones in
  // <data_dir>/shared/pvc-<uid>
  std::string data_dir;
  std::string immediate_node = "node-1";  // where Immediate-binding claims are provisioned
};

class PersistentVolumeController {
 public:
  PersistentVolumeController(Api* api, PersistentVolumeOptions options);
  ~PersistentVolumeController();
  PersistentVolumeController(const PersistentVolumeController&) = delete;
  PersistentVolumeController& operator=(const PersistentVolumeController&) = delete;

  // Creates the local-path and shared-path StorageClasses (unless one of that name exists), then
  // follows changes.
  absl::Status Start();
  // Returns within about 250 ms plus the pass in progress.
  void Stop();

  // One pass over every claim and volume (the thread's work; tests call it directly).
  void SyncOnce();

  // Provisions and binds claim ns/name on `node` now (a no-op once it is bound; a shared-path
  // claim ignores `node`). NotFound for a missing claim, FailedPrecondition when its class is
  // not provisioned by localkube.
  absl::Status Provision(const std::string& ns, const std::string& name, const std::string& node);

  // The scheduler's pre-bind (VolumeBinding): every unbound WaitForFirstConsumer claim of the
  // pod gets volume.kubernetes.io/selected-node = the chosen node and is provisioned and bound
  // before this returns, so the pod is bound to a node its volumes are on. An unbound Immediate
  // claim, or a class localkube does not provision, is an error (the pod stays Pending).
  SchedulerPreBind PreBind();

 private:
  void Loop(int64_t after);
  // Whether the events after `*after` touch claims, volumes, classes or pods (history lost: yes).
  bool Relevant(int64_t* after) const;
  void SyncClaim(const nlohmann::json& claim);
  void SyncVolume(const nlohmann::json& pv);
  absl::Status ProvisionLocked(const nlohmann::json& claim, const std::string& node);
  absl::Status BindLocked(const nlohmann::json& claim, const nlohmann::json& pv);
  // Drops `finalizer` from the object (an Update, which removes a deleted object at once).
  void ReleaseFinalizer(const std::string& plural, const nlohmann::json& object,
                        const std::string& finalizer);
  // An Event about `object` (once per uid, reason and message).
  // `reporter`: the component that reports it (default: the PV controller).
  void RecordEvent(const nlohmann::json& object, const std::string& type, const std::string& reason,
                   const std::string& message, const std::string& reporter = "");

  Api* api_;
  PersistentVolumeOptions options_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;  // serialises provisioning, binding and events_
  std::map<std::string, std::set<std::string>> events_;  // by object uid: "reason\nmessage"
};

// The pre-bind plug-in for the scheduler: controller->PreBind().
SchedulerPreBind VolumeBindingPreBind(PersistentVolumeController* controller);

}  // namespace kubetrain::localkube
