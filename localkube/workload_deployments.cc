// The Deployment controller (see workloads.h): a ReplicaSet per pod template, scaled to the
// Deployment's replicas while the older ones go to 0, old ReplicaSets pruned, and the
// Deployment's status and conditions from its ReplicaSets'.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"
#include "localkube/api.h"
#include "localkube/json_fields.h"
#include "localkube/object_meta.h"
#include "localkube/workload_objects.h"
#include "localkube/workloads.h"

namespace kubetrain::localkube {
namespace {

using json = nlohmann::json;

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
    max_revision = std::max(max_revision, ReplicaSetRevision(rs));
    if (NameOf(rs) == rs_name) current = &rs;
  }
  std::string new_revision = std::to_string(
      current && ReplicaSetRevision(*current) == max_revision ? max_revision : max_revision + 1);
  if (current == nullptr) {
    json labels = Field(Field(pod_template, "metadata"), "labels");
    if (!labels.is_object()) labels = json::object();
    labels[kPodTemplateHashLabel] = hash;
    json selector = Field(spec, "selector");
    if (!selector.is_object()) selector = json::object();
    selector["matchLabels"][kPodTemplateHashLabel] = hash;
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
            {kRevisionAnnotation, new_revision}}},
          {"ownerReferences", ControllerRef(d, "Deployment")}}},
        {"spec",
         {{"replicas", replicas},
          {"minReadySeconds", IntField(spec, "minReadySeconds", 0)},
          {"selector", selector},
          {"template", rs_template}}}};
    WriteOptions options;
    options.field_manager = kControllerManager;
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
             std::to_string(ReplicaSetRevision(*current)) != new_revision) {
    (void)api_->Mutate(kReplicaSetsKey, ns, rs_name, [&](json& rs) {
      if (IntField(rs["spec"], "replicas", 1) != replicas) {
        rs["spec"]["replicas"] = replicas;
        rs["metadata"]["generation"] = IntField(rs["metadata"], "generation", 1) + 1;
      }
      rs["metadata"]["annotations"][kRevisionAnnotation] = new_revision;
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
  std::sort(old.begin(), old.end(), [](const json* a, const json* b) {
    return ReplicaSetRevision(*a) < ReplicaSetRevision(*b);
  });
  ResourceTypePtr rs_type = api_->registry()->Find("apps", "v1", "replicasets");
  for (size_t i = 0; i + std::max<int64_t>(history, 0) < old.size(); ++i) {
    const json& rs = *old[i];
    if (IntField(Field(rs, "status"), "replicas", 0) != 0) continue;
    (void)api_->Delete(Target{rs_type, ns, NameOf(rs), ""}, DeleteOptions{});
  }
  // The Deployment carries its current revision.
  (void)api_->Mutate(kDeploymentsKey, ns, name, [&](json& o) {
    if (UidOf(o) != uid ||
        Field(Field(Meta(o), "annotations"), kRevisionAnnotation) == new_revision) {
      return false;
    }
    o["metadata"]["annotations"][kRevisionAnnotation] = new_revision;
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
  UpdateStatus(kDeploymentsKey, ns, name, uid, [&](const json&, json& status) {
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
  });
}

}  // namespace kubetrain::localkube
