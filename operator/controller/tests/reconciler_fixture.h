// The reconciler on fakes (kube::testing::FakeApiClient, a FakeClock), shared by the unit tests
// of its rules: a job's passes, what the fake API server holds, and time that moves when told.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/reconciler.h"
#include "operator/controller/tests/job_builders.h"
#include "operator/kube/testing/fake_api.h"

namespace kubetrain::controller::testing {

using kube::Resource;
using ::kubetrain::testing::IsOk;

class ReconcilerTest : public ::testing::Test {
 protected:
  ReconcilerTest() { NewReconciler(); }

  // A fresh reconciler on the same API server: an operator that restarted.
  void NewReconciler() {
    reconciler_ = std::make_unique<Reconciler>(
        api_, api_.Cache(Resource::TrainingJobs()), api_.Cache(Resource::Pods()),
        api_.Cache(Resource::Services()), events_, nullptr, nullptr,
        ReconcilerOptions{.clock = &clock_}, &api_.Cache(Resource::TfJobs()));
  }

  void Create(const json& job) {
    ASSERT_THAT(api_.Create(Resource::TrainingJobs(), "default", job), IsOk());
  }

  absl::StatusOr<ReconcileResult> Pass(const std::string& job) {
    return reconciler_->Reconcile("default/" + job);
  }

  // Passes until one succeeds (at most `n`), and on while a pass asks to run again after the
  // others (requeue_later: a finishing pass leaves the cleanup to the next).
  ReconcileResult Settle(const std::string& job, int n = 3) {
    return SettleKey("default/" + job, n);
  }
  ReconcileResult SettleKey(const std::string& key, int n) {
    absl::StatusOr<ReconcileResult> r;
    for (int i = 0; i < n; ++i) {
      r = reconciler_->Reconcile(key);
      if (r.ok() && r->requeue_later) continue;
      if (r.ok()) return *r;
    }
    ADD_FAILURE() << "no pass of " << key << " succeeded: " << r.status();
    return {};
  }

  json Status(const std::string& job) {
    std::optional<json> obj = api_.Object(Resource::TrainingJobs(), "default", job);
    return obj ? obj->value("status", json::object()) : json::object();
  }

  std::string State(const std::string& job) {
    json st = Status(job);
    if (!st.contains("conditions") || st["conditions"].empty()) return "";
    return st["conditions"].back()["type"];
  }

  int Restarts(const std::string& job, const std::string& type = "Worker") {
    return Status(job)["replicaStatuses"].value(type, json::object()).value("restarts", 0);
  }

  std::optional<json> Pod(const std::string& name) {
    return api_.Object(Resource::Pods(), "default", name);
  }
  std::string Uid(const std::string& pod) {
    std::optional<json> p = Pod(pod);
    return p ? (*p)["metadata"].value("uid", "") : "";
  }
  bool Deleting(const std::string& pod) {
    std::optional<json> p = Pod(pod);
    return p && (*p)["metadata"].contains("deletionTimestamp");
  }

  std::vector<std::string> PodNames() {
    std::vector<std::string> names;
    for (const json& p : api_.Objects(Resource::Pods())) names.push_back(p["metadata"]["name"]);
    return names;
  }

  bool HasEvent(const std::string& reason, const std::string& message_part) {
    for (const json& e : api_.Objects(Resource::Events())) {
      if (e.value("reason", "") == reason &&
          absl::StrContains(e.value("message", ""), message_part)) {
        return true;
      }
    }
    return false;
  }

  // The pod creations and deletions requested since request number `from` (dry runs apart).
  std::vector<std::string> PodWrites(size_t from) {
    std::vector<std::string> all = api_.Requests();
    std::vector<std::string> writes;
    for (size_t i = from; i < all.size(); ++i) {
      if (absl::StartsWith(all[i], "create pods") || absl::StartsWith(all[i], "delete pods") ||
          absl::StartsWith(all[i], "deletecollection pods")) {
        writes.push_back(all[i]);
      }
    }
    return writes;
  }

