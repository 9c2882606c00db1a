// Over 500 lines on purpose: the two controllers share one pass over the store and the status
// writers of both kinds.
// The Deployment and ReplicaSet controllers (see workloads.h).
#include "localkube/workloads.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/kube_time.h"
#include "common/logging.h"
#include "localkube/errors.h"
#include "localkube/json_fields.h"
#include "localkube/object_meta.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

constexpr char kDeploymentsKey[] = "apps/deployments";
constexpr char kReplicaSetsKey[] = "apps/replicasets";
constexpr char kPodsStorageKey[] = "/pods";
constexpr char kHashLabel[] = "pod-template-hash";
constexpr char kRevision[] = "deployment.kubernetes.io/revision";
constexpr char kManager[] = "kube-controller-manager";

int64_t IntField(const json& object, const char* key, int64_t fallback) {
  const json& v = Field(object, key);
  return v.is_number_integer() ? v.get<int64_t>() : fallback;
}

// The uid of the object's controller (the ownerReference with controller: true), or "".
std::string ControllerUid(const json& object) {
  const json& refs = Field(Meta(object), "ownerReferences");
  if (!refs.is_array()) return "";
  for (const json& r : refs) {
    if (Field(r, "controller") == true && Field(r, "uid").is_string()) return r["uid"];
  }
  return "";
}

