// A cluster spec that changed (replicas added or removed, another port) restarts every pod on the
// new one; for an elastic job only a change beyond its Workers does, since its Workers join and
// leave the ps instead (docs/architecture.md §10).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "operator/api/render.h"
#include "operator/api/tf_config.h"
#include "operator/api/tfjob.h"
#include "operator/controller/conditions.h"
#include "operator/controller/pod_view.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/controller/reconciler.h"

namespace kubetrain::controller {
namespace {

// The cluster part of the TF_CONFIG a pod was created with; nullopt when it has none.
std::optional<std::map<std::string, std::vector<std::string>>> PodCluster(const json& pod) {
  const json& containers = pod.value("spec", json::object()).value("containers", json::array());
  if (!containers.is_array()) return std::nullopt;
  for (const json& c : containers) {
    if (!c.is_object() || !c.contains("env") || !c["env"].is_array()) continue;
    for (const json& e : c["env"]) {
      if (!e.is_object() || e.value("name", "") != "TF_CONFIG") continue;
      absl::StatusOr<api::TfConfig> tf = api::ParseTfConfig(e.value("value", ""));
      if (tf.ok()) return tf->cluster;
    }
  }
  return std::nullopt;
}

// "ps=1,worker=2": the shape of a cluster, for events and messages.
std::string Shape(const std::map<std::string, std::vector<std::string>>& cluster) {
  std::vector<std::string> parts;
  for (const auto& [type, addresses] : cluster) {
    parts.push_back(absl::StrCat(type, "=", addresses.size()));
  }
  return parts.empty() ? "(none)" : absl::StrJoin(parts, ",");
}

}  // namespace

absl::Status Reconciler::RestartOnClusterChange(Pass& p) {
  if (p.tasks.empty()) return absl::OkStatus();
  std::map<std::string, std::vector<std::string>> wanted;
  const api::Task& first = p.tasks.front();
  if (p.tfjob) {
    // A job of one replica has no TF_CONFIG, so no cluster to compare (enableDynamicWorker,
    // whose sparse TF_CONFIG differs from task to task, never gets here: validation refuses it).
    absl::StatusOr<api::TfConfig> tf = api::ParseTfConfig(
        api::KubeflowTfConfig(p.object, api::TfJobReplicaName(p.object, first.type), first.index,
                              options_.cluster_domain));
    if (!tf.ok()) return absl::OkStatus();
    wanted = std::move(tf->cluster);
  } else {
    api::ClusterDnsAddresses addresses(options_.cluster_domain);
    wanted = api::TfConfigFor(p.job, addresses, first.type, first.index).cluster;
  }
  // An elastic job's pods keep the Worker list of the day they were created: Workers join and
  // leave the ps, which hold the membership (docs/architecture.md §10). Its ps and chief are
  // still fixed.
  const std::string workers = api::TaskType(api::ReplicaType::kWorker);
  if (p.Elastic()) wanted.erase(workers);
  std::optional<std::map<std::string, std::vector<std::string>>> stale;
  for (const auto& [name, pod] : p.pods) {
    std::optional<PodView> v = p.View(pod);
    if (!v || v->deleting) continue;
    std::optional<std::map<std::string, std::vector<std::string>>> cluster = PodCluster(pod);
    if (cluster && p.Elastic()) cluster->erase(workers);
    if (cluster && *cluster != wanted) {
      stale = std::move(cluster);
      break;
    }
  }
  if (!stale) return absl::OkStatus();
  // Unless the job is elastic, every task must see one cluster spec: a pod with the old one
  // would wait for peers that no longer exist or never learn of new ones. Start the whole job
  // again on the new spec; it resumes from the chief's checkpoint. The user asked for this, so
  // it is no failure and does not count against backoffLimit.
  std::map<std::string, json> pods = p.pods;
  for (const auto& [name, pod] : pods) {
    std::optional<PodView> v = p.View(pod);
    if (v && !v->deleting) RETURN_IF_ERROR(DeletePod(p, pod, "ClusterSpecChanged"));
  }
  for (auto& [type, done] : p.completed) done.clear();
  std::string message = absl::StrCat("Restarted every Pod for a new cluster spec job=", p.JobRef(),
                                     " old=", Shape(*stale), " new=", Shape(wanted));
  events_.Normal(p.object, "ClusterSpecChanged", message);
  log::Info("Cluster spec changed; restarting every pod",
            {{"job", p.JobRef()}, {"old", Shape(*stale)}, {"new", Shape(wanted)}});
  if (metrics_) metrics_->JobRestarted(p.ns);
  SetCondition(&p.status, kRestarting, true, "ClusterSpecChanged",
               absl::StrCat("TrainingJob ", p.JobRef(), " is restarting because its cluster spec ",
                            "changed from ", Shape(*stale), " to ", Shape(wanted), "."),
               p.now);
  return absl::OkStatus();
}

}  // namespace kubetrain::controller
