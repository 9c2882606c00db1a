// The workload controllers' thread and pass (see workloads.h), and the ReplicaSet controller: pods
// created, replaced and deleted to match spec.replicas, and the ReplicaSet's status. The
// Deployment controller is in workload_deployments.cc, what both read and write in
// workload_objects.h.
#include "localkube/workloads.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/json_fields.h"
#include "localkube/object_meta.h"
#include "localkube/workload_objects.h"

namespace kubetrain::localkube {

using json = nlohmann::json;

WorkloadControllers::WorkloadControllers(Api* api, absl::Duration resync)
    : api_(api), resync_(resync) {}

WorkloadControllers::~WorkloadControllers() { Stop(); }

void WorkloadControllers::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void WorkloadControllers::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void WorkloadControllers::Loop() {
  int64_t seen = -1;
  absl::Time next_resync = absl::InfinitePast();
  while (!stop_) {
    int64_t revision = api_->store()->Revision();
    if (revision != seen || absl::Now() >= next_resync) {
      // Our own writes move the revision past `seen`: the next round looks again, and stops
      // writing once everything matches.
      seen = revision;
      next_resync = absl::Now() + resync_;
      try {
        SyncOnce();
      } catch (const std::exception& e) {
        log::Error("Workload controllers failed a pass", {{"error", std::string(e.what())}});
      }
    }
    if (!api_->store()->WaitForChange(
            seen, std::min(next_resync, absl::Now() + absl::Milliseconds(250)))) {
      absl::SleepFor(absl::Milliseconds(50));  // the store shut down: wait for Stop
    }
  }
}

void WorkloadControllers::SyncOnce() {
  Store& store = *api_->store();
  int64_t revision = 0;
  std::vector<json> deployments = store.List(kDeploymentsKey, "", &revision);
  for (const json& d : deployments) SyncDeployment(d);
  std::multimap<std::string, json> pods_by_owner;
  for (json& p : store.List(kPodsStorageKey, "", &revision)) {
    std::string owner = ControllerUid(p);
    if (!owner.empty()) pods_by_owner.emplace(owner, std::move(p));
  }
  for (const json& rs : store.List(kReplicaSetsKey, "", &revision)) {
    SyncReplicaSet(rs, pods_by_owner);
  }
  for (const json& d : deployments) UpdateDeploymentStatus(d);
}

void WorkloadControllers::SyncReplicaSet(const json& rs,
                                         const std::multimap<std::string, json>& pods_by_owner) {
  const std::string ns = NamespaceOf(rs), name = NameOf(rs), uid = UidOf(rs);
  if (IsDeleting(rs)) return;
  const json& spec = Field(rs, "spec");
  const json& pod_template = Field(spec, "template");
  int64_t want = IntField(spec, "replicas", 1);
  int64_t min_ready = IntField(spec, "minReadySeconds", 0);
  ResourceTypePtr pod_type = api_->registry()->Find("", "v1", "pods");
  std::vector<const json*> active;
  auto [begin, end] = pods_by_owner.equal_range(uid);
  int writes = 0;
  for (auto it = begin; it != end; ++it) {
    const json& pod = it->second;
    if (PodActive(pod)) {
      active.push_back(&pod);
    } else if (!IsDeleting(pod) && writes < kMaxPodWritesPerSync) {
      // A pod that ran to completion or failed is replaced; the controller removes it so that a
      // crashing template does not pile pods up.
      ++writes;
      (void)api_->Delete(Target{pod_type, ns, NameOf(pod), ""}, DeleteOptions{});
    }
  }
  int64_t have = static_cast<int64_t>(active.size());
  if (have < want && pod_template.is_object()) {
    json meta = Field(pod_template, "metadata");
    json pod_meta = {{"generateName", name + "-"},
                     {"namespace", ns},
                     {"ownerReferences", ControllerRef(rs, "ReplicaSet")}};
    if (Field(meta, "labels").is_object()) pod_meta["labels"] = meta["labels"];
    if (Field(meta, "annotations").is_object()) pod_meta["annotations"] = meta["annotations"];
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", pod_meta},
                {"spec", Field(pod_template, "spec")}};
    WriteOptions options;
    options.field_manager = kControllerManager;
    for (int64_t i = have; i < want && writes < kMaxPodWritesPerSync; ++i, ++writes) {
      absl::StatusOr<json> created = api_->Create(Target{pod_type, ns, "", ""}, pod, options);
      if (!created.ok()) {
        std::string message(created.status().message());
        if (create_failures_[uid] != message) {
          log::Warn("Cannot create a pod", {{"replicaset", ns + "/" + name}, {"error", message}});
        }
        create_failures_[uid] = message;
        break;
      }
      create_failures_.erase(uid);
    }
  } else if (have > want) {
    // Not-ready pods go first, then the newest (the apiserver's ActivePods ordering, shortened).
    std::vector<const json*> victims = active;
    std::sort(victims.begin(), victims.end(), [](const json* a, const json* b) {
      bool ra = PodReady(*a, nullptr), rb = PodReady(*b, nullptr);
      if (ra != rb) return !ra;
      return Meta(*a).value("creationTimestamp", "") > Meta(*b).value("creationTimestamp", "");
    });
    for (int64_t i = 0; i < have - want && writes < kMaxPodWritesPerSync; ++i, ++writes) {
      (void)api_->Delete(Target{pod_type, ns, NameOf(*victims[i]), ""}, DeleteOptions{});
    }
  }
  if (want <= have) create_failures_.erase(uid);
  // Status from the pods as they stood at the start of the pass; the writes above change the
  // store's revision, and the next pass counts again.
  absl::Time now = absl::Now();
  int64_t ready = 0, available = 0;
  for (const json* p : active) {
    if (PodReady(*p, nullptr)) ++ready;
    if (PodAvailable(*p, min_ready, now)) ++available;
  }
  std::string now_text = KubeTime(now);
  auto failure = create_failures_.find(uid);
  UpdateStatus(kReplicaSetsKey, ns, name, uid, [&](const json& o, json& status) {
    status["replicas"] = have;
    status["fullyLabeledReplicas"] = have;
    status["readyReplicas"] = ready;
    status["availableReplicas"] = available;
    status["observedGeneration"] = IntField(Meta(o), "generation", 1);
    json conditions = Field(status, "conditions");
    if (failure != create_failures_.end()) {
      SetCondition(&conditions,
                   {{"type", "ReplicaFailure"},
                    {"status", "True"},
                    {"reason", "FailedCreate"},
                    {"message", failure->second}},
                   now_text);
    } else {
      RemoveCondition(&conditions, "ReplicaFailure");
    }
    if (conditions.is_array() && !conditions.empty()) {
      status["conditions"] = conditions;
    } else {
      status.erase("conditions");
    }
  });
}

void WorkloadControllers::UpdateStatus(
    const char* storage_key, const std::string& ns, const std::string& name, const std::string& uid,
    const std::function<void(const json& object, json& status)>& update) {
  (void)api_->Mutate(storage_key, ns, name, [&](json& o) {
    if (UidOf(o) != uid) return false;
    json status = Field(o, "status").is_object() ? o["status"] : json::object();
    json before = status;
    update(o, status);
    if (status == before) return false;
    o["status"] = std::move(status);
    return true;
  });
}

}  // namespace kubetrain::localkube
