#include "localkube/persistent_volumes.h"

#include <sys/stat.h>

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/errors.h"
#include "localkube/events.h"
#include "localkube/json_fields.h"
#include "localkube/object_meta.h"
#include "localkube/storage_objects.h"
#include "localkube/volume_binding.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr char kPvControllerManager[] = "persistentvolume-controller";
constexpr absl::Duration kPvResync = absl::Seconds(5);

bool HasFinalizerNamed(const json& object, const std::string& finalizer) {
  const json& list = Meta(object).value("finalizers", json::array());
  return list.is_array() && std::find(list.begin(), list.end(), finalizer) != list.end();
}

// Whether localkube provisions the volumes of a class with this provisioner.
bool OurProvisioner(const std::string& provisioner) {
  return provisioner == kLocalPathProvisioner || provisioner == kSharedPathProvisioner;
}

// The directory a PV of localkube's provisioners lives in ("" for another PV).
std::string ProvisionedPath(const json& pv) {
  if (!OurProvisioner(
          Str(ObjectOrEmpty(Meta(pv), "annotations"), "pv.kubernetes.io/provisioned-by"))) {
    return "";
  }
  return Str(ObjectOrEmpty(ObjectOrEmpty(pv, "spec"), "hostPath"), "path");
}

}  // namespace

json LocalPathStorageClass() {
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "StorageClass"},
          {"metadata",
           {{"name", kLocalPathClass}, {"annotations", {{kDefaultClassAnnotation, "true"}}}}},
          {"provisioner", kLocalPathProvisioner},
          {"reclaimPolicy", "Delete"},
          {"volumeBindingMode", "WaitForFirstConsumer"}};
}

json SharedPathStorageClass() {
  return {{"apiVersion", "storage.k8s.io/v1"},
          {"kind", "StorageClass"},
          {"metadata", {{"name", kSharedPathClass}}},
          {"provisioner", kSharedPathProvisioner},
          {"reclaimPolicy", "Delete"},
          {"volumeBindingMode", "Immediate"}};
}

PersistentVolumeController::PersistentVolumeController(Api* api, PersistentVolumeOptions options)
    : api_(api), options_(std::move(options)) {}

PersistentVolumeController::~PersistentVolumeController() { Stop(); }

absl::Status PersistentVolumeController::Start() {
  int64_t after = api_->store()->Revision();
  ResourceTypePtr classes = api_->registry()->Find("storage.k8s.io", "v1", "storageclasses");
  if (!classes) return absl::InternalError("storageclasses are not served");
  for (const json& sc : {LocalPathStorageClass(), SharedPathStorageClass()}) {
    absl::StatusOr<json> created = api_->Create(Target{classes, "", "", ""}, sc, WriteOptions{});
    if (!created.ok() && HttpCode(created.status()) != 409) return created.status();
  }
  std::error_code ec;
  fs::create_directories(options_.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the volume directory ", options_.data_dir, ": ", ec.message()));
  }
  SyncOnce();
  thread_ = std::thread([this, after] { Loop(after); });
  return absl::OkStatus();
}

void PersistentVolumeController::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void PersistentVolumeController::Loop(int64_t after) {
  absl::Time resync_at = absl::Now() + kPvResync;
  while (!stop_) {
    if (!api_->store()->WaitForChange(after, absl::Now() + absl::Milliseconds(250))) return;
    bool resync = absl::Now() >= resync_at;
    if (!Relevant(&after) && !resync) continue;
    if (stop_) return;
    SyncOnce();
    resync_at = absl::Now() + kPvResync;
  }
}

bool PersistentVolumeController::Relevant(int64_t* after) const {
  bool relevant = false;
  int64_t scanned = *after;
  absl::Status st = api_->store()->VisitEventsAfter(
      *after,
      [&](const StoreEvent& e) {
        relevant = relevant || e.storage_key == kPvcKey || e.storage_key == kPvKey ||
                   e.storage_key == kStorageClassKey ||
                   (e.storage_key == "/pods" && !PodClaimNames(e.object).empty());
      },
      &scanned);
  *after = st.ok() ? scanned : api_->store()->Revision();
  return relevant || !st.ok();
}

void PersistentVolumeController::SyncOnce() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t revision = 0;
  std::set<std::string> live;
  for (const json& claim : api_->store()->List(kPvcKey, "", &revision)) {
    live.insert(UidOf(claim));
    SyncClaim(claim);
  }
  for (const json& pv : api_->store()->List(kPvKey, "", &revision)) {
    live.insert(UidOf(pv));
    SyncVolume(pv);
  }
  for (auto it = events_.begin(); it != events_.end();) {
    it = live.count(it->first) ? std::next(it) : events_.erase(it);
  }
}