json ControllerRef(const json& owner, const std::string& kind) {
  return json::array({{{"apiVersion", "apps/v1"},
                       {"kind", kind},
                       {"name", NameOf(owner)},
                       {"uid", UidOf(owner)},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

int64_t Revision(const json& replicaset) {
  const json& annotations = Field(Meta(replicaset), "annotations");
  int64_t revision = 0;
  const json& r = Field(annotations, kRevision);
  if (r.is_string()) (void)absl::SimpleAtoi(r.get<std::string>(), &revision);
  return revision;
}

bool Active(const json& pod) {
  std::string phase = Field(Field(pod, "status"), "phase").is_string()
                          ? pod["status"]["phase"].get<std::string>()
                          : "";
  return !IsDeleting(pod) && phase != "Succeeded" && phase != "Failed";
}

// The Ready condition's status and when it last changed.
bool Ready(const json& pod, absl::Time* since) {
  const json& conditions = Field(Field(pod, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (Field(c, "type") != "Ready") continue;
    if (Field(c, "status") != "True") return false;
    absl::Time t = absl::InfinitePast();
    const json& at = Field(c, "lastTransitionTime");
    if (at.is_string())
      (void)absl::ParseTime(absl::RFC3339_full, at.get<std::string>(), &t, nullptr);
    if (since) *since = t;
    return true;
  }
  return false;
}

// Ready for at least minReadySeconds.
bool Available(const json& pod, int64_t min_ready_seconds, absl::Time now) {
  absl::Time since;
  if (!Ready(pod, &since)) return false;
  return min_ready_seconds <= 0 || since + absl::Seconds(min_ready_seconds) <= now;
}

// An int-or-percent of `total` (maxSurge rounds up, maxUnavailable down).
int64_t Scaled(const json& value, int64_t total, bool round_up, int64_t fallback_percent) {
  int64_t percent = fallback_percent;
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_string()) {
    const std::string text = value.get<std::string>();
    absl::string_view s = text;
    if (!absl::ConsumeSuffix(&s, "%") || !absl::SimpleAtoi(s, &percent)) {
      percent = fallback_percent;
    }
  }
  int64_t scaled = percent * total;
  return round_up ? (scaled + 99) / 100 : scaled / 100;
}

// deploymentutil.MaxUnavailable: 0 for Recreate; a RollingUpdate that resolves both maxSurge and
// maxUnavailable to 0 gets 1.
int64_t MaxUnavailable(const json& deployment, int64_t replicas) {
  const json& strategy = Field(Field(deployment, "spec"), "strategy");
  if (Field(strategy, "type") == "Recreate" || replicas == 0) return 0;
  const json& rolling = Field(strategy, "rollingUpdate");
  int64_t surge = Scaled(Field(rolling, "maxSurge"), replicas, true, 25);
  int64_t unavailable = Scaled(Field(rolling, "maxUnavailable"), replicas, false, 25);
  if (surge == 0 && unavailable == 0) unavailable = 1;
  return std::min(unavailable, replicas);
}

// A condition list with `type` set to `condition`, keeping lastTransitionTime while the status
// holds and lastUpdateTime while nothing changes.
void SetCondition(json* conditions, json condition, const std::string& now) {
  if (!conditions->is_array()) *conditions = json::array();
  for (json& c : *conditions) {
    if (Field(c, "type") != condition["type"]) continue;
    bool same_status = Field(c, "status") == condition["status"];
    bool same = same_status && Field(c, "reason") == condition["reason"] &&
                Field(c, "message") == condition["message"];
    condition["lastTransitionTime"] = same_status && Field(c, "lastTransitionTime").is_string()
                                          ? c["lastTransitionTime"]
                                          : json(now);
    if (condition.contains("lastUpdateTime")) {
      condition["lastUpdateTime"] =
          same && Field(c, "lastUpdateTime").is_string() ? c["lastUpdateTime"] : json(now);
    }
    c = std::move(condition);
    return;
  }
  condition["lastTransitionTime"] = now;
  if (condition.contains("lastUpdateTime")) condition["lastUpdateTime"] = now;
  conditions->push_back(std::move(condition));
}

void RemoveCondition(json* conditions, const std::string& type) {
  if (!conditions->is_array()) return;
  conditions->erase(std::remove_if(conditions->begin(), conditions->end(),
                                   [&](const json& c) { return Field(c, "type") == type; }),
                    conditions->end());
}

}  // namespace

std::string PodTemplateHash(const json& pod_template) {
  // controller.ComputeHash: FNV-32a over the template, then rand.SafeEncodeString of its decimal
  // form (each digit byte mapped into the vowel-free alphabet).
  uint32_t hash = 2166136261u;
  for (unsigned char c : pod_template.dump()) {
    hash ^= c;
    hash *= 16777619u;
  }
  static constexpr char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string out;
  for (char c : std::to_string(hash)) {
    out.push_back(kAlphabet[static_cast<unsigned char>(c) % (sizeof(kAlphabet) - 1)]);
  }
  return out;
}

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

void WorkloadControllers::SyncDeployment(const json& d) {
  if (IsDeleting(d)) return;
  Store& store = *api_->store();
  const std::string ns = NamespaceOf(d), name = NameOf(d), uid = UidOf(d);
  const json& spec = Field(d, "spec");
  const json& pod_template = Field(spec, "template");
  if (!pod_template.is_object()) return;
  int64_t replicas = IntField(spec, "replicas", 1);
  std::string hash = PodTemplateHash(pod_template);
  std::string rs_name = absl::StrCat(name, "-", hash);
  int64_t revision = 0;
  std::vector<json> owned;
  for (json& rs : store.List(kReplicaSetsKey, ns, &revision)) {
    if (ControllerUid(rs) == uid) owned.push_back(std::move(rs));
  }
  int64_t max_revision = 0;
  const json* current = nullptr;
  for (const json& rs : owned) {
    max_revision = std::max(max_revision, Revision(rs));
    if (NameOf(rs) == rs_name) current = &rs;
  }
  std::string new_revision = std::to_string(
      current && Revision(*current) == max_revision ? max_revision : max_revision + 1);
  if (current == nullptr) {
    json labels = Field(Field(pod_template, "metadata"), "labels");
    if (!labels.is_object()) labels = json::object();
    labels[kHashLabel] = hash;
    json selector = Field(spec, "selector");
    if (!selector.is_object()) selector = json::object();
    selector["matchLabels"][kHashLabel] = hash;
    json rs_template = pod_template;
    rs_template["metadata"]["labels"] = labels;
    json rs = {
        {"apiVersion", "apps/v1"},
        {"kind", "ReplicaSet"},
        {"metadata",
         {{"name", rs_name},
          {"namespace", ns},
          {"labels", labels},
          {"annotations",
           {{"deployment.kubernetes.io/desired-replicas", std::to_string(replicas)},
            {"deployment.kubernetes.io/max-replicas",
             std::to_string(replicas + Scaled(Field(Field(Field(spec, "strategy"), "rollingUpdate"),
                                                    "maxSurge"),
                                              replicas, true, 25))},
            {kRevision, new_revision}}},
          {"ownerReferences", ControllerRef(d, "Deployment")}}},
        {"spec",
         {{"replicas", replicas},
          {"minReadySeconds", IntField(spec, "minReadySeconds", 0)},
          {"selector", selector},
          {"template", rs_template}}}};
    WriteOptions options;
    options.field_manager = kManager;
    absl::StatusOr<json> created =
        api_->Create(Target{api_->registry()->Find("apps", "v1", "replicasets"), ns, "", ""},
                     std::move(rs), options);
    if (!created.ok()) {
      log::Warn("Cannot create a ReplicaSet", {{"deployment", ns + "/" + name},
                                               {"error", std::string(created.status().message())}});
      return;
    }
    created_replicasets_[uid] = rs_name;
  } else if (IntField(Field(*current, "spec"), "replicas", 1) != replicas ||
             std::to_string(Revision(*current)) != new_revision) {
    (void)api_->Mutate(kReplicaSetsKey, ns, rs_name, [&](json& rs) {
      if (IntField(rs["spec"], "replicas", 1) != replicas) {
        rs["spec"]["replicas"] = replicas;
        rs["metadata"]["generation"] = IntField(rs["metadata"], "generation", 1) + 1;
      }
      rs["metadata"]["annotations"][kRevision] = new_revision;
      rs["metadata"]["annotations"]["deployment.kubernetes.io/desired-replicas"] =
          std::to_string(replicas);
      return true;
    });
  }
  // The old ReplicaSets go to 0 at once; those beyond revisionHistoryLimit that have no pods left
  // are deleted, oldest first.
  std::vector<const json*> old;
  for (const json& rs : owned) {
    if (NameOf(rs) == rs_name || IsDeleting(rs)) continue;
    old.push_back(&rs);
    if (IntField(Field(rs, "spec"), "replicas", 1) != 0) {
      (void)api_->Mutate(kReplicaSetsKey, ns, NameOf(rs), [](json& o) {
        o["spec"]["replicas"] = 0;
        o["metadata"]["generation"] = IntField(o["metadata"], "generation", 1) + 1;
        return true;
      });
    }
  }
  int64_t history = IntField(spec, "revisionHistoryLimit", 10);
  std::sort(old.begin(), old.end(),
            [](const json* a, const json* b) { return Revision(*a) < Revision(*b); });
  ResourceTypePtr rs_type = api_->registry()->Find("apps", "v1", "replicasets");
  for (size_t i = 0; i + std::max<int64_t>(history, 0) < old.size(); ++i) {
    const json& rs = *old[i];
    if (IntField(Field(rs, "status"), "replicas", 0) != 0) continue;
    (void)api_->Delete(Target{rs_type, ns, NameOf(rs), ""}, DeleteOptions{});
  }
  // The Deployment carries its current revision.
  (void)api_->Mutate(kDeploymentsKey, ns, name, [&](json& o) {
    if (UidOf(o) != uid || Field(Field(Meta(o), "annotations"), kRevision) == new_revision) {
      return false;
    }
    o["metadata"]["annotations"][kRevision] = new_revision;
    return true;
  });
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
    if (Active(pod)) {
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
    options.field_manager = kManager;
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
      bool ra = Ready(*a, nullptr), rb = Ready(*b, nullptr);
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
    if (Ready(*p, nullptr)) ++ready;
    if (Available(*p, min_ready, now)) ++available;
  }
  std::string now_text = KubeTime(now);
  auto failure = create_failures_.find(uid);
  (void)api_->Mutate(kReplicaSetsKey, ns, name, [&](json& o) {
    if (UidOf(o) != uid) return false;
    json status = Field(o, "status").is_object() ? o["status"] : json::object();
    json before = status;
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
    if (status == before) return false;
    o["status"] = std::move(status);
    return true;
  });
}

void WorkloadControllers::UpdateDeploymentStatus(const json& d) {
  Store& store = *api_->store();
  const std::string ns = NamespaceOf(d), name = NameOf(d), uid = UidOf(d);
  if (IsDeleting(d) || !Field(Field(d, "spec"), "template").is_object()) return;
  // Read afresh: the pass may have moved the generation and the ReplicaSets.
  auto live = store.Get(kDeploymentsKey, ns, name);
  if (!live || UidOf(*live) != uid) return;
  const json& spec = Field(*live, "spec");
  int64_t replicas = IntField(spec, "replicas", 1);
  std::string rs_name = absl::StrCat(name, "-", PodTemplateHash(Field(spec, "template")));
  int64_t revision = 0;
  int64_t total = 0, actual = 0, updated = 0, ready = 0, available = 0;
  json failure;
  for (const json& rs : store.List(kReplicaSetsKey, ns, &revision)) {
    if (ControllerUid(rs) != uid) continue;
    const json& status = Field(rs, "status");
    total += IntField(Field(rs, "spec"), "replicas", 1);
    actual += IntField(status, "replicas", 0);
    ready += IntField(status, "readyReplicas", 0);
    available += IntField(status, "availableReplicas", 0);
    if (NameOf(rs) == rs_name) {
      updated = IntField(status, "replicas", 0);
      const json& conditions = Field(status, "conditions");
      if (conditions.is_array()) {
        for (const json& c : conditions) {
          if (Field(c, "type") == "ReplicaFailure") failure = c;
        }
      }
    }
  }
  int64_t generation = IntField(Meta(*live), "generation", 1);
  bool complete = updated == replicas && actual == replicas && available == replicas;
  std::string now = NowTimestamp();
  auto created = created_replicasets_.find(uid);
  bool just_created = created != created_replicasets_.end() && created->second == rs_name;
  if (complete) created_replicasets_.erase(uid);
  (void)api_->Mutate(kDeploymentsKey, ns, name, [&](json& o) {
    if (UidOf(o) != uid) return false;
    json status = Field(o, "status").is_object() ? o["status"] : json::object();
    json before = status;
    status["observedGeneration"] = generation;
    status["replicas"] = actual;
    status["updatedReplicas"] = updated;
    status["readyReplicas"] = ready;
    status["availableReplicas"] = available;
    int64_t unavailable = std::max<int64_t>(total - available, 0);
    if (unavailable > 0) {
      status["unavailableReplicas"] = unavailable;
    } else {
      status.erase("unavailableReplicas");
    }
    // Zero counts are omitted, as the apiserver's JSON (omitempty) writes them.
    for (const char* f : {"replicas", "updatedReplicas", "readyReplicas", "availableReplicas"}) {
      if (status[f] == 0) status.erase(f);
    }
    json conditions = Field(status, "conditions");
    // pkg/controller/deployment: the Available and Progressing conditions' reasons and messages.
    if (available >= replicas - MaxUnavailable(*live, replicas)) {
      SetCondition(&conditions,
                   {{"type", "Available"},
                    {"status", "True"},
                    {"lastUpdateTime", now},
                    {"reason", "MinimumReplicasAvailable"},
                    {"message", "Deployment has minimum availability."}},
                   now);
    } else {
      SetCondition(&conditions,
                   {{"type", "Available"},
                    {"status", "False"},
                    {"lastUpdateTime", now},
                    {"reason", "MinimumReplicasUnavailable"},
                    {"message", "Deployment does not have minimum availability."}},
                   now);
    }
    json progressing = {{"type", "Progressing"}, {"status", "True"}, {"lastUpdateTime", now}};
    if (complete) {
      progressing["reason"] = "NewReplicaSetAvailable";
      progressing["message"] =
          absl::StrCat("ReplicaSet \"", rs_name, "\" has successfully progressed.");
    } else if (just_created) {
      progressing["reason"] = "NewReplicaSetCreated";
      progressing["message"] = absl::StrCat("Created new replica set \"", rs_name, "\"");
    } else {
      progressing["reason"] = "ReplicaSetUpdated";
      progressing["message"] = absl::StrCat("ReplicaSet \"", rs_name, "\" is progressing.");
    }
    SetCondition(&conditions, progressing, now);
    if (failure.is_object()) {
      failure.erase("lastUpdateTime");
      SetCondition(&conditions, failure, now);
    } else {
      RemoveCondition(&conditions, "ReplicaFailure");
    }
    status["conditions"] = conditions;
    if (status == before) return false;
    o["status"] = std::move(status);
    return true;
  });
}

}  // namespace kubetrain::localkube
