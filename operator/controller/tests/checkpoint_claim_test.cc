// A job's checkpoint storage on fakes: the claim of spec.checkpoint.volumeClaimTemplate (made
// before the pods, owned by the job unless Retained, never made twice) and the
// CheckpointsNotDurable warning (operator/controller/checkpoint_claim.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/tests/job_builders.h"
#include "operator/controller/tests/reconciler_fixture.h"

namespace kubetrain::controller::testing {
namespace {

const Resource kClaims = {"", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", true};

json ClaimTemplate() { return {{"spec", {{"resources", {{"requests", {{"storage", "1Gi"}}}}}}}}; }

json CheckpointedJob(const std::string& name, json checkpoint) {
  json job = Job(name, {{"PS", Replica(1)}, {"Worker", Replica(2)}});
  job["spec"]["checkpoint"] = std::move(checkpoint);
  return job;
}

std::string JobUid(kube::testing::FakeApiClient& api, const std::string& name) {
  return api.Object(Resource::TrainingJobs(), "default", name)->at("metadata").value("uid", "");
}

// Index of the first request starting with `prefix`, or -1.
int FirstRequest(const std::vector<std::string>& requests, const std::string& prefix) {
  auto it = std::find_if(requests.begin(), requests.end(),
                         [&](const std::string& r) { return absl::StartsWith(r, prefix); });
  return it == requests.end() ? -1 : static_cast<int>(it - requests.begin());
}

TEST_F(ReconcilerTest, TheClaimIsCreatedOwnedByTheJobBeforeItsPods) {
  Create(CheckpointedJob("ck", {{"volumeClaimTemplate", ClaimTemplate()}}));
  Settle("ck");
  std::optional<json> claim = api_.Object(kClaims, "default", "ck-checkpoint");
  ASSERT_TRUE(claim.has_value());
  const json& owner = (*claim)["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["uid"], JobUid(api_, "ck"));
  EXPECT_EQ(owner["kind"], "TrainingJob");
  EXPECT_EQ((*claim)["spec"]["resources"]["requests"]["storage"], "1Gi");
  std::vector<std::string> requests = api_.Requests();
  const int claim_at =
      FirstRequest(requests, "create persistentvolumeclaims default/ck-checkpoint");
  ASSERT_GE(claim_at, 0);
  EXPECT_LT(claim_at, FirstRequest(requests, "create-dry-run pods"));
  EXPECT_LT(claim_at, FirstRequest(requests, "create pods"));
  // The chief mounts it; the Created condition names it.
  EXPECT_EQ((*Pod("ck-worker-0"))["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "ck-checkpoint");
  EXPECT_FALSE((*Pod("ck-worker-1"))["spec"].contains("volumes"));
  EXPECT_TRUE(absl::StrContains(Status("ck")["conditions"][0].value("message", ""),
                                "persistentvolumeclaim=ck-checkpoint"));
  EXPECT_TRUE(Events("CheckpointsNotDurable").empty());
}

TEST_F(ReconcilerTest, AClaimThatExistsIsNotCreatedAgain) {
  Create(CheckpointedJob("ck", {{"volumeClaimTemplate", ClaimTemplate()}}));
  Settle("ck");
  const std::string uid = (*api_.Object(kClaims, "default", "ck-checkpoint"))["metadata"]["uid"];
  api_.SetPodPhase("default", "ck-worker-1", "Running");
  Settle("ck");
  // One create for the job while this operator runs; an operator that restarted finds it.
  EXPECT_EQ(CountRequests("create persistentvolumeclaims default/ck-checkpoint"), 1);
  NewReconciler();
  api_.SetPodPhase("default", "ck-worker-0", "Running");
  Settle("ck");
  EXPECT_EQ((*api_.Object(kClaims, "default", "ck-checkpoint"))["metadata"]["uid"], uid);
  EXPECT_EQ(State("ck"), "Running");
  EXPECT_TRUE(Events("CheckpointClaimReused").empty());  // its own claim: nothing to say
}

TEST_F(ReconcilerTest, ARetainedClaimHasNoOwnerAndALaterJobOfTheNameMountsIt) {
  Create(CheckpointedJob("ck",
                         {{"volumeClaimTemplate", ClaimTemplate()}, {"reclaimPolicy", "Retain"}}));
  Settle("ck");
  std::optional<json> claim = api_.Object(kClaims, "default", "ck-checkpoint");
  ASSERT_TRUE(claim.has_value());
  EXPECT_FALSE((*claim)["metadata"].contains("ownerReferences"));
  const std::string uid = (*claim)["metadata"]["uid"];

  // The job goes (its pods with it) and a job of the same name comes back.
  ASSERT_THAT(api_.Delete(Resource::TrainingJobs(), "default", "ck"), kubetrain::testing::IsOk());
  for (const std::string& pod : PodNames()) {
    ASSERT_THAT(api_.Delete(Resource::Pods(), "default", pod), kubetrain::testing::IsOk());
  }
  // The garbage collector's part: what the job owned goes with it.
  ASSERT_THAT(api_.Delete(Resource::Secrets(), "default", "ck-job-secret"),
              kubetrain::testing::IsOk());
  ASSERT_THAT(api_.Delete(Resource::Services(), "default", "ck"), kubetrain::testing::IsOk());
  api_.FinishDeletions();
  Create(CheckpointedJob("ck",
                         {{"volumeClaimTemplate", ClaimTemplate()}, {"reclaimPolicy", "Retain"}}));
  NewReconciler();
  Settle("ck");
  EXPECT_EQ((*api_.Object(kClaims, "default", "ck-checkpoint"))["metadata"]["uid"], uid);
  EXPECT_EQ(Events("CheckpointClaimReused").size(), 1u);
  ASSERT_TRUE(Pod("ck-worker-0").has_value());
  EXPECT_EQ((*Pod("ck-worker-0"))["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "ck-checkpoint");
}

TEST_F(ReconcilerTest, AClaimOwnedByAnEarlierJobOfTheNameIsWaitedFor) {
  json claim = {{"apiVersion", "v1"},
                {"kind", "PersistentVolumeClaim"},
                {"metadata",
                 {{"name", "ck-checkpoint"},
                  {"namespace", "default"},
                  {"ownerReferences", json::array({{{"apiVersion", "kubetrain.dev/v1"},
                                                    {"kind", "TrainingJob"},
                                                    {"name", "ck"},
                                                    {"uid", "an-earlier-uid"},
                                                    {"controller", true}}})}}},
                {"spec", ClaimTemplate()["spec"]}};
  ASSERT_THAT(api_.Create(kClaims, "default", claim), kubetrain::testing::IsOk());
  Create(CheckpointedJob("ck", {{"volumeClaimTemplate", ClaimTemplate()}}));
  absl::StatusOr<ReconcileResult> r = Pass("ck");
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(absl::StrContains(r.status().message(), "belongs to an earlier job of this name"))
      << r.status();
  EXPECT_TRUE(PodNames().empty());  // its checkpoints are going: no pod may mount them
}

TEST_F(ReconcilerTest, AJobWhoseCheckpointsAreInThePodGetsAWarning) {
  Create(Job("plain", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("plain");
  std::vector<json> warnings = Events("CheckpointsNotDurable");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0]["type"], "Warning");
  EXPECT_TRUE(absl::StrContains(warnings[0].value("message", ""),
                                "Checkpoints of TrainingJob default/plain are inside the pod "
                                "plain-worker-0 and are lost when it is recreated"))
      << warnings[0];
  EXPECT_TRUE(absl::StrContains(warnings[0].value("message", ""), "set spec.checkpoint"));
  // Once per job, not per pass.
  api_.SetPodPhase("default", "plain-worker-0", "Running");
  Settle("plain");
  EXPECT_EQ(Events("CheckpointsNotDurable").size(), 1u);

  Create(CheckpointedJob("kept", {{"claimName", "team-checkpoints"}}));
  Settle("kept");
  EXPECT_EQ(Events("CheckpointsNotDurable").size(), 1u);
  EXPECT_FALSE(api_.Object(kClaims, "default", "kept-checkpoint").has_value());
}

TEST_F(TfJobReconcilerTest, ATfJobWithoutAClaimGetsAWarningAndOneWithTheAnnotationNone) {
  CreateTfJob(TfJob("dist", {{"Worker", {{"replicas", 2}}}}));
  SettleTfJob("dist");
  ASSERT_EQ(Events("CheckpointsNotDurable").size(), 1u);
  EXPECT_TRUE(absl::StrContains(Events("CheckpointsNotDurable")[0].value("message", ""),
                                "kubetrain.dev/checkpoint-claim"));
  json annotated = TfJob("kept", {{"Worker", {{"replicas", 2}}}});
  annotated["metadata"]["annotations"] = {{"kubetrain.dev/checkpoint-claim", "kept-ckpt"}};
  CreateTfJob(annotated);
  SettleTfJob("kept");
  EXPECT_EQ(Events("CheckpointsNotDurable").size(), 1u);
}

}  // namespace
}  // namespace kubetrain::controller::testing