void PersistentVolumeController::SyncClaim(const json& claim) {
  const std::string ns = NamespaceOf(claim), name = NameOf(claim);
  if (IsDeleting(claim)) {
    if (!HasFinalizerNamed(claim, kPvcProtectionFinalizer)) return;
    int64_t revision = 0;
    for (const json& pod : api_->store()->List("/pods", ns, &revision)) {
      if (PodFinished(pod)) continue;
      for (const std::string& used : PodClaimNames(pod)) {
        if (used == name) return;  // still in use: the finalizer stays
      }
    }
    ReleaseFinalizer("persistentvolumeclaims", claim, kPvcProtectionFinalizer);
    return;
  }
  const std::string volume = Str(ObjectOrEmpty(claim, "spec"), "volumeName");
  if (!volume.empty()) {
    std::optional<json> pv = api_->store()->Get(kPvKey, "", volume);
    if (pv && Str(ObjectOrEmpty(claim, "status"), "phase") != "Bound") (void)BindLocked(claim, *pv);
    return;
  }
  const std::string class_name = ClaimClassName(claim);
  if (class_name.empty()) {
    RecordEvent(claim, "Normal", "FailedBinding",
                "no persistent volumes available for this claim and no storage class is set");
    return;
  }
  std::optional<json> sc = api_->store()->Get(kStorageClassKey, "", class_name);
  if (!sc) {
    RecordEvent(claim, "Warning", "ProvisioningFailed",
                absl::StrCat("storageclass.storage.k8s.io \"", class_name, "\" not found"));
    return;
  }
  if (!OurProvisioner(Str(*sc, "provisioner"))) {
    RecordEvent(claim, "Normal", "ExternalProvisioning",
                absl::StrCat("Waiting for a volume to be created either by the external "
                             "provisioner '",
                             Str(*sc, "provisioner"),
                             "' or manually by the system administrator. If volume creation is "
                             "delayed, please verify that the provisioner is running and "
                             "correctly registered."));
    return;
  }
  std::string node = Str(ObjectOrEmpty(Meta(claim), "annotations"), kSelectedNodeAnnotation);
  if (Str(*sc, "provisioner") == kSharedPathProvisioner) {
    node.clear();  // every node reaches it: provisioned at once, on none
  } else if (Str(*sc, "volumeBindingMode") == "WaitForFirstConsumer") {
    if (node.empty()) {
      RecordEvent(claim, "Normal", "WaitForFirstConsumer",
                  "waiting for first consumer to be created before binding");
      return;
    }
  } else {
    node = options_.immediate_node;
  }
  (void)ProvisionLocked(claim, node);
}

void PersistentVolumeController::SyncVolume(const json& pv) {
  const std::string phase = Str(ObjectOrEmpty(pv, "status"), "phase");
  if (IsDeleting(pv)) {
    if (phase != "Bound" && HasFinalizerNamed(pv, kPvProtectionFinalizer)) {
      ReleaseFinalizer("persistentvolumes", pv, kPvProtectionFinalizer);
    }
    return;
  }
  const json& ref = ObjectOrEmpty(ObjectOrEmpty(pv, "spec"), "claimRef");
  if (ref.empty()) {
    if (phase != "Available") {
      (void)api_->Mutate(kPvKey, "", NameOf(pv), [](json& live) {
        live["status"] = {{"phase", "Available"}};
        return true;
      });
    }
    return;
  }
  std::optional<json> claim = api_->store()->Get(kPvcKey, Str(ref, "namespace"), Str(ref, "name"));
  bool claim_gone = !claim || (!Str(ref, "uid").empty() && UidOf(*claim) != Str(ref, "uid"));
  if (!claim_gone) {
    if (phase != "Bound" && Str(ObjectOrEmpty(*claim, "spec"), "volumeName") == NameOf(pv)) {
      (void)api_->Mutate(kPvKey, "", NameOf(pv), [](json& live) {
        live["status"] = {{"phase", "Bound"}};
        return true;
      });
    }
    return;
  }
  if (phase != "Released" && phase != "Failed") {
    (void)api_->Mutate(kPvKey, "", NameOf(pv), [](json& live) {
      live["status"] = {{"phase", "Released"}};
      return true;
    });
  }
  if (Str(ObjectOrEmpty(pv, "spec"), "persistentVolumeReclaimPolicy") != "Delete") return;
  std::string path = ProvisionedPath(pv);
  if (path.empty()) {
    RecordEvent(pv, "Warning", "VolumeFailedDelete",
                "error getting deleter volume plugin for volume \"" + NameOf(pv) +
                    "\": no deletable volume plugin matched");
    return;
  }
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) {
    RecordEvent(pv, "Warning", "VolumeFailedDelete",
                absl::StrCat("cannot remove ", path, ": ", ec.message()));
    return;
  }
  ResourceTypePtr pvs = api_->registry()->Find("", "v1", "persistentvolumes");
  DeleteOptions options;
  absl::StatusOr<json> deleted = api_->Delete(Target{pvs, "", NameOf(pv), ""}, options);
  if (deleted.ok()) log::Info("Deleted PersistentVolume", {{"pv", NameOf(pv)}, {"path", path}});
}

