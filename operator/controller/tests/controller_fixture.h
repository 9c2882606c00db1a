// The controller against a live localkube, shared by the controller's live tests: a fresh
// API server with the TrainingJob CRD, a running controller, and helpers that read what the API
// server holds (objects, status, events) and drive pods as a kubelet would.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/controller.h"
#include "operator/controller/tests/job_builders.h"
#include "operator/kube/testing/localkube.h"
#include "prometheus/registry.h"

namespace kubetrain::controller::testing {

using ::kubetrain::testing::IsOk;

using kube::Resource;
using nlohmann::json;

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(StartServer());
    StartController();
  }

  // localkube with the TrainingJob CRD, and a client of it.
  void StartServer() {
    auto lk = kube::testing::Localkube::Start();
    ASSERT_TRUE(lk.ok()) << lk.status();
    server_ = std::move(*lk);
    auto client = server_->NewClient({.qps = 0});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
    ASSERT_THAT(server_->InstallTrainingJobCrd(*client_), IsOk());
  }

  void TearDown() override { controller_.reset(); }

  void StartController(ReconcilerOptions options = {}, bool tfjob = false) {
    options.progress_interval = absl::Milliseconds(200);
    // The restart back-off in milliseconds: its rule is tested on a fake clock
    // (restart_backoff_test.cc); here pods are replaced as soon as the rule lets them.
    options.restart_backoff = {absl::Milliseconds(20), absl::Milliseconds(200), absl::Minutes(10)};
    controller_ = std::make_unique<Controller>(
        *client_,
        ControllerOptions{
            .namespace_ = "default", .workers = 2, .tfjob = tfjob, .reconciler = options},
        &metrics_);
    ASSERT_THAT(controller_->Start(), IsOk());
  }

  void Create(const json& job) {
    auto created = client_->Create(Resource::TrainingJobs(), "default", job);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  std::optional<json> Get(const Resource& r, const std::string& name) {
    auto obj = client_->Get(r, "default", name);
    if (!obj.ok()) return std::nullopt;
    return *obj;
  }

  json Status(const std::string& job) {
    auto obj = Get(Resource::TrainingJobs(), job);
    return obj ? obj->value("status", json::object()) : json::object();
  }

  std::string State(const std::string& job) {
    json st = Status(job);
    if (!st.contains("conditions") || st["conditions"].empty()) return "";
    return st["conditions"].back()["type"];
  }

  // Merge-patches the TrainingJob `job` with the JSON `patch`.
  absl::Status PatchJob(const std::string& job, const std::string& patch) {
    return client_->Patch(Resource::TrainingJobs(), "default", job, kube::PatchType::kMerge, patch)
        .status();
  }
  // Sets spec.runPolicy.suspend of the TrainingJob `job`.
  absl::Status SetSuspend(const std::string& job, bool suspend) {
    return PatchJob(job, json{{"spec", {{"runPolicy", {{"suspend", suspend}}}}}}.dump());
  }

  // Sets a pod's phase (and its container's exit code) as a kubelet would.
  void SetPod(const std::string& pod, const std::string& phase, std::optional<int> exit_code = {}) {
    json cs = {{"name", "kubetrain"}, {"ready", phase == "Running"},
               {"restartCount", 0},   {"image", "kubetrain/worker:0.1.0"},
               {"imageID", ""},       {"state", json::object()}};
    if (exit_code) {
      cs["state"]["terminated"] = {{"exitCode", *exit_code}};
    } else {
      cs["state"]["running"] = {{"startedAt", "2026-01-01T00:00:00Z"}};
    }
    json patch = {
        {"status", {{"phase", phase}, {"podIP", "127.0.0.1"}, {"containerStatuses", {cs}}}}};
    auto r = client_->Patch(Resource::Pods(), "default", pod, kube::PatchType::kMerge, patch.dump(),
                            "status");
    ASSERT_TRUE(r.ok()) << r.status();
  }

  // status.replicaStatuses.<type>.<field>, or `fallback` while it is not written yet.
  template <typename T>
  T ReplicaField(const std::string& job, const std::string& type, const std::string& field,
                 T fallback) {
    json rs = Status(job).value("replicaStatuses", json::object()).value(type, json::object());
    return rs.value(field, fallback);
  }

  std::string Uid(const std::string& pod) {
    auto obj = Get(Resource::Pods(), pod);
    return obj ? (*obj)["metadata"].value("uid", "") : "";
  }

  std::vector<std::string> EventMessages(const std::string& job) {
    std::vector<std::string> out;
    auto events = client_->ListAll(Resource::Events(), "default", {});
    if (!events.ok()) return out;
    for (const json& e : (*events)["items"]) {
      if (e["involvedObject"].value("name", "") == job) out.push_back(e.value("message", ""));
    }
    return out;
  }

  bool HasEvent(const std::string& job, const std::string& prefix) {
    for (const std::string& m : EventMessages(job)) {
      if (absl::StartsWith(m, prefix)) return true;
    }
    return false;
  }

  // The shared poll (common/testing/eventually.h) with this suite's 10 s default.
  template <typename Pred>
  bool Eventually(Pred pred, absl::Duration timeout = absl::Seconds(10)) {
    return kubetrain::testing::Eventually(pred, timeout);
  }

  std::unique_ptr<kube::testing::Localkube> server_;
  std::unique_ptr<kube::Client> client_;
  prometheus::Registry registry_;
  OperatorMetrics metrics_{registry_};
  std::unique_ptr<Controller> controller_;
};

}  // namespace kubetrain::controller::testing