  // The Events of `reason` (their messages).
  std::vector<json> Events(const std::string& reason) {
    std::vector<json> out;
    for (const json& e : api_.Objects(Resource::Events())) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }

  void ScaleWorkers(const std::string& job, int replicas) {
    ASSERT_THAT(
        PatchJob(job,
                 json{{"spec", {{"replicaSpecs", {{"Worker", {{"replicas", replicas}}}}}}}}.dump()),
        IsOk());
  }

  // Merge-patches the job `name` (a TFJob where `resource` says so) with the JSON `patch`.
  absl::Status PatchJob(const std::string& name, const std::string& patch,
                        const Resource& resource = Resource::TrainingJobs()) {
    return api_.Patch(resource, "default", name, kube::PatchType::kMerge, patch).status();
  }
  // Sets spec.runPolicy.suspend of the job `name`.
  absl::Status SetSuspend(const std::string& name, bool suspend,
                          const Resource& resource = Resource::TrainingJobs()) {
    return PatchJob(name, json{{"spec", {{"runPolicy", {{"suspend", suspend}}}}}}.dump(), resource);
  }

  // How many requests so far were `request` ("delete pods default/j-worker-0").
  int CountRequests(const std::string& request) {
    std::vector<std::string> all = api_.Requests();
    return static_cast<int>(std::count(all.begin(), all.end(), request));
  }
  // How many requests so far start with `prefix` ("create pods").
  int CountRequestsStartingWith(const std::string& prefix) {
    std::vector<std::string> all = api_.Requests();
    return static_cast<int>(std::count_if(
        all.begin(), all.end(), [&](const std::string& r) { return absl::StartsWith(r, prefix); }));
  }

  // Every pod Running, and the job seen so.
  void RunAll(const std::string& job) {
    for (const std::string& pod : PodNames()) {
      if (!Deleting(pod)) api_.SetPodPhase("default", pod, "Running");
    }
    Settle(job);
  }

  FakeClock clock_;
  kube::testing::FakeApiClient api_{&clock_};
  EventRecorder events_{api_, "kubetrain-operator"};
  std::unique_ptr<Reconciler> reconciler_;
};

// A Kubeflow TFJob in the shape of its examples: a `tensorflow` container per replica type.
inline json TfJob(const std::string& name, json replica_specs, json run_policy = json::object()) {
  for (auto& [type, rs] : replica_specs.items()) {
    json container = {{"name", "tensorflow"}, {"image", "tf/dist-mnist:1"}};
    rs["template"] = {{"spec", {{"containers", json::array({container})}}}};
  }
  json spec = {{"tfReplicaSpecs", replica_specs}};
  if (!run_policy.empty()) spec["runPolicy"] = run_policy;
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "TFJob"},
          {"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", spec}};
}

class TfJobReconcilerTest : public ReconcilerTest {
 protected:
  void CreateTfJob(const json& tfjob) {
    ASSERT_THAT(api_.Create(Resource::TfJobs(), "default", tfjob), IsOk());
  }
  ReconcileResult SettleTfJob(const std::string& name, int n = 3) {
    return SettleKey(std::string(kTfJobKeyPrefix) + "default/" + name, n);
  }
  json TfStatus(const std::string& name) {
    std::optional<json> obj = api_.Object(Resource::TfJobs(), "default", name);
    return obj ? obj->value("status", json::object()) : json::object();
  }
  json LastCondition(const std::string& name) {
    json st = TfStatus(name);
    return st.contains("conditions") ? st["conditions"].back() : json::object();
  }
  std::vector<std::string> ServiceNames() {
    std::vector<std::string> names;
    for (const json& s : api_.Objects(Resource::Services())) {
      if (!s["metadata"].contains("deletionTimestamp")) names.push_back(s["metadata"]["name"]);
    }
    return names;
  }
};

}  // namespace kubetrain::controller::testing
