// Every reconcile rule on fakes (kube::testing::FakeApiClient, a FakeClock): milliseconds per
// rule, beside the live tests (reconciler_live_test.cc) that prove the same against localkube.
#include "operator/controller/reconciler.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/tests/job_builders.h"
#include "operator/controller/tests/reconciler_fixture.h"
#include "operator/kube/testing/fake_api.h"

namespace kubetrain::controller::testing {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
namespace {

TEST_F(ReconcilerTest, NewJobGetsItsServiceSecretAndEveryPod) {
  Create(Job("fm", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("fm");
  EXPECT_EQ(PodNames(), (std::vector<std::string>{"fm-ps-0", "fm-worker-0", "fm-worker-1"}));
  EXPECT_TRUE(api_.Object(Resource::Services(), "default", "fm").has_value());
  EXPECT_TRUE(api_.Object(Resource::Secrets(), "default", "fm-job-secret").has_value());
  EXPECT_EQ(State("fm"), "Created");
  EXPECT_FALSE(Status("fm").value("startTime", "").empty());
  // The Created condition names what the job's first pass created; no event repeats it.
  EXPECT_EQ(Status("fm")["conditions"][0]["message"],
            "TrainingJob default/fm is created: service=fm secret=fm-job-secret "
            "pods=fm-ps-0,fm-worker-0,fm-worker-1");
  // Its one event is the warning that its checkpoints are lost with the chief's pod.
  EXPECT_EQ(api_.Objects(Resource::Events()).size(), Events("CheckpointsNotDurable").size());
  // The templates were admitted by a dry-run create first, once.
  EXPECT_EQ(CountRequestsStartingWith("create-dry-run pods"), 2);
  // One status write for the job's start: it counts the pods it created as active (Pending),
  // so the pass that then sees them in the cache has nothing to write.
  EXPECT_EQ(CountRequests("update trainingjobs default/fm"), 1);
  EXPECT_EQ(Status("fm")["replicaStatuses"]["PS"]["active"], 1);
  EXPECT_EQ(Status("fm")["replicaStatuses"]["Worker"]["active"], 2);
}

TEST_F(ReconcilerTest, RunningChiefMakesTheJobRunning) {
  Create(Job("run", {{"Worker", Replica(2)}}));
  Settle("run");
  api_.SetPodPhase("default", "run-worker-1", "Running");
  Settle("run");
  EXPECT_EQ(State("run"), "Created");  // only the chief's running counts
  api_.SetPodPhase("default", "run-worker-0", "Running");
  Settle("run");
  EXPECT_EQ(State("run"), "Running");
  EXPECT_EQ(Status("run")["replicaStatuses"]["Worker"]["active"], 2);
}

TEST_F(ReconcilerTest, ChiefSuccessEndsTheJobAndCleansUpRunningPods) {
  Create(Job("ok", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("ok");
  api_.SetPodPhase("default", "ok-ps-0", "Running");
  api_.SetLog(
      "default", "ok-worker-0",
      "training...\n{\"event\":\"training_complete\",\"test_accuracy\":0.87,\"steps\":9}\n");
  api_.SetPodPhase("default", "ok-worker-0", "Succeeded", 0);
  // The outcome first: the finishing pass writes it and asks for another pass at once, which
  // cleans up (the outcomes of many jobs that finish together are not paced by their cleanup).
  size_t before = api_.Requests().size();
  absl::StatusOr<ReconcileResult> finishing = Pass("ok");
  ASSERT_THAT(finishing, IsOk());
  std::vector<std::string> all = api_.Requests();
  // Its one write is the outcome (the log read is the chief's summary).
  EXPECT_EQ(
      std::vector<std::string>(all.begin() + static_cast<ptrdiff_t>(before), all.end()),
      (std::vector<std::string>{"log pods default/ok-worker-0", "update trainingjobs default/ok"}));
  EXPECT_TRUE(finishing->requeue_later);
  EXPECT_EQ(State("ok"), "Succeeded");
  EXPECT_FALSE(Deleting("ok-ps-0"));
  EXPECT_EQ(Status("ok")["replicaStatuses"]["PS"]["active"], 0);  // as the cleanup leaves it
  size_t requests = api_.Requests().size();
  Settle("ok");
  // The next pass: the outcome's event, one deletecollection for both running pods, the
  // Service; no status write.
  all = api_.Requests();
  std::vector<std::string> cleanup(all.begin() + static_cast<ptrdiff_t>(requests), all.end());
  EXPECT_EQ(cleanup, (std::vector<std::string>{
                         "create events default/ok.10",
                         "deletecollection pods default/?labelSelector=kubetrain.dev/job-name=ok,"
                         "app.kubernetes.io/managed-by=kubetrain-operator&fieldSelector=status."
                         "phase!=Succeeded,status.phase!=Failed",
                         "delete services default/ok"}));
  EXPECT_EQ(State("ok"), "Succeeded");
  EXPECT_FALSE(Status("ok").value("completionTime", "").empty());
  EXPECT_TRUE(Deleting("ok-ps-0"));
  EXPECT_TRUE(Deleting("ok-worker-1"));
  EXPECT_FALSE(Deleting("ok-worker-0"));  // finished pods stay (cleanPodPolicy Running)
  EXPECT_FALSE(api_.Object(Resource::Services(), "default", "ok").has_value());
  EXPECT_EQ(Status("ok")["progress"].value("accuracy", 0.0), 0.87);
  EXPECT_TRUE(HasEvent("JobSucceeded",
                       "TrainingJob succeeded job=default/ok; cleanPodPolicy Running: deleting 2 "
                       "pods and the Service"));
  EXPECT_FALSE(HasEvent("Deleted", ""));  // the cleanup was announced by JobSucceeded
}

// RBAC without `delete` on pods: the job still shows its outcome, the refusal is a Warning event
// on the job (not only a log line), the pass fails and is retried, and once the grant is back
// the pods go.
TEST_F(ReconcilerTest, AForbiddenPodDeleteIsAnEventAndIsRetried) {
  Create(Job("fd", {{"PS", Replica(1)}, {"Worker", Replica(1)}}));
  Settle("fd");
  api_.SetPodPhase("default", "fd-ps-0", "Running");
  api_.SetPodPhase("default", "fd-worker-0", "Succeeded", 0);
  absl::Status forbidden = absl::PermissionDeniedError(
      "DELETE /api/v1/namespaces/default/pods/fd-ps-0: pods \"fd-ps-0\" is forbidden: User "
      "\"system:serviceaccount:kubetrain-system:kubetrain-operator\" cannot delete resource "
      "\"pods\" in API group \"\" in the namespace \"default\"");
  api_.FailNext("delete", "pods", forbidden, 1);
  EXPECT_THAT(Pass("fd"), IsOk());  // the outcome
  EXPECT_THAT(Pass("fd"), StatusIs(absl::StatusCode::kPermissionDenied,
                                   ::testing::HasSubstr("cannot delete resource")));
  EXPECT_TRUE(HasEvent("FailedDeletePod", "cannot delete resource \"pods\""));
  EXPECT_EQ(State("fd"), "Succeeded");  // the outcome does not wait for the cleanup
  Settle("fd");
  EXPECT_TRUE(Deleting("fd-ps-0"));
  EXPECT_EQ(State("fd"), "Succeeded");
}

// A Role from before the operator used deletecollection: the cleanup falls back to deleting pod
// by pod, and does not ask again in that namespace.
TEST_F(ReconcilerTest, ARoleWithoutDeleteCollectionCleansUpPodByPod) {
  for (const std::string name : {"dc1", "dc2"}) {
    Create(Job(name, {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
    Settle(name);
    api_.SetPodPhase("default", name + "-ps-0", "Running");
    api_.SetPodPhase("default", name + "-worker-1", "Running");
  }
  api_.FailNext("deletecollection", "pods",
                absl::PermissionDeniedError("pods is forbidden: User \"system:serviceaccount:"
                                            "kubetrain-system:kubetrain-operator\" cannot "
                                            "deletecollection resource \"pods\""));
  for (const std::string name : {"dc1", "dc2"}) {
    api_.SetPodPhase("default", name + "-worker-0", "Succeeded", 0);
    Settle(name);
    EXPECT_EQ(State(name), "Succeeded");
    EXPECT_TRUE(Deleting(name + "-ps-0")) << name;
    EXPECT_TRUE(Deleting(name + "-worker-1")) << name;
  }
  EXPECT_EQ(CountRequestsStartingWith("deletecollection pods"), 1);
  EXPECT_EQ(CountRequestsStartingWith("delete pods"), 4);
  EXPECT_FALSE(HasEvent("FailedDeletePod", ""));  // the per-pod deletes were allowed
}

TEST_F(ReconcilerTest, AFinishedJobIsNotStartedAgainFromAStaleCache) {
  Create(Job("st", {{"Worker", Replica(1)}}));
  Settle("st");
  api_.SetPodPhase("default", "st-worker-0", "Running");
  Settle("st");
  api_.Freeze();  // the job cache will not see the coming status write
  api_.SetPodPhase("default", "st-worker-0", "Succeeded", 0);
  api_.Thaw();
  Settle("st");
  ASSERT_EQ(State("st"), "Succeeded");
  api_.FinishDeletions();
  // The pod cache has caught up (the pod is gone) but the job cache still shows it running:
  // the reconciler's own write wins, and nothing is created again.
  json stale = *api_.Object(Resource::TrainingJobs(), "default", "st");
  api_.Freeze();
  Settle("st");
  api_.Thaw();
  EXPECT_EQ(State("st"), "Succeeded");
  EXPECT_TRUE(Pod("st-worker-0").has_value());  // not deleted, not created again
  EXPECT_EQ(stale["status"]["conditions"].back()["type"], "Succeeded");
}

TEST_F(ReconcilerTest, ExitCodePolicyFailsTheJobOnAProgramError) {
  Create(Job("bad", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("bad");
  api_.SetPodPhase("default", "bad-worker-1", "Failed", 1);
  Settle("bad");
  EXPECT_EQ(State("bad"), "Failed");
  json last = Status("bad")["conditions"].back();
  EXPECT_EQ(last["reason"], "TrainingJobFailed");
  EXPECT_EQ(last["message"],
            "TrainingJob default/bad has failed because pod bad-worker-1 exited with code 1 and "
            "restartPolicy ExitCode does not retry it.");
  EXPECT_TRUE(HasEvent("ExitedWithCode", "pod=bad-worker-1 exit_code=1"));
  EXPECT_TRUE(Deleting("bad-ps-0"));
}

TEST_F(ReconcilerTest, KilledPodIsRestartedAndCountedOnce) {
  Create(Job("k", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("k");
  std::string uid = Uid("k-worker-1");
  api_.SetPodPhase("default", "k-worker-1", "Failed", 137);
  Settle("k");
  EXPECT_EQ(Restarts("k"), 1);
  EXPECT_TRUE(Deleting("k-worker-1"));
  EXPECT_EQ(State("k"), "Restarting");
  EXPECT_TRUE(HasEvent("RestartedPod", "pod=k-worker-1 exit_code=137 restarts=1"));
  Settle("k");  // still terminating: neither counted again nor replaced
  EXPECT_EQ(Restarts("k"), 1);
  EXPECT_EQ(Uid("k-worker-1"), uid);
  api_.FinishDeletions();
  clock_.Advance(absl::Seconds(10));  // its back-off (restart_backoff_test.cc)
  Settle("k");
  EXPECT_NE(Uid("k-worker-1"), uid);
  EXPECT_FALSE(Uid("k-worker-1").empty());
  EXPECT_EQ(Restarts("k"), 1);
}

TEST_F(ReconcilerTest, ADeletionTheCacheHasNotSeenIsNotCountedAgain) {
  Create(Job("sc", {{"Worker", Replica(2)}}));
  Settle("sc");
  api_.SetPodPhase("default", "sc-worker-1", "Failed", 137);
  api_.Freeze();  // neither the deletion nor the status write reaches the caches
  Settle("sc");
  Settle("sc");
  api_.Thaw();
  EXPECT_EQ(Restarts("sc"), 1);
  EXPECT_EQ(CountRequests("delete pods default/sc-worker-1"), 1);
}

// A finished job's cleanup deletes its Service once: a pass that runs before the Service cache
// has seen it go (a status write, a pod event) does not send a second delete answered 404.
TEST_F(ReconcilerTest, AServiceTheCacheStillShowsIsNotDeletedAgain) {
  Create(Job("sv", {{"Worker", Replica(1)}}));
  Settle("sv");
  api_.SetPodPhase("default", "sv-worker-0", "Succeeded", 0);
  api_.Freeze();  // no cache sees the Service go, nor the job's status write
  Settle("sv");
  Settle("sv");
  api_.Thaw();
  Settle("sv");
  ASSERT_EQ(State("sv"), "Succeeded");
  EXPECT_EQ(CountRequests("delete services default/sv"), 1);
}

TEST_F(ReconcilerTest, ARestartCountedBeforeTheOperatorDiedIsNotCountedAgain) {
  Create(Job("od", {{"Worker", Replica(2)}}));
  Settle("od");
  api_.SetPodPhase("default", "od-worker-1", "Failed", 137);
  // The count is written, then the operator dies before the pod is deleted.
  api_.FailNext("delete", "pods", absl::UnavailableError("connection refused"));
  EXPECT_THAT(Pass("od"), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Restarts("od"), 1);
  EXPECT_FALSE(Deleting("od-worker-1"));
  NewReconciler();
  Settle("od");
  EXPECT_EQ(Restarts("od"), 1);
  EXPECT_TRUE(Deleting("od-worker-1"));
}

TEST_F(ReconcilerTest, TheCountIsWrittenBeforeAnyPodIsDeleted) {
  Create(Job("cw", {{"Worker", Replica(2)}}));
  Settle("cw");
  api_.SetPodPhase("default", "cw-worker-1", "Failed", 137);
  api_.FailNext("update", "trainingjobs", absl::AbortedError("the object has been modified"));
  EXPECT_THAT(Pass("cw"), StatusIs(absl::StatusCode::kAborted));
  EXPECT_FALSE(Deleting("cw-worker-1"));  // nothing done: the next pass decides again
  EXPECT_EQ(Restarts("cw"), 0);
  Settle("cw");
  EXPECT_EQ(Restarts("cw"), 1);
  EXPECT_TRUE(Deleting("cw-worker-1"));
}

TEST_F(ReconcilerTest, BackoffLimitFailsTheJob) {
  Create(
      Job("bo", {{"PS", Replica(1, "OnFailure")}, {"Worker", Replica(1)}}, {{"backoffLimit", 1}}));
  Settle("bo");
  api_.SetPodPhase("default", "bo-ps-0", "Failed", 2);
  Settle("bo");
  api_.FinishDeletions();
  Settle("bo");
  api_.SetPodPhase("default", "bo-worker-0", "Failed", 137);
  Settle("bo");
  EXPECT_EQ(State("bo"), "Failed");
  EXPECT_EQ(Status("bo")["conditions"].back()["reason"], "BackoffLimitExceeded");
  EXPECT_TRUE(absl::StrContains(Status("bo")["conditions"].back().value("message", ""),
                                "last failure: pod bo-worker-0 exited with code 137 (SIGKILL)"));
}

TEST_F(ReconcilerTest, RestartScopeJobRestartsEveryPodOnceEvenAFinishedOne) {
  Create(Job("sj", {{"Worker", Replica(2, "OnFailure")}}, {{"restartScope", "Job"}}));
  Settle("sj");
  api_.SetPodPhase("default", "sj-worker-1", "Succeeded", 0);
  Settle("sj");
  EXPECT_EQ(Status("sj")["replicaStatuses"]["Worker"]["completedIndexes"], "1");
  api_.SetPodPhase("default", "sj-worker-0", "Failed", 137);
  Settle("sj");
  EXPECT_EQ(Restarts("sj"), 1);
  EXPECT_TRUE(Deleting("sj-worker-0"));
  EXPECT_TRUE(Deleting("sj-worker-1"));
  EXPECT_EQ(Status("sj")["replicaStatuses"]["Worker"].value("completedIndexes", ""), "");
  EXPECT_TRUE(HasEvent("RestartedJob", "failed=sj-worker-0"));
  api_.FinishDeletions();
  clock_.Advance(absl::Seconds(10));  // the job's back-off
  Settle("sj");
  EXPECT_EQ(PodNames(), (std::vector<std::string>{"sj-worker-0", "sj-worker-1"}));
  EXPECT_FALSE(Deleting("sj-worker-1"));
  EXPECT_EQ(Restarts("sj"), 1);
}

TEST_F(ReconcilerTest, AllWorkersCountsACompletionWhosePodIsGone) {
  json job = Job("aw", {{"Worker", Replica(2)}});
  job["spec"]["successPolicy"] = "AllWorkers";
  Create(job);
  Settle("aw");
  api_.SetPodPhase("default", "aw-worker-1", "Succeeded", 0);
  Settle("aw");
  ASSERT_THAT(api_.Delete(Resource::Pods(), "default", "aw-worker-1"), IsOk());  // pod GC
  api_.FinishDeletions();
  Settle("aw");
  EXPECT_FALSE(Pod("aw-worker-1").has_value());  // never run again
  EXPECT_NE(State("aw"), "Succeeded");
  api_.SetPodPhase("default", "aw-worker-0", "Succeeded", 0);
  Settle("aw");
  EXPECT_EQ(State("aw"), "Succeeded");
}

TEST_F(ReconcilerTest, ActiveDeadlineFiresOnTimeWithoutAnotherEvent) {
  Create(Job("dl", {{"Worker", Replica(1)}}, {{"activeDeadlineSeconds", 60}}));
  ReconcileResult r = Settle("dl");
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_EQ(*r.requeue_after, absl::Seconds(60));
  clock_.Advance(absl::Seconds(59));
  r = Settle("dl");
  EXPECT_EQ(*r.requeue_after, absl::Seconds(1));
  EXPECT_NE(State("dl"), "Failed");
  clock_.Advance(absl::Seconds(1));
  Settle("dl");
  EXPECT_EQ(State("dl"), "Failed");
  EXPECT_EQ(Status("dl")["conditions"].back()["reason"], "DeadlineExceeded");
  EXPECT_TRUE(Deleting("dl-worker-0"));
}

TEST_F(ReconcilerTest, TtlDeletesTheFinishedJobOnTime) {
  Create(Job("ttl", {{"Worker", Replica(1)}}, {{"ttlSecondsAfterFinished", 30}}));
  Settle("ttl");
  api_.SetPodPhase("default", "ttl-worker-0", "Succeeded", 0);
  ReconcileResult r = Settle("ttl");
  ASSERT_EQ(State("ttl"), "Succeeded");
  ASSERT_TRUE(r.requeue_after.has_value());
  EXPECT_EQ(*r.requeue_after, absl::Seconds(30));
  clock_.Advance(absl::Seconds(30));
  Settle("ttl");
  EXPECT_FALSE(api_.Object(Resource::TrainingJobs(), "default", "ttl").has_value());
}

TEST_F(ReconcilerTest, SuspendDeletesActivePodsAndResumeRestartsTheDeadline) {
  Create(Job("sus", {{"PS", Replica(1)}, {"Worker", Replica(1)}}, {{"activeDeadlineSeconds", 60}}));
  Settle("sus");
  ASSERT_THAT(SetSuspend("sus", true), IsOk());
  Settle("sus");
  EXPECT_EQ(State("sus"), "Suspended");
  EXPECT_TRUE(Deleting("sus-ps-0"));
  EXPECT_TRUE(Deleting("sus-worker-0"));
  api_.FinishDeletions();
  clock_.Advance(absl::Seconds(120));  // suspended longer than the deadline
  ASSERT_THAT(SetSuspend("sus", false), IsOk());
  ReconcileResult r = Settle("sus");
  EXPECT_TRUE(Pod("sus-worker-0").has_value());
  EXPECT_NE(State("sus"), "Failed");
  EXPECT_EQ(r.requeue_after, absl::Seconds(60));
  EXPECT_TRUE(HasEvent("JobResumed", "job=default/sus"));
}

// A large job's Created condition names 32 pods and counts the rest: every status write carries
// the message, so it stays bounded whatever the job's size.
TEST_F(ReconcilerTest, TheCreatedConditionOfALargeJobNamesSomePodsAndCountsThem) {
  Create(Job("big", {{"Worker", Replica(40)}}));
  Settle("big");
  EXPECT_EQ(PodNames().size(), 40u);
  std::string message = Status("big")["conditions"][0]["message"];
  EXPECT_TRUE(
      absl::StartsWith(message,
                       "TrainingJob default/big is created: service=big secret=big-job-secret "
                       "pods=big-worker-0,big-worker-1,big-worker-2,"))
      << message;
  EXPECT_TRUE(absl::EndsWith(message, ",big-worker-31,… (40 in all)")) << message;
  EXPECT_EQ(std::count(message.begin(), message.end(), ','), 32) << message;
}

TEST_F(ReconcilerTest, ARefusedPodIsAnEventAndAConditionAndIsRetried) {
  Create(Job("rf", {{"Worker", Replica(1)}}));
  absl::Status forbidden = absl::PermissionDeniedError(
      "POST /api/v1/namespaces/default/pods: pods \"rf-worker-0\" is forbidden: exceeded quota");
  api_.FailNext("create", "pods", forbidden, 2);  // the dry run, then the real create
  EXPECT_THAT(Pass("rf"), StatusIs(absl::StatusCode::kPermissionDenied,
                                   ::testing::HasSubstr("exceeded quota")));
  EXPECT_EQ(State("rf"), "ReplicaFailure");
  EXPECT_EQ(Status("rf")["conditions"].back()["reason"], "FailedCreatePod");
  EXPECT_TRUE(HasEvent("FailedCreatePod", "exceeded quota"));
  // The status that reported the refusal named what the pass had created before it.
  EXPECT_EQ(Status("rf")["conditions"][0]["message"],
            "TrainingJob default/rf is created: service=rf secret=rf-job-secret");
  EXPECT_FALSE(HasEvent("Created", ""));
  Settle("rf");  // whatever refused it has cleared
  EXPECT_TRUE(Pod("rf-worker-0").has_value());
  EXPECT_NE(State("rf"), "ReplicaFailure");
  // A later pass's creates are an event: the condition keeps its first words.
  EXPECT_TRUE(HasEvent("Created", "Created pod=rf-worker-0"));
  EXPECT_EQ(Status("rf")["conditions"][0]["message"],
            "TrainingJob default/rf is created: service=rf secret=rf-job-secret");
}

TEST_F(ReconcilerTest, ATemplateTheServerCallsInvalidFailsTheJob) {
  Create(Job("inv", {{"Worker", Replica(1)}}));
  api_.FailNext("create", "pods",
                absl::InvalidArgumentError("POST /api/v1/namespaces/default/pods: Pod "
                                           "\"inv-worker-0\" is invalid: spec.containers[0]"
                                           ".resources.requests[cpu]: Invalid value: \"lots\""));
  Settle("inv");
  EXPECT_EQ(State("inv"), "Failed");
  EXPECT_EQ(Status("inv")["conditions"].back()["reason"], "InvalidSpec");
  EXPECT_TRUE(PodNames().empty());
}

TEST_F(ReconcilerTest, AnInvalidSpecFailsTheJobWithTheField) {
  json job = Job("iv", {{"Worker", Replica(1)}});
  job["spec"]["replicaSpecs"]["Worker"]["replicas"] = -1;
  Create(job);
  Settle("iv");
  EXPECT_EQ(State("iv"), "Failed");
  json last = Status("iv")["conditions"].back();
  EXPECT_EQ(last["reason"], "InvalidSpec");
  EXPECT_TRUE(absl::StrContains(last.value("message", ""), "replicas")) << last;
  EXPECT_TRUE(PodNames().empty());
}

TEST_F(ReconcilerTest, AChangedClusterSpecRestartsEveryPodWithoutCountingIt) {
  Create(Job("cs", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("cs");
  ASSERT_THAT(PatchJob("cs", R"({"spec":{"replicaSpecs":{"Worker":{"replicas":3}}}})"), IsOk());
  Settle("cs");
  EXPECT_TRUE(Deleting("cs-ps-0"));
  EXPECT_TRUE(Deleting("cs-worker-0"));
  EXPECT_EQ(Status("cs")["conditions"].back()["reason"], "ClusterSpecChanged");
  api_.FinishDeletions();
  Settle("cs");
  EXPECT_EQ(PodNames(),
            (std::vector<std::string>{"cs-ps-0", "cs-worker-0", "cs-worker-1", "cs-worker-2"}));
  EXPECT_EQ(Restarts("cs"), 0);
}

// An elastic job (spec.elastic): PS 1, `workers` Workers between `min` and `max`.
json ElasticJob(const std::string& name, int workers, int min, int max,
                json run_policy = json::object()) {
  json job = Job(name, {{"PS", Replica(1)}, {"Worker", Replica(workers)}}, std::move(run_policy));
  job["spec"]["elastic"] = {{"minReplicas", min}, {"maxReplicas", max}};
  return job;
}

// Scaling up creates the new Worker and nothing else: no pod is deleted or restarted, and the
// new pod's TF_CONFIG is the job's cluster at its creation.
TEST_F(ReconcilerTest, ElasticScaleUpCreatesOnlyTheNewWorker) {
  Create(ElasticJob("up", 2, 1, 4));
  Settle("up");
  RunAll("up");
  ASSERT_EQ(State("up"), "Running");
  std::vector<std::string> uids = {Uid("up-ps-0"), Uid("up-worker-0"), Uid("up-worker-1")};
  ScaleWorkers("up", 3);
  size_t before = api_.Requests().size();
  Settle("up");
  EXPECT_EQ(PodWrites(before), (std::vector<std::string>{"create pods default/up-worker-2"}));
  EXPECT_EQ(std::vector<std::string>({Uid("up-ps-0"), Uid("up-worker-0"), Uid("up-worker-1")}),
            uids);
  EXPECT_EQ(State("up"), "Running");
  EXPECT_EQ(Restarts("up"), 0);
  EXPECT_EQ(Restarts("up", "PS"), 0);
  EXPECT_TRUE(HasEvent("Scaled", "Scaled Worker replicas 2 → 3 job=default/up"));
  EXPECT_TRUE(HasEvent("Created", "Created pod=up-worker-2"));
  EXPECT_FALSE(HasEvent("ClusterSpecChanged", ""));
  json elastic = Status("up")["elastic"];
  EXPECT_EQ(elastic["targetWorkers"], 3);
  EXPECT_FALSE(elastic.value("lastScaleTime", "").empty());
  json pod = *Pod("up-worker-2");
  std::string tf_config;
  std::string elastic_env;
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "TF_CONFIG") tf_config = e["value"];
    if (e["name"] == "KUBETRAIN_ELASTIC") elastic_env = e["value"];
  }
  EXPECT_EQ(elastic_env, "1");
  EXPECT_EQ(json::parse(tf_config)["cluster"]["worker"].size(), 3u);
  RunAll("up");
  EXPECT_EQ(Status("up")["replicaStatuses"]["Worker"]["active"], 3);
  EXPECT_EQ(Status("up")["elastic"]["liveWorkers"], 3);
}

// Scaling down deletes the Workers above the count; their ends are no failures, nothing else
// restarts, and the job keeps running.
TEST_F(ReconcilerTest, ElasticScaleDownDeletesTheSurplusWorkersWithoutFailing) {
  Create(ElasticJob("down", 3, 1, 4, {{"backoffLimit", 0}, {"restartScope", "Job"}}));
  Settle("down");
  RunAll("down");
  ScaleWorkers("down", 1);
  size_t before = api_.Requests().size();
  Settle("down");
  EXPECT_EQ(PodWrites(before), (std::vector<std::string>{"delete pods default/down-worker-1",
                                                         "delete pods default/down-worker-2"}));
  EXPECT_TRUE(HasEvent("Scaled", "Scaled Worker replicas 3 → 1"));
  EXPECT_TRUE(HasEvent("Deleted", "Deleted pods=down-worker-1,down-worker-2 reason=ScaledDown"));
  // The leaving Workers exit on SIGTERM before their pods are gone.
  api_.SetPodPhase("default", "down-worker-1", "Failed", 143);
  api_.SetPodPhase("default", "down-worker-2", "Failed", 1);
  Settle("down");
  api_.FinishDeletions();
  Settle("down");
  EXPECT_EQ(PodNames(), (std::vector<std::string>{"down-ps-0", "down-worker-0"}));
  EXPECT_EQ(State("down"), "Running");
  json worker = Status("down")["replicaStatuses"]["Worker"];
  EXPECT_EQ(worker["failed"], 0);
  EXPECT_EQ(worker["restarts"], 0);
  EXPECT_EQ(worker["active"], 1);
  EXPECT_EQ(Status("down")["elastic"]["liveWorkers"], 1);
  EXPECT_EQ(Status("down")["elastic"]["targetWorkers"], 1);
}

// A Worker deleted while the job still wants it is recreated: a WorkerLost event, no restart
// counted (backoffLimit 0 would fail the job) and no restart of the job under restartScope Job.
// The pods a pass creates reach the cache later: the next pass must not take the Workers it
// does not see yet for lost ones.
TEST_F(ReconcilerTest, ElasticWorkersTheCacheHasNotSeenYetAreNotLost) {
  Create(ElasticJob("lag", 2, 1, 4));
  api_.Freeze();  // the caches will not see the pods the passes create
  ASSERT_THAT(Pass("lag"), IsOk());
  ASSERT_THAT(Pass("lag"), IsOk());
  ASSERT_THAT(Pass("lag"), IsOk());
  api_.Thaw();
  Settle("lag");
  RunAll("lag");
  Settle("lag");
  EXPECT_FALSE(HasEvent("WorkerLost", ""));
  EXPECT_EQ(Restarts("lag"), 0);
}

TEST_F(ReconcilerTest, ElasticDeletedWorkerIsRecreatedWithoutARestart) {
  Create(ElasticJob("lost", 2, 1, 4, {{"backoffLimit", 0}, {"restartScope", "Job"}}));
  Settle("lost");
  RunAll("lost");
  std::string uid = Uid("lost-worker-1");
  ASSERT_THAT(api_.Delete(Resource::Pods(), "default", "lost-worker-1"), IsOk());
  size_t before = api_.Requests().size();
  Settle("lost");
  EXPECT_TRUE(
      HasEvent("WorkerLost", "Lost lost-worker-1 (deleted); 1 of 2 workers live, recreating"));
  api_.FinishDeletions();
  Settle("lost");
  Settle("lost");
  EXPECT_EQ(PodWrites(before), (std::vector<std::string>{"create pods default/lost-worker-1"}));
  EXPECT_NE(Uid("lost-worker-1"), uid);
  EXPECT_FALSE(Deleting("lost-ps-0"));
  EXPECT_EQ(Restarts("lost"), 0);
  EXPECT_EQ(State("lost"), "Running");
  ASSERT_EQ(Events("WorkerLost").size(), 1u);  // one event for the loss, however many passes
  EXPECT_EQ(Events("WorkerLost")[0]["count"], 1);
}

// An evicted or preempted Worker is a lost one, not a failure: the operator deletes the failed
// pod and recreates it, uncounted, without restarting the job.
TEST_F(ReconcilerTest, ElasticEvictedOrPreemptedWorkerIsRecreatedUncounted) {
  Create(ElasticJob("ev", 2, 1, 4, {{"backoffLimit", 0}, {"restartScope", "Job"}}));
  Settle("ev");
  RunAll("ev");
  api_.SetPodPhase("default", "ev-worker-1", "Failed");
  ASSERT_THAT(api_.Patch(Resource::Pods(), "default", "ev-worker-1", kube::PatchType::kMerge,
                         R"({"status":{"reason":"Evicted"}})"),
              IsOk());
  size_t before = api_.Requests().size();
  Settle("ev");
  EXPECT_EQ(PodWrites(before), (std::vector<std::string>{"delete pods default/ev-worker-1"}));
  EXPECT_TRUE(HasEvent("WorkerLost", "Lost ev-worker-1 (Evicted); 1 of 2 workers live"));
  EXPECT_EQ(Restarts("ev"), 0);
  EXPECT_EQ(Status("ev")["replicaStatuses"]["Worker"]["failed"], 0);
  api_.FinishDeletions();
  Settle("ev");
  EXPECT_TRUE(Pod("ev-worker-1").has_value());
  // Preempted by the scheduler: its exit code is the program's, the DisruptionTarget condition
  // says why.
  RunAll("ev");
  api_.SetPodPhase("default", "ev-worker-0", "Failed", 1);
  ASSERT_THAT(api_.Patch(Resource::Pods(), "default", "ev-worker-0", kube::PatchType::kMerge,
                         R"({"status":{"conditions":[{"type":"DisruptionTarget","status":"True",
                             "reason":"PreemptionByScheduler"}]}})"),
              IsOk());
  Settle("ev");
  EXPECT_TRUE(Deleting("ev-worker-0"));
  EXPECT_TRUE(HasEvent("WorkerLost", "Lost ev-worker-0 (PreemptionByScheduler)"));
  api_.FinishDeletions();
  Settle("ev");
  EXPECT_TRUE(Pod("ev-worker-0").has_value());
  EXPECT_FALSE(Deleting("ev-ps-0"));
  EXPECT_EQ(Restarts("ev"), 0);
  EXPECT_NE(State("ev"), "Failed");
}

// `kubectl scale` past maxReplicas: a Warning and the ScalingLimited condition naming the field
// and the bounds, the job kept at the bound, never failed; back within the bounds, both clear.
TEST_F(ReconcilerTest, ElasticReplicasBeyondMaxAreReportedAndClamped) {
  Create(ElasticJob("cl", 2, 1, 3));
  Settle("cl");
  RunAll("cl");
  ScaleWorkers("cl", 5);
  Settle("cl");
  Settle("cl");
  EXPECT_EQ(PodNames(),
            (std::vector<std::string>{"cl-ps-0", "cl-worker-0", "cl-worker-1", "cl-worker-2"}));
  const std::string message =
      "TrainingJob default/cl: spec.replicaSpecs.Worker.replicas: must be between "
      "spec.elastic.minReplicas (1) and spec.elastic.maxReplicas (3), got 5; kept at 3 until it "
      "is set within the bounds";
  ASSERT_EQ(Events("TooManyReplicas").size(), 1u);
  EXPECT_EQ(Events("TooManyReplicas")[0]["type"], "Warning");
  EXPECT_EQ(Events("TooManyReplicas")[0]["message"], message);
  EXPECT_EQ(Events("TooManyReplicas")[0]["count"], 1);  // not repeated on every pass
  json limited;
  json status = Status("cl");
  for (const json& c : status["conditions"]) {
    if (c["type"] == "ScalingLimited") limited = c;
  }
  EXPECT_EQ(status["conditions"].back()["type"], "ScalingLimited");  // STATE shows it
  EXPECT_EQ(limited.value("status", ""), "True");
  EXPECT_EQ(limited.value("reason", ""), "TooManyReplicas");
  EXPECT_EQ(limited.value("message", ""), message);
  EXPECT_EQ(Status("cl")["elastic"]["targetWorkers"], 3);
  EXPECT_TRUE(HasEvent("Scaled", "Scaled Worker replicas 2 → 3"));
  for (const json& c : status["conditions"]) EXPECT_NE(c["type"], "Failed");
  ScaleWorkers("cl", 2);
  Settle("cl");
  status = Status("cl");
  for (const json& c : status["conditions"]) EXPECT_NE(c["type"], "ScalingLimited");
  EXPECT_EQ(State("cl"), "Running");
  EXPECT_TRUE(Deleting("cl-worker-2"));
}

// Only the Workers are elastic: a new number of parameter servers still restarts the job.
TEST_F(ReconcilerTest, ElasticJobStillRestartsWhenItsPsChange) {
  Create(ElasticJob("ps", 2, 1, 4));
  Settle("ps");
  ASSERT_THAT(PatchJob("ps", R"({"spec":{"replicaSpecs":{"PS":{"replicas":2}}}})"), IsOk());
  Settle("ps");
  EXPECT_TRUE(Deleting("ps-worker-0"));
  EXPECT_EQ(Status("ps")["conditions"].back()["reason"], "ClusterSpecChanged");
}

TEST_F(ReconcilerTest, ADeletedJobLeavesNothingToDo) {
  Create(Job("gone", {{"Worker", Replica(1)}}));
  Settle("gone");
  ASSERT_THAT(api_.Delete(Resource::TrainingJobs(), "default", "gone"), IsOk());
  size_t before = api_.Requests().size();
  ReconcileResult r = Settle("gone");
  EXPECT_FALSE(r.requeue_after.has_value());
  EXPECT_EQ(api_.Requests().size(), before);  // the garbage collector removes what it owned
}

// One controller, two front doors: a TFJob gets Kubeflow's objects (a Service per replica, pods
// named and labelled as Kubeflow names them, owned by the TFJob), its status in TFJob's form, and
// the TrainingJob rules: the Master decides success, and Services go when it is over.
TEST_F(TfJobReconcilerTest, ATfJobRunsOnKubeflowsObjectsAndSucceedsWithItsMaster) {
  CreateTfJob(TfJob(
      "tf",
      {{"Master", {{"replicas", 1}}}, {"PS", {{"replicas", 1}}}, {"Worker", {{"replicas", 2}}}}));
  SettleTfJob("tf");
  EXPECT_EQ(PodNames(),
            (std::vector<std::string>{"tf-master-0", "tf-ps-0", "tf-worker-0", "tf-worker-1"}));
  EXPECT_EQ(ServiceNames(), PodNames());
  json master = *Pod("tf-master-0");
  EXPECT_EQ(master["metadata"]["labels"]["training.kubeflow.org/job-role"], "master");
  EXPECT_EQ(master["metadata"]["labels"]["training.kubeflow.org/replica-type"], "master");
  std::string uid = api_.Object(Resource::TfJobs(), "default", "tf")->at("metadata").at("uid");
  EXPECT_EQ(master["metadata"]["ownerReferences"][0]["kind"], "TFJob");
  EXPECT_EQ(master["metadata"]["ownerReferences"][0]["uid"], uid);
  std::optional<json> secret = api_.Object(Resource::Secrets(), "default", "tf-job-secret");
  ASSERT_TRUE(secret.has_value());
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["kind"], "TFJob");
  json created = TfStatus("tf")["conditions"][0];
  EXPECT_EQ(created["type"], "Created");
  EXPECT_EQ(created["reason"], "TFJobCreated");
  EXPECT_FALSE(api_.Object(Resource::TrainingJobs(), "default", "tf").has_value());

  for (const std::string& pod : PodNames()) api_.SetPodPhase("default", pod, "Running");
  SettleTfJob("tf");
  EXPECT_EQ(LastCondition("tf")["reason"], "TFJobRunning");
  json replicas = TfStatus("tf")["replicaStatuses"];
  EXPECT_EQ(replicas["Master"]["active"], 1);
  EXPECT_EQ(replicas["Worker"]["active"], 2);
  EXPECT_FALSE(replicas.contains("Chief"));

  api_.SetPodPhase("default", "tf-master-0", "Succeeded", 0);
  SettleTfJob("tf");
  json done = LastCondition("tf");
  EXPECT_EQ(done["type"], "Succeeded");
  EXPECT_EQ(done["reason"], "TFJobSucceeded");
  EXPECT_EQ(done["message"], "TFJob default/tf successfully completed.");
  EXPECT_TRUE(HasEvent("JobSucceeded", "TFJob succeeded job=default/tf"));
  EXPECT_TRUE(TfStatus("tf").contains("completionTime"));
  EXPECT_EQ(TfStatus("tf")["replicaStatuses"]["Master"]["succeeded"], 1);
  // Kubeflow's cleanPodPolicy default, None: the pods and their Services stay.
  EXPECT_FALSE(Deleting("tf-ps-0"));
  EXPECT_EQ(ServiceNames().size(), 4u);
}

// Kubeflow's ExitCode semantics, with the restart counted by the operator in the TFJob's status:
// 137 (killed) is retried, the count survives the pod, and a program error (1) fails the job;
// cleanPodPolicy Running then removes the running pods and every Service.
TEST_F(TfJobReconcilerTest, ExitCodeRestartsAreCountedInTheTfJobStatus) {
  CreateTfJob(TfJob(
      "ec",
      {{"Worker", {{"replicas", 2}, {"restartPolicy", "ExitCode"}}}, {"PS", {{"replicas", 1}}}},
      {{"backoffLimit", 3}, {"cleanPodPolicy", "Running"}}));
  SettleTfJob("ec");
  std::string uid = Uid("ec-worker-1");
  api_.SetPodPhase("default", "ec-worker-1", "Failed", 137);
  SettleTfJob("ec");
  EXPECT_TRUE(Deleting("ec-worker-1"));
  EXPECT_EQ(LastCondition("ec")["reason"], "TFJobRestarting");
  EXPECT_EQ(TfStatus("ec")["replicaStatuses"]["Worker"]["restarts"], 1);
  api_.FinishDeletions();
  clock_.Advance(absl::Seconds(10));  // its back-off
  SettleTfJob("ec");
  EXPECT_FALSE(Uid("ec-worker-1").empty());
  EXPECT_NE(Uid("ec-worker-1"), uid);  // recreated, with its Kubeflow name
  EXPECT_EQ(TfStatus("ec")["replicaStatuses"]["Worker"]["restarts"], 1);  // counted once
  api_.SetPodPhase("default", "ec-worker-0", "Failed", 1);
  SettleTfJob("ec");
  EXPECT_EQ(LastCondition("ec")["type"], "Failed");
  EXPECT_EQ(LastCondition("ec")["reason"], "TFJobFailed");
  EXPECT_TRUE(Deleting("ec-ps-0"));
  EXPECT_THAT(ServiceNames(), ::testing::IsEmpty());
}

// A TFJob the conversion refuses fails with the TFJob's own field in its status, and nothing is
// created for it.
TEST_F(TfJobReconcilerTest, AnInvalidTfJobFailsNamingItsField) {
  CreateTfJob(TfJob("inv", {{"Master", {{"replicas", 2}}}, {"Worker", {{"replicas", 1}}}}));
  SettleTfJob("inv");
  json failed = LastCondition("inv");
  EXPECT_EQ(failed["type"], "Failed");
  EXPECT_EQ(failed["reason"], "InvalidSpec");
  EXPECT_THAT(failed["message"].get<std::string>(),
              ::testing::HasSubstr("spec.tfReplicaSpecs.Master.replicas"));
  EXPECT_THAT(PodNames(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace kubetrain::controller::testing