absl::Status PersistentVolumeController::Provision(const std::string& ns, const std::string& name,
                                                   const std::string& node) {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<json> claim = api_->store()->Get(kPvcKey, ns, name);
  if (!claim) return NotFoundError("persistentvolumeclaims", name);
  return ProvisionLocked(*claim, node);
}

absl::Status PersistentVolumeController::ProvisionLocked(const json& claim,
                                                         const std::string& node) {
  const json& spec = ObjectOrEmpty(claim, "spec");
  if (!Str(spec, "volumeName").empty()) return absl::OkStatus();
  const std::string class_name = ClaimClassName(claim);
  std::optional<json> sc = api_->store()->Get(kStorageClassKey, "", class_name);
  if (!sc || !OurProvisioner(Str(*sc, "provisioner"))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "persistentvolumeclaim \"", NameOf(claim), "\": storage class \"", class_name,
        "\" is not provisioned by ", kLocalPathProvisioner, " or ", kSharedPathProvisioner));
  }
  const std::string provisioner = Str(*sc, "provisioner");
  const bool shared = provisioner == kSharedPathProvisioner;
  const std::string pv_name = "pvc-" + UidOf(claim);
  const std::string path =
      (fs::path(options_.data_dir) / (shared ? "shared" : node) / pv_name).string();
  std::optional<json> pv = api_->store()->Get(kPvKey, "", pv_name);
  if (!pv) {
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) {
      std::string message =
          absl::StrCat("failed to provision volume with StorageClass \"", class_name,
                       "\": cannot create ", path, ": ", ec.message());
      RecordEvent(claim, "Warning", "ProvisioningFailed", message, provisioner);
      return absl::UnavailableError(message);
    }
    chmod(path.c_str(), 0777);  // as local-path provisioners leave it: any pod user may write
    std::string storage =
        Str(ObjectOrEmpty(ObjectOrEmpty(spec, "resources"), "requests"), "storage");
    json volume = {
        {"apiVersion", "v1"},
        {"kind", "PersistentVolume"},
        {"metadata",
         {{"name", pv_name}, {"annotations", {{"pv.kubernetes.io/provisioned-by", provisioner}}}}},
        {"spec",
         {{"capacity", {{"storage", storage}}},
          {"accessModes", spec.value("accessModes", json::array())},
          {"hostPath", {{"path", path}, {"type", "DirectoryOrCreate"}}},
          {"claimRef",
           {{"apiVersion", "v1"},
            {"kind", "PersistentVolumeClaim"},
            {"namespace", NamespaceOf(claim)},
            {"name", NameOf(claim)},
            {"uid", UidOf(claim)},
            {"resourceVersion", Meta(claim).value("resourceVersion", "")}}},
          {"storageClassName", class_name},
          {"persistentVolumeReclaimPolicy",
           Str(*sc, "reclaimPolicy").empty() ? "Delete" : Str(*sc, "reclaimPolicy")},
          {"volumeMode", "Filesystem"}}}};
    if (!shared) {  // a node's own disk: only pods on that node mount it
      volume["spec"]["nodeAffinity"] = {{"required",
                                         {{"nodeSelectorTerms",
                                           {{{"matchExpressions",
                                              {{{"key", "kubernetes.io/hostname"},
                                                {"operator", "In"},
                                                {"values", {node}}}}}}}}}}};
    }
    ResourceTypePtr pvs = api_->registry()->Find("", "v1", "persistentvolumes");
    WriteOptions options;
    options.field_manager = provisioner;
    absl::StatusOr<json> created = api_->Create(Target{pvs, "", "", ""}, volume, options);
    if (!created.ok() && HttpCode(created.status()) != 409) {
      std::string message = absl::StrCat("failed to provision volume with StorageClass \"",
                                         class_name, "\": ", created.status().message());
      RecordEvent(claim, "Warning", "ProvisioningFailed", message, provisioner);
      return absl::UnavailableError(message);
    }
    pv = created.ok() ? *created : api_->store()->Get(kPvKey, "", pv_name);
    if (!pv) return absl::UnavailableError("the provisioned volume " + pv_name + " vanished");
    RecordEvent(claim, "Normal", "ProvisioningSucceeded",
                absl::StrCat("Successfully provisioned volume ", pv_name), provisioner);
    log::Info("Provisioned PersistentVolume", {{"pv", pv_name},
                                               {"claim", NamespaceOf(claim) + "/" + NameOf(claim)},
                                               {"node", shared ? "(shared)" : node},
                                               {"path", path}});
  }
  return BindLocked(claim, *pv);
}

