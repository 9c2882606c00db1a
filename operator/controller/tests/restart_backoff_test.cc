// Restarts paced by a back-off, a restart ledger that survives a CRD which prunes status fields
// it does not know (Kubeflow's TFJob CRD), late completions and name clashes: on fakes and a
// FakeClock.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "operator/controller/restart_ledger.h"
#include "operator/controller/tests/reconciler_fixture.h"

namespace kubetrain::controller::testing {
namespace {

using ::testing::HasSubstr;

// The Restarting condition's message, or "".
std::string Restarting(const json& status) {
  for (const json& c : status.value("conditions", json::array())) {
    if (c.value("type", "") == "Restarting") return c.value("message", "");
  }
  return "";
}

// A failed pod is replaced once its back-off has run: 10 s after its first failure, doubling
// with each further one; the pause is in the Restarting condition and in a BackOff event, and
// the pass asks to run again when it ends (no pass in between is needed).
TEST_F(ReconcilerTest, AFailedPodIsReplacedOnlyAfterItsBackoff) {
  Create(Job("bk", {{"PS", Replica(1)}, {"Worker", Replica(2)}}, {{"backoffLimit", 10}}));
  Settle("bk");
  RunAll("bk");
  for (int failure = 1; failure <= 3; ++failure) {
    SCOPED_TRACE(failure);
    const absl::Duration pause = absl::Seconds(10 << (failure - 1));
    std::string uid = Uid("bk-worker-1");
    api_.SetPodPhase("default", "bk-worker-1", "Failed", 137);
    Settle("bk");
    const std::string words =
        absl::StrCat("restarting worker-1 in ", absl::FormatDuration(pause), " (back-off after ",
                     failure, failure == 1 ? " failure)" : " failures)");
    EXPECT_THAT(Restarting(Status("bk")), HasSubstr(words));
    EXPECT_TRUE(HasEvent("BackOff", "Back-off " + words + " job=default/bk"));
    api_.FinishDeletions();
    ReconcileResult r = Settle("bk");
    EXPECT_FALSE(Pod("bk-worker-1").has_value()) << "replaced before its back-off ended";
    ASSERT_TRUE(r.requeue_after.has_value());
    EXPECT_EQ(*r.requeue_after, pause);
    clock_.Advance(pause - absl::Seconds(1));
    Settle("bk");
    EXPECT_FALSE(Pod("bk-worker-1").has_value());
    clock_.Advance(absl::Seconds(1));
    Settle("bk");
    ASSERT_TRUE(Pod("bk-worker-1").has_value());
    EXPECT_NE(Uid("bk-worker-1"), uid);
    api_.SetPodPhase("default", "bk-worker-1", "Running");
    Settle("bk");
  }
  EXPECT_EQ(Restarts("bk"), 3);
  // Ten minutes of healthy running since the last back-off: the next failure pauses 10 s again.
  clock_.Advance(absl::Minutes(10));
  api_.SetPodPhase("default", "bk-worker-1", "Failed", 137);
  Settle("bk");
  EXPECT_THAT(Restarting(Status("bk")), HasSubstr("restarting worker-1 in 10s (back-off after "
                                                  "1 failure)"));
}

// The back-off is kept on the job (an annotation), so an operator that restarts does not
// replace the pod early.
TEST_F(ReconcilerTest, TheBackoffOutlivesTheOperator) {
  Create(Job("bo2", {{"Worker", Replica(2)}}));
  Settle("bo2");
  api_.SetPodPhase("default", "bo2-worker-0", "Failed", 137);
  Settle("bo2");
  json job = *api_.Object(Resource::TrainingJobs(), "default", "bo2");
  EXPECT_TRUE(job["metadata"]["annotations"].contains(kBackoffAnnotation));
  NewReconciler();
  api_.FinishDeletions();
  Settle("bo2");
  EXPECT_FALSE(Pod("bo2-worker-0").has_value());
  clock_.Advance(absl::Seconds(10));
  Settle("bo2");
  EXPECT_TRUE(Pod("bo2-worker-0").has_value());
}

// What Kubeflow's own TFJob CRD keeps of a status: its structural schema prunes every other
// field (manifests/base/crds/kubeflow.org_tfjobs.yaml, release-1.9).
void PruneAsKubeflowsCrd(kube::testing::FakeApiClient& api, const std::string& name) {
  json tfjob = *api.Object(Resource::TfJobs(), "default", name);
  json& status = tfjob["status"];
  for (const char* field : {"observedGeneration", "countedFailures", "progress", "elastic"}) {
    status.erase(field);
  }
  const json replicas = status.value("replicaStatuses", json::object());
  for (const auto& [type, rs] : replicas.items()) {
    json kept = json::object();
    for (const char* field : {"active", "failed", "succeeded"}) {
      if (rs.contains(field)) kept[field] = rs[field];
    }
    status["replicaStatuses"][type] = kept;
  }
  tfjob["metadata"].erase("resourceVersion");
  ASSERT_THAT(api.UpdateStatus(Resource::TfJobs(), "default", tfjob), IsOk());
}

// A TFJob under Kubeflow's CRD: the restarts it counted are pruned from its status, but the
// ledger on the job keeps them, so backoffLimit ends it, with Kubeflow's reason.
TEST_F(TfJobReconcilerTest, RestartsCountWhenKubeflowsCrdPrunesThemFromStatus) {
  CreateTfJob(TfJob("kf", {{"Worker", {{"replicas", 2}, {"restartPolicy", "OnFailure"}}}},
                    {{"backoffLimit", 2}}));
  SettleTfJob("kf");
  for (int exit = 1; exit <= 3; ++exit) {
    SCOPED_TRACE(exit);
    api_.SetPodPhase("default", "kf-worker-0", "Failed", 1);
    SettleTfJob("kf");
    PruneAsKubeflowsCrd(api_, "kf");
    if (exit == 3) break;
    api_.FinishDeletions();
    clock_.Advance(absl::Minutes(1));
    SettleTfJob("kf");
    PruneAsKubeflowsCrd(api_, "kf");
    ASSERT_TRUE(Pod("kf-worker-0").has_value());
  }
  json failed = LastCondition("kf");
  EXPECT_EQ(failed["type"], "Failed");
  EXPECT_EQ(failed["reason"], "TFJobFailed");
  EXPECT_THAT(failed["message"].get<std::string>(),
              HasSubstr("has failed because it has reached the specified backoff limit"));
  json job = *api_.Object(Resource::TfJobs(), "default", "kf");
  EXPECT_EQ(job["metadata"]["annotations"][kRestartsAnnotation], R"({"Worker":2})");
}

// A ps that exits 0 after its job succeeded (cleanPodPolicy None keeps it) is counted: status
// says what its pod says.
TEST_F(ReconcilerTest, APsThatSucceedsAfterTheJobIsCounted) {
  Create(Job("late", {{"PS", Replica(1)}, {"Worker", Replica(1)}}, {{"cleanPodPolicy", "None"}}));
  Settle("late");
  RunAll("late");
  api_.SetPodPhase("default", "late-worker-0", "Succeeded", 0);
  Settle("late");
  ASSERT_EQ(State("late"), "Succeeded");
  api_.SetPodPhase("default", "late-ps-0", "Succeeded", 0);
  Settle("late");
  json ps = Status("late")["replicaStatuses"]["PS"];
  EXPECT_EQ(ps.value("succeeded", 0), 1);
  EXPECT_EQ(ps.value("active", -1), 0);
}

// A TFJob named as a running TrainingJob cannot get its Secret or pods: it says so on itself (a
// Warning event and the ReplicaFailure condition, naming the other job), not only in a log.
TEST_F(TfJobReconcilerTest, ATfJobNamedAsATrainingJobSaysWhichOneHoldsTheName) {
  Create(Job("dup", {{"Worker", Replica(1)}}));
  Settle("dup");
  CreateTfJob(TfJob("dup", {{"Worker", {{"replicas", 1}}}}));
  absl::StatusOr<ReconcileResult> r =
      reconciler_->Reconcile(std::string(kTfJobKeyPrefix) + "default/dup");
  EXPECT_FALSE(r.ok());
  json condition = LastCondition("dup");
  EXPECT_EQ(condition["type"], "ReplicaFailure");
  EXPECT_EQ(condition["reason"], "NameConflict");
  EXPECT_THAT(condition["message"].get<std::string>(),
              HasSubstr("TFJob default/dup cannot start: trainingjob.kubetrain.dev/dup in "
                        "namespace default has the same name and owns its Secret "
                        "default/dup-job-secret"));
  EXPECT_TRUE(HasEvent("NameConflict", "trainingjob.kubetrain.dev/dup in namespace default"));
}

}  // namespace
}  // namespace kubetrain::controller::testing
