// What Kueue reads and writes of a job, on the fake API server: runPolicy.managedBy (MultiKueue)
// and status active while pods terminate (quota is released at 0).
#include <gtest/gtest.h>

#include "operator/controller/tests/reconciler_fixture.h"

namespace kubetrain::controller::testing {
namespace {

// Kueue's IsActive: any replicaStatuses[*].active > 0.
bool KueueSeesActive(const json& status) {
  const json statuses = status.value("replicaStatuses", json::object());
  for (const auto& [type, rs] : statuses.items()) {
    if (rs.is_object() && rs.value("active", 0) > 0) return true;
  }
  return false;
}

TEST_F(ReconcilerTest, AJobManagedByMultiKueueGetsNoObjectsAndNoStatus) {
  Create(Job("mk", {{"Worker", Replica(2)}}, {{"managedBy", "kueue.x-k8s.io/multikueue"}}));
  const size_t before = api_.Requests().size();
  Settle("mk");
  EXPECT_TRUE(PodNames().empty());
  EXPECT_TRUE(Status("mk").empty()) << Status("mk");
  for (size_t i = before; i < api_.Requests().size(); ++i) {
    EXPECT_FALSE(absl::StartsWith(api_.Requests()[i], "create")) << api_.Requests()[i];
    EXPECT_FALSE(absl::StartsWith(api_.Requests()[i], "update")) << api_.Requests()[i];
    EXPECT_FALSE(absl::StartsWith(api_.Requests()[i], "patch")) << api_.Requests()[i];
  }
}

TEST_F(ReconcilerTest, AJobManagedByThisOperatorRuns) {
  Create(Job("own", {{"Worker", Replica(1)}}, {{"managedBy", "kubetrain.dev/operator"}}));
  Settle("own");
  EXPECT_TRUE(Pod("own-worker-0").has_value());
  EXPECT_EQ(State("own"), "Created");
}

TEST_F(ReconcilerTest, AnInvalidManagedByIsRefusedNamingTheField) {
  Create(Job("bad", {{"Worker", Replica(1)}}, {{"managedBy", "multikueue"}}));
  Settle("bad");
  EXPECT_EQ(State("bad"), "Failed");
  EXPECT_TRUE(HasEvent("InvalidSpec", "spec.runPolicy.managedBy")) << Status("bad");
}

TEST_F(TfJobReconcilerTest, ATfJobManagedByMultiKueueGetsNoPodsAndNoStatus) {
  CreateTfJob(
      TfJob("mk", {{"Worker", {{"replicas", 2}}}}, {{"managedBy", "kueue.x-k8s.io/multikueue"}}));
  SettleTfJob("mk");
  EXPECT_TRUE(PodNames().empty());
  EXPECT_TRUE(TfStatus("mk").empty()) << TfStatus("mk");
}

TEST_F(TfJobReconcilerTest, ATfJobManagedByKubeflowsOperatorRunsHere) {
  CreateTfJob(TfJob("kf", {{"Worker", {{"replicas", 1}}}},
                    {{"managedBy", "kubeflow.org/training-operator"}}));
  SettleTfJob("kf");
  EXPECT_EQ(PodNames().size(), 1u);
}

// Suspended (Kueue's eviction): the pods are deleted but still terminate, so active stays > 0
// until they are gone; only then may Kueue hand their resources to another job.
TEST_F(ReconcilerTest, ASuspendedJobIsActiveUntilItsPodsAreGone) {
  Create(Job("ev", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("ev");
  RunAll("ev");
  EXPECT_EQ(Status("ev")["replicaStatuses"]["Worker"]["active"], 2);
  ASSERT_THAT(SetSuspend("ev", true), IsOk());
  Settle("ev");
  ASSERT_TRUE(Deleting("ev-worker-0"));
  EXPECT_EQ(State("ev"), "Suspended");
  EXPECT_TRUE(KueueSeesActive(Status("ev"))) << Status("ev");
  EXPECT_EQ(Status("ev")["replicaStatuses"]["Worker"]["active"], 2);
  api_.FinishDeletions();
  Settle("ev");
  EXPECT_FALSE(KueueSeesActive(Status("ev"))) << Status("ev");
}

// A running job whose pod is deleted (a restart): the pod counts until it is gone.
TEST_F(TfJobReconcilerTest, ATerminatingTfJobPodStillCountsAsActive) {
  CreateTfJob(TfJob("tp", {{"Worker", {{"replicas", 2}}}}, {{"suspend", false}}));
  SettleTfJob("tp");
  for (const std::string& pod : PodNames()) api_.SetPodPhase("default", pod, "Running");
  SettleTfJob("tp");
  ASSERT_EQ(TfStatus("tp")["replicaStatuses"]["Worker"]["active"], 2);
  ASSERT_THAT(SetSuspend("tp", true, Resource::TfJobs()), IsOk());
  SettleTfJob("tp");
  EXPECT_EQ(TfStatus("tp")["replicaStatuses"]["Worker"]["active"], 2) << TfStatus("tp");
  api_.FinishDeletions();
  SettleTfJob("tp");
  EXPECT_EQ(TfStatus("tp")["replicaStatuses"]["Worker"].value("active", 0), 0) << TfStatus("tp");
}

}  // namespace
}  // namespace kubetrain::controller::testing

namespace kubetrain::controller::testing {
namespace {

// A running job edited to an invalid spec fails, and its pods do not train on under it.
TEST_F(ReconcilerTest, AJobFailedAsInvalidSpecKeepsNoPodRunning) {
  Create(Job("inv", {{"Worker", Replica(2)}}));
  Settle("inv");
  RunAll("inv");
  ASSERT_THAT(PatchJob("inv", R"({"spec":{"runPolicy":{"backoffLimit":-1}}})"), IsOk());
  Settle("inv");
  EXPECT_EQ(State("inv"), "Failed");
  EXPECT_TRUE(Deleting("inv-worker-0"));
  EXPECT_TRUE(Deleting("inv-worker-1"));
}

}  // namespace
}  // namespace kubetrain::controller::testing

namespace kubetrain::controller::testing {
namespace {

// An elastic job whose bounds are edited to be invalid runs on within its last valid bounds; the
// edit is refused with a condition and a Warning saying why, and a valid edit clears them.
TEST_F(ReconcilerTest, AnInvalidEditOfElasticBoundsIsRefusedAndTheJobRunsOn) {
  json job = Job("el", {{"PS", Replica(1)}, {"Worker", Replica(2)}});
  job["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 3}};
  Create(job);
  Settle("el");
  RunAll("el");
  ASSERT_THAT(PatchJob("el", R"({"spec":{"elastic":{"minReplicas":5}}})"), IsOk());
  Settle("el");
  EXPECT_NE(State("el"), "Failed") << Status("el");
  EXPECT_FALSE(Deleting("el-worker-0"));
  EXPECT_FALSE(Deleting("el-worker-1"));
  EXPECT_EQ(Status("el")["replicaStatuses"]["Worker"]["active"], 2);
  EXPECT_TRUE(HasEvent("InvalidElasticBounds", "keeps minReplicas 1, maxReplicas 3"));
  EXPECT_TRUE(HasEvent("InvalidElasticBounds", "spec.elastic.maxReplicas"));
  ASSERT_EQ(State("el"), "EditRefused");
  // Scaling still works within the kept bounds.
  ScaleWorkers("el", 3);
  Settle("el");
  EXPECT_TRUE(Pod("el-worker-2").has_value());
  // A valid edit is taken, and the refusal cleared.
  ASSERT_THAT(PatchJob("el", R"({"spec":{"elastic":{"minReplicas":2}}})"), IsOk());
  Settle("el");
  EXPECT_NE(State("el"), "EditRefused");
  EXPECT_NE(State("el"), "Failed");
}

}  // namespace
}  // namespace kubetrain::controller::testing