absl::Status PersistentVolumeController::BindLocked(const json& claim, const json& pv) {
  const std::string pv_name = NameOf(pv);
  absl::Status st = api_->Mutate(kPvKey, "", pv_name, [](json& live) {
    if (Str(ObjectOrEmpty(live, "status"), "phase") == "Bound") return false;
    live["status"] = {{"phase", "Bound"}};
    return true;
  });
  if (!st.ok()) return absl::UnavailableError(st.message());
  const json pv_spec = ObjectOrEmpty(pv, "spec");
  std::string provisioner =
      Str(ObjectOrEmpty(Meta(pv), "annotations"), "pv.kubernetes.io/provisioned-by");
  if (provisioner.empty()) provisioner = kLocalPathProvisioner;
  st = api_->Mutate(kPvcKey, NamespaceOf(claim), NameOf(claim), [&](json& live) {
    if (UidOf(live) != UidOf(claim)) return false;
    json& annotations = live["metadata"]["annotations"];
    if (!annotations.is_object()) annotations = json::object();
    annotations["pv.kubernetes.io/bind-completed"] = "yes";
    annotations["pv.kubernetes.io/bound-by-controller"] = "yes";
    annotations["volume.kubernetes.io/storage-provisioner"] = provisioner;
    annotations["volume.beta.kubernetes.io/storage-provisioner"] = provisioner;
    live["spec"]["volumeName"] = pv_name;
    live["status"] = {{"phase", "Bound"},
                      {"accessModes", pv_spec.value("accessModes", json::array())},
                      {"capacity", pv_spec.value("capacity", json::object())}};
    return true;
  });
  if (!st.ok()) return absl::UnavailableError(st.message());
  return absl::OkStatus();
}

void PersistentVolumeController::ReleaseFinalizer(const std::string& plural, const json& object,
                                                  const std::string& finalizer) {
  ResourceTypePtr type = api_->registry()->Find("", "v1", plural);
  if (!type) return;
  json updated = object;
  json kept = json::array();
  for (const json& f : Meta(object).value("finalizers", json::array())) {
    if (f != finalizer) kept.push_back(f);
  }
  updated["metadata"]["finalizers"] = kept;
  WriteOptions options;
  options.field_manager = kPvControllerManager;
  bool created = false;
  // A conflict (another writer in between) is retried on the next pass its change triggers.
  (void)api_->Update(Target{type, NamespaceOf(object), NameOf(object), ""}, updated, options,
                     &created);
}

void PersistentVolumeController::RecordEvent(const json& object, const std::string& type,
                                             const std::string& reason, const std::string& message,
                                             const std::string& reporter) {
  if (!events_[UidOf(object)].insert(reason + "\n" + message).second) return;
  const std::string component = !reporter.empty() ? reporter : kPvControllerManager;
  (void)PostEvent(*api_, InvolvedObjectOf(object, ""), type, reason, message,
                  {.component = component});
}

SchedulerPreBind PersistentVolumeController::PreBind() {
  return [this](const json& pod, const std::string& node) -> absl::Status {
    const std::string ns = NamespaceOf(pod);
    for (const std::string& name : PodClaimNames(pod)) {
      std::optional<json> claim = api_->store()->Get(kPvcKey, ns, name);
      if (!claim) return NotFoundError("persistentvolumeclaims", name);
      if (!Str(ObjectOrEmpty(*claim, "spec"), "volumeName").empty()) continue;
      std::optional<json> sc = api_->store()->Get(kStorageClassKey, "", ClaimClassName(*claim));
      if (!sc || Str(*sc, "volumeBindingMode") != "WaitForFirstConsumer") {
        return absl::UnavailableError("pod has unbound immediate PersistentVolumeClaims");
      }
      absl::Status st = api_->Mutate(kPvcKey, ns, name, [&](json& live) {
        json& annotations = live["metadata"]["annotations"];
        if (!annotations.is_object()) annotations = json::object();
        if (Str(annotations, kSelectedNodeAnnotation) == node) return false;
        annotations[kSelectedNodeAnnotation] = node;
        return true;
      });
      if (!st.ok()) return NotFoundError("persistentvolumeclaims", name);
      if (absl::Status p = Provision(ns, name, node); !p.ok()) {
        return absl::UnavailableError(absl::StrCat("binding volumes: ", p.message()));
      }
    }
    return absl::OkStatus();
  };
}

SchedulerPreBind VolumeBindingPreBind(PersistentVolumeController* controller) {
  return controller->PreBind();
}

}  // namespace kubetrain::localkube
