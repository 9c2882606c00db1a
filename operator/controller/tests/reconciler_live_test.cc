// The controller against a live localkube: each rule is driven by patching pod status as a
// kubelet would, and checked on the objects, status and events the API server then holds.
#include <gtest/gtest.h>

#include <set>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/tests/controller_fixture.h"
#include "operator/controller/tests/fake_chief.h"

namespace kubetrain::controller::testing {
namespace {

TEST_F(ControllerTest, CreatesHeadlessServiceAndPodsWithTfConfigAndOwners) {
  Create(Job("fm", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "fm-worker-1").has_value(); }));
  auto svc = Get(Resource::Services(), "fm");
  ASSERT_TRUE(svc.has_value());
  EXPECT_EQ((*svc)["spec"]["clusterIP"], "None");
  EXPECT_EQ((*svc)["spec"]["publishNotReadyAddresses"], true);
  auto job = Get(Resource::TrainingJobs(), "fm");
  json pod = *Get(Resource::Pods(), "fm-worker-1");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], (*job)["metadata"]["uid"]);
  EXPECT_EQ(pod["spec"]["hostname"], "fm-worker-1");
  EXPECT_EQ(pod["spec"]["subdomain"], "fm");
  std::string tf_config;
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "TF_CONFIG") tf_config = e["value"];
  }
  EXPECT_EQ(
      tf_config,
      R"({"cluster":{"ps":["fm-ps-0.fm.default.svc:2222"],"worker":["fm-worker-0.fm.default.svc:2222",)"
      R"("fm-worker-1.fm.default.svc:2222"]},"task":{"type":"worker","index":1}})");
  EXPECT_TRUE(Eventually([&] { return State("fm") == "Created"; }));
  // The Created condition names the job's objects (an event would be one more write per job).
  EXPECT_EQ(Status("fm")["conditions"][0]["message"],
            "TrainingJob default/fm is created: service=fm secret=fm-job-secret "
            "pods=fm-ps-0,fm-worker-0,fm-worker-1");
  EXPECT_FALSE(HasEvent("fm", "Created"));
}

// Each job gets its own Secret before its pods, owned by the job (so deleting the job collects
// it), and every container reads the job's secret from it.
TEST_F(ControllerTest, EveryJobGetsItsOwnSecretBeforeItsPods) {
  Create(Job("sec", {{"PS", Replica(1)}, {"Worker", Replica(1)}}));
  Create(Job("other", {{"Worker", Replica(1)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "sec-worker-0").has_value(); }));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "other-worker-0").has_value(); }));
  auto secret = Get(Resource::Secrets(), "sec-job-secret");
  ASSERT_TRUE(secret.has_value());
  auto job = Get(Resource::TrainingJobs(), "sec");
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0]["uid"], (*job)["metadata"]["uid"]);
  auto other = Get(Resource::Secrets(), "other-job-secret");
  ASSERT_TRUE(other.has_value());
  EXPECT_NE((*secret)["data"]["token"], (*other)["data"]["token"]);
  json pod = *Get(Resource::Pods(), "sec-ps-0");
  bool found = false;
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "KUBETRAIN_JOB_SECRET") {
      EXPECT_EQ(e["valueFrom"]["secretKeyRef"]["name"], "sec-job-secret");
      found = true;
    }
  }
  EXPECT_TRUE(found) << pod.dump();
  // The pods can be seen before the status write that names them (a slow build): no condition
  // yet is "not yet", not an error.
  EXPECT_TRUE(Eventually([&] {
    json conditions = Status("sec").value("conditions", json::array());
    return !conditions.empty() &&
           absl::StartsWith(conditions[0].value("message", ""),
                            "TrainingJob default/sec is created: service=sec "
                            "secret=sec-job-secret pods=");
  }));
}

TEST_F(ControllerTest, ChiefExitZeroSucceedsAndCleansUpRunningPodsAndService) {
  Create(Job("ok", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "ok-worker-1").has_value(); }));
  SetPod("ok-worker-0", "Running");
  EXPECT_TRUE(Eventually([&] { return State("ok") == "Running"; }));
  SetPod("ok-worker-1", "Succeeded", 0);
  SetPod("ok-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return State("ok") == "Succeeded"; }));
  EXPECT_FALSE(Status("ok").value("completionTime", "").empty());
  EXPECT_TRUE(Eventually([&] { return !Get(Resource::Pods(), "ok-ps-0").has_value(); }));
  EXPECT_TRUE(Eventually([&] { return !Get(Resource::Services(), "ok").has_value(); }));
  EXPECT_TRUE(
      Get(Resource::Pods(), "ok-worker-0").has_value());  // Running policy: finished pods stay
  EXPECT_TRUE(Eventually([&] { return HasEvent("ok", "TrainingJob succeeded job=default/ok"); }));
}

TEST_F(ControllerTest, KilledPodIsRecreatedAndRestartsSurviveRecreation) {
  Create(Job("rs", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "rs-worker-1").has_value(); }));
  for (int round = 1; round <= 2; ++round) {
    std::string old_uid = Uid("rs-worker-1");
    SetPod("rs-worker-1", "Failed", 137);
    ASSERT_TRUE(Eventually([&] {
      std::string uid = Uid("rs-worker-1");
      return !uid.empty() && uid != old_uid;
    })) << "round "
        << round;
    EXPECT_TRUE(Eventually([&] { return ReplicaField("rs", "Worker", "restarts", 0) == round; }));
  }
  EXPECT_EQ(State("rs"), "Restarting");
  EXPECT_TRUE(HasEvent("rs", "Restarted Pod pod=rs-worker-1 exit_code=137 restarts=2"));
  SetPod("rs-worker-0", "Running");
  EXPECT_TRUE(Eventually([&] { return State("rs") == "Running"; }));
}

// An operator that dies between writing a restart into status and deleting the failed pod
// leaves both behind; the next one must only delete the pod, not count the failure again
// (found by the chaos e2e: 2 restarts in status for 1 kill).
TEST_F(ControllerTest, ARestartCountedBeforeTheOperatorDiedIsNotCountedAgain) {
  Create(Job("once", {{"Worker", Replica(1)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "once-worker-0").has_value(); }));
  controller_.reset();  // the operator dies...
  std::string failed_uid = Uid("once-worker-0");
  SetPod("once-worker-0", "Failed", 137);
  // ...right after its status write counted the failure, before it deleted the pod.
  json job = *Get(Resource::TrainingJobs(), "once");
  job["status"]["replicaStatuses"]["Worker"]["restarts"] = 1;
  job["status"]["countedFailures"] = json::array({failed_uid});
  ASSERT_THAT(client_->UpdateStatus(Resource::TrainingJobs(), "default", job), IsOk());
  StartController();
  ASSERT_TRUE(Eventually([&] {
    std::string uid = Uid("once-worker-0");
    return !uid.empty() && uid != failed_uid;
  }));
  absl::SleepFor(absl::Milliseconds(300));  // later passes must not count it either
  EXPECT_EQ(ReplicaField("once", "Worker", "restarts", 0), 1);
  EXPECT_FALSE(Status("once").contains("countedFailures"));  // the pod is gone: forgotten
}

TEST_F(ControllerTest, PermanentExitFailsTheJobNamingPodAndCode) {
  Create(Job("bad", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "bad-worker-1").has_value(); }));
  SetPod("bad-worker-1", "Failed", 1);
  ASSERT_TRUE(Eventually([&] { return State("bad") == "Failed"; }));
  std::string message = Status("bad")["conditions"].back()["message"];
  EXPECT_NE(message.find("pod bad-worker-1 exited with code 1"), std::string::npos) << message;
  EXPECT_NE(message.find("restartPolicy ExitCode"), std::string::npos) << message;
  EXPECT_TRUE(Eventually([&] { return !Get(Resource::Pods(), "bad-ps-0").has_value(); }));
  EXPECT_TRUE(HasEvent("bad", "Pod exited pod=bad-worker-1 exit_code=1"));
}

TEST_F(ControllerTest, BackoffLimitCountsRestartsAcrossPods) {
  Create(
      Job("bo", {{"PS", Replica(1, "OnFailure")}, {"Worker", Replica(1)}}, {{"backoffLimit", 1}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "bo-ps-0").has_value(); }));
  std::string uid = Uid("bo-ps-0");
  SetPod("bo-ps-0", "Failed", 2);
  ASSERT_TRUE(Eventually([&] {
    std::string now = Uid("bo-ps-0");
    return !now.empty() && now != uid;
  }));
  SetPod("bo-worker-0", "Failed", 137);
  ASSERT_TRUE(Eventually([&] { return State("bo") == "Failed"; }));
  EXPECT_EQ(Status("bo")["conditions"].back()["reason"], "BackoffLimitExceeded");
}

TEST_F(ControllerTest, RestartScopeJobRecreatesEveryPod) {
  Create(Job("sj", {{"PS", Replica(1)}, {"Worker", Replica(2)}}, {{"restartScope", "Job"}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "sj-worker-1").has_value(); }));
  std::string ps_uid = Uid("sj-ps-0");
  std::string w0_uid = Uid("sj-worker-0");
  SetPod("sj-worker-1", "Failed", 143);
  EXPECT_TRUE(Eventually([&] {
    std::string ps = Uid("sj-ps-0"), w0 = Uid("sj-worker-0");
    return !ps.empty() && ps != ps_uid && !w0.empty() && w0 != w0_uid &&
           !Uid("sj-worker-1").empty();
  }));
  EXPECT_EQ(ReplicaField("sj", "Worker", "restarts", 0), 1);
}

// An all-reduce job whose worker 1 finished just before the chief was killed: the restarted job
// needs worker 1 again (its chief would wait for the peer for ever), so the finished worker is
// deleted and recreated with the rest, and the restart is counted once.
TEST_F(ControllerTest, RestartScopeJobRunsAFinishedWorkerAgain) {
  Create(Job("fw", {{"Worker", Replica(2, "OnFailure")}}, {{"restartScope", "Job"}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "fw-worker-1").has_value(); }));
  std::string w0_uid = Uid("fw-worker-0");
  std::string w1_uid = Uid("fw-worker-1");
  SetPod("fw-worker-1", "Succeeded", 0);
  ASSERT_TRUE(Eventually(
      [&] { return ReplicaField<std::string>("fw", "Worker", "completedIndexes", "") == "1"; }));
  SetPod("fw-worker-0", "Failed", 137);
  ASSERT_TRUE(Eventually([&] {
    std::string w0 = Uid("fw-worker-0"), w1 = Uid("fw-worker-1");
    return !w0.empty() && w0 != w0_uid && !w1.empty() && w1 != w1_uid;
  }));
  EXPECT_EQ(ReplicaField<std::string>("fw", "Worker", "completedIndexes", ""), "");
  EXPECT_EQ(ReplicaField("fw", "Worker", "restarts", 0), 1);
  SetPod("fw-worker-0", "Succeeded", 0);
  EXPECT_TRUE(Eventually([&] { return State("fw") == "Succeeded"; }));
  EXPECT_EQ(ReplicaField("fw", "Worker", "restarts", 0), 1);
}

TEST_F(ControllerTest, ActiveDeadlineFailsTheJobWithoutAnyOtherEvent) {
  Create(Job("dl", {{"Worker", Replica(1)}}, {{"activeDeadlineSeconds", 2}}));
  absl::Time start = absl::Now();
  ASSERT_TRUE(Eventually([&] { return State("dl") == "Failed"; }, absl::Seconds(8)));
  EXPECT_GE(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(Status("dl")["conditions"].back()["reason"], "DeadlineExceeded");
}

TEST_F(ControllerTest, TtlDeletesTheFinishedJob) {
  // completionTime has whole seconds (metav1.Time), so a 1 s TTL can end up to a second early:
  // 2 s leaves the Succeeded state visible for at least one.
  Create(Job("ttl", {{"Worker", Replica(1)}}, {{"ttlSecondsAfterFinished", 2}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "ttl-worker-0").has_value(); }));
  SetPod("ttl-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return State("ttl") == "Succeeded"; }));
  EXPECT_TRUE(Eventually([&] { return !Get(Resource::TrainingJobs(), "ttl").has_value(); },
                         absl::Seconds(8)));
}

TEST_F(ControllerTest, SuspendDeletesPodsAndResumeRecreatesThem) {
  Create(Job("sus", {{"PS", Replica(1)}, {"Worker", Replica(1)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "sus-worker-0").has_value(); }));
  ASSERT_THAT(SetSuspend("sus", true), IsOk());
  ASSERT_TRUE(Eventually([&] { return State("sus") == "Suspended"; }));
  EXPECT_TRUE(Eventually([&] {
    return !Get(Resource::Pods(), "sus-worker-0").has_value() &&
           !Get(Resource::Pods(), "sus-ps-0").has_value();
  }));
  ASSERT_THAT(SetSuspend("sus", false), IsOk());
  EXPECT_TRUE(Eventually([&] { return Get(Resource::Pods(), "sus-worker-0").has_value(); }));
  EXPECT_TRUE(HasEvent("sus", "Resumed TrainingJob job=default/sus"));
}

TEST_F(ControllerTest, CompletedReplicaIsNeverRerunAfterItsPodIsGone) {
  json job = Job("aw", {{"Worker", Replica(2)}});
  job["spec"]["successPolicy"] = "AllWorkers";
  Create(job);
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "aw-worker-1").has_value(); }));
  SetPod("aw-worker-1", "Succeeded", 0);
  ASSERT_TRUE(Eventually(
      [&] { return ReplicaField<std::string>("aw", "Worker", "completedIndexes", "") == "1"; }));
  ASSERT_THAT(client_->Delete(Resource::Pods(), "default", "aw-worker-1"), IsOk());  // pod GC
  absl::SleepFor(absl::Seconds(1));  // passes that would rerun index 1 have had their chance
  EXPECT_FALSE(Get(Resource::Pods(), "aw-worker-1").has_value());
  EXPECT_NE(State("aw"), "Succeeded");  // worker 0 still runs
  SetPod("aw-worker-0", "Succeeded", 0);
  EXPECT_TRUE(Eventually([&] { return State("aw") == "Succeeded"; }));
}

TEST_F(ControllerTest, CleanPodPolicyNoneKeepsEverything) {
  Create(Job("keep", {{"PS", Replica(1)}, {"Worker", Replica(1)}}, {{"cleanPodPolicy", "None"}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "keep-worker-0").has_value(); }));
  SetPod("keep-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return State("keep") == "Succeeded"; }));
  absl::SleepFor(absl::Milliseconds(500));  // the cleanup pass, were there one, has run
  EXPECT_TRUE(Get(Resource::Pods(), "keep-ps-0").has_value());
}

TEST_F(ControllerTest, RestartedOperatorCreatesNoDuplicates) {
  Create(Job("dup", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "dup-worker-1").has_value(); }));
  std::string uid = Uid("dup-worker-1");
  controller_.reset();
  StartController();
  absl::SleepFor(absl::Seconds(1));  // the new controller's passes, were they to create again
  EXPECT_EQ(Uid("dup-worker-1"), uid);
  auto pods = client_->ListAll(Resource::Pods(), "default",
                               {.label_selector = "kubetrain.dev/job-name=dup"});
  ASSERT_THAT(pods, IsOk());
  EXPECT_EQ((*pods)["items"].size(), 3u);
}

// `job` with its workers' metrics port at `port` (a FakeChief's).
json WithMetricsPort(json job, int port) {
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] =
      json::array({{{"name", "metrics"}, {"containerPort", port}}});
  return job;
}

TEST_F(ControllerTest, ProgressIsReadFromTheChiefsMetrics) {
  FakeChief chief(
      "kubetrain_worker_global_step{job=\"p\"} 1200\nkubetrain_worker_epoch{job=\"p\"} 2\n"
      "kubetrain_worker_loss{job=\"p\"} 0.41\nkubetrain_worker_accuracy{job=\"p\"} 0.861\n"
      "kubetrain_worker_examples_per_second{job=\"p\"} 21000\n");
  Create(WithMetricsPort(Job("p", {{"Worker", Replica(1)}}), chief.port()));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "p-worker-0").has_value(); }));
  SetPod("p-worker-0", "Running");
  EXPECT_TRUE(Eventually(
      [&] { return Status("p").value("progress", json::object()).value("step", 0) == 1200; }));
  EXPECT_DOUBLE_EQ(Status("p")["progress"].value("accuracy", 0.0), 0.861);
}

// Progress costs the API server one status write per job per write interval, not one per read:
// a chief whose step grows on every read at one epoch is written about once a second here, and
// a new epoch at once.
TEST_F(ControllerTest, ProgressIsWrittenAtMostEveryIntervalAndANewEpochAtOnce) {
  controller_.reset();
  StartController({.progress_write_interval = absl::Seconds(1)});
  FakeChief chief(/*epoch=*/1);  // its step grows on every read
  Create(WithMetricsPort(Job("rate", {{"Worker", Replica(1)}}), chief.port()));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "rate-worker-0").has_value(); }));
  SetPod("rate-worker-0", "Running");
  auto step = [&] { return Status("rate").value("progress", json::object()).value("step", 0); };
  ASSERT_TRUE(Eventually([&] { return step() > 0; }));
  std::set<int64_t> written;
  absl::Time end = absl::Now() + absl::Seconds(3);
  while (absl::Now() < end) {
    written.insert(step());
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_GE(chief.reads(), 10);   // read every 200 ms...
  EXPECT_LE(written.size(), 5u);  // ...written about once a second
  EXPECT_GE(written.size(), 2u);
  chief.set_epoch(2);
  absl::Time changed = absl::Now();
  ASSERT_TRUE(Eventually(
      [&] { return Status("rate").value("progress", json::object()).value("epoch", 0) == 2; }));
  EXPECT_LT(absl::Now() - changed, absl::Milliseconds(900));  // before the 1 s write interval
}

// The chief's metrics lag its end: the last scrape may be a whole epoch old. The summary the
// chief leaves in its termination log is what the finished job's status must show, and no pod
// of a finished job is active any more.
TEST_F(ControllerTest, FinishedJobCarriesTheChiefsFinalSummaryAndNoActivePods) {
  FakeChief chief("kubetrain_worker_global_step 612\nkubetrain_worker_accuracy 0.8596\n");
  Create(WithMetricsPort(Job("fin", {{"PS", Replica(1)}, {"Worker", Replica(2)}}), chief.port()));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "fin-worker-1").has_value(); }));
  SetPod("fin-ps-0", "Running");
  SetPod("fin-worker-1", "Running");
  SetPod("fin-worker-0", "Running");
  ASSERT_TRUE(Eventually(
      [&] { return Status("fin").value("progress", json::object()).value("step", 0) == 612; }));
  ASSERT_EQ(ReplicaField("fin", "Worker", "active", 0), 2);
  json cs = {
      {"name", "kubetrain"},
      {"ready", false},
      {"restartCount", 0},
      {"image", "kubetrain/worker:0.1.0"},
      {"imageID", ""},
      {"state",
       {{"terminated",
         {{"exitCode", 0},
          {"reason", "Completed"},
          {"message", R"({"event":"training_complete","test_accuracy":0.8735,"test_loss":0.3571,)"
                      R"("steps":936,"epochs":2,"examples_per_sec":20150.5,"wall_seconds":3.1})"
                      "\n"}}}}}};
  json patch = {{"status", {{"phase", "Succeeded"}, {"containerStatuses", {cs}}}}};
  ASSERT_TRUE(client_
                  ->Patch(Resource::Pods(), "default", "fin-worker-0", kube::PatchType::kMerge,
                          patch.dump(), "status")
                  .ok());
  ASSERT_TRUE(Eventually([&] { return State("fin") == "Succeeded"; }));
  EXPECT_TRUE(Eventually([&] {
    json st = Status("fin");
    return st.value("progress", json::object()).value("step", 0) == 936 &&
           ReplicaField("fin", "Worker", "active", -1) == 0 &&
           ReplicaField("fin", "PS", "active", -1) == 0;
  })) << Status("fin").dump();
  json progress = Status("fin")["progress"];
  EXPECT_DOUBLE_EQ(progress.value("accuracy", 0.0), 0.8735);
  EXPECT_DOUBLE_EQ(progress.value("loss", 0.0), 0.3571);
  EXPECT_EQ(progress.value("epoch", 0), 2);
  EXPECT_EQ(ReplicaField("fin", "Worker", "succeeded", 0), 1);
}

std::string TfConfigOf(const json& pod) {
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == "TF_CONFIG") return e["value"];
  }
  return "";
}

TEST_F(ControllerTest, ReplicaChangeRestartsTheWholeJobOnTheNewClusterSpec) {
  Create(Job("sc", {{"PS", Replica(1)}, {"Worker", Replica(2)}}, {{"backoffLimit", 0}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "sc-worker-1").has_value(); }));
  SetPod("sc-worker-0", "Running");
  ASSERT_TRUE(Eventually([&] { return State("sc") == "Running"; }));
  std::map<std::string, std::string> old_uids;
  for (const char* pod : {"sc-ps-0", "sc-worker-0", "sc-worker-1"}) old_uids[pod] = Uid(pod);

  ASSERT_THAT(PatchJob("sc", R"({"spec":{"replicaSpecs":{"Worker":{"replicas":3}}}})"), IsOk());
  const std::string three_workers =
      R"("worker":["sc-worker-0.sc.default.svc:2222","sc-worker-1.sc.default.svc:2222",)"
      R"("sc-worker-2.sc.default.svc:2222"])";
  // Every pod, old names included, runs again with the 3-worker cluster spec.
  ASSERT_TRUE(Eventually([&] {
    for (const char* name : {"sc-ps-0", "sc-worker-0", "sc-worker-1", "sc-worker-2"}) {
      auto pod = Get(Resource::Pods(), name);
      if (!pod || (*pod)["metadata"].contains("deletionTimestamp")) return false;
      if (old_uids.count(name) && Uid(name) == old_uids[name]) return false;
      if (TfConfigOf(*pod).find(three_workers) == std::string::npos) return false;
    }
    return true;
  })) << EventMessages("sc").size();
  EXPECT_TRUE(HasEvent("sc",
                       "Restarted every Pod for a new cluster spec job=default/sc "
                       "old=ps=1,worker=2 new=ps=1,worker=3"));
  // A change the user asked for is no failure: backoffLimit 0 does not fail the job.
  EXPECT_NE(State("sc"), "Failed");
  EXPECT_EQ(ReplicaField("sc", "Worker", "restarts", 0), 0);
  EXPECT_EQ(ReplicaField("sc", "PS", "restarts", 0), 0);

  // Scaling down drops the pods beyond the new count.
  std::string w0 = Uid("sc-worker-0");
  ASSERT_THAT(PatchJob("sc", R"({"spec":{"replicaSpecs":{"Worker":{"replicas":1}}}})"), IsOk());
  ASSERT_TRUE(Eventually([&] {
    auto pod = Get(Resource::Pods(), "sc-worker-0");
    return pod && (*pod)["metadata"].value("uid", "") != w0 &&
           TfConfigOf(*pod).find(R"("worker":["sc-worker-0.sc.default.svc:2222"])") !=
               std::string::npos &&
           !Get(Resource::Pods(), "sc-worker-1").has_value() &&
           !Get(Resource::Pods(), "sc-worker-2").has_value();
  }));
  EXPECT_TRUE(HasEvent("sc",
                       "Restarted every Pod for a new cluster spec job=default/sc "
                       "old=ps=1,worker=3 new=ps=1,worker=1"));
  absl::SleepFor(absl::Milliseconds(500));  // no restart loop: the new pods stay
  EXPECT_TRUE(Get(Resource::Pods(), "sc-worker-0").has_value());
  EXPECT_FALSE(Get(Resource::Pods(), "sc-worker-1").has_value());
}

TEST_F(ControllerTest, SpecTheSchemaCannotCatchFailsAsInvalidSpec) {
  json job = Job("inv", {{"Worker", Replica(1)}});
  job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] =
      json::array({{{"name", "a"}, {"image", "x"}}, {{"name", "b"}, {"image", "y"}}});
  Create(job);
  ASSERT_TRUE(Eventually([&] { return State("inv") == "Failed"; }));
  EXPECT_EQ(Status("inv")["conditions"].back()["reason"], "InvalidSpec");
  EXPECT_FALSE(Get(Resource::Pods(), "inv-worker-0").has_value());
}

// A misspelt replica type must not vanish: the CRD keeps unknown keys of replicaSpecs (a client
// without strict field validation would otherwise have the server prune it, and the job would
// run without its parameter servers), and the operator names it.
TEST_F(ControllerTest, MisspeltReplicaTypeFailsAsInvalidSpecNamingIt) {
  Create(Job("case", {{"Worker", Replica(1)}, {"ps", Replica(1)}}));
  ASSERT_TRUE(Eventually([&] { return State("case") == "Failed"; }));
  json failed = Status("case")["conditions"].back();
  EXPECT_EQ(failed["reason"], "InvalidSpec");
  std::string message = failed.value("message", "");
  EXPECT_TRUE(absl::StrContains(message, "spec.replicaSpecs.ps")) << message;
  EXPECT_TRUE(absl::StrContains(message, "PS")) << message;
  EXPECT_FALSE(Get(Resource::Pods(), "case-worker-0").has_value());
}

TEST_F(ControllerTest, GangSchedulingCreatesAPodGroupForEveryPod) {
  controller_.reset();
  json crd = {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", "podgroups.scheduling.volcano.sh"}}},
      {"spec",
       {{"group", "scheduling.volcano.sh"},
        {"scope", "Namespaced"},
        {"names", {{"plural", "podgroups"}, {"singular", "podgroup"}, {"kind", "PodGroup"}}},
        {"versions", json::array({{{"name", "v1beta1"},
                                   {"served", true},
                                   {"storage", true},
                                   {"schema",
                                    {{"openAPIV3Schema",
                                      {{"type", "object"},
                                       {"x-kubernetes-preserve-unknown-fields", true}}}}}}})}}}};
  ASSERT_TRUE(client_
                  ->Create({"apiextensions.k8s.io", "v1", "customresourcedefinitions",
                            "CustomResourceDefinition", false},
                           "", crd)
                  .ok());
  ASSERT_TRUE(Eventually([&] { return client_->List(Resource::PodGroups(), "default", {}).ok(); }));
  StartController({.gang_scheduler = "volcano"});
  Create(Job("gang", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "gang-worker-1").has_value(); }));
  auto group = Get(Resource::PodGroups(), "gang");
  ASSERT_TRUE(group.has_value());
  EXPECT_EQ((*group)["spec"]["minMember"], 3);
  json pod = *Get(Resource::Pods(), "gang-worker-1");
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "gang");
  // A finished job gives its gang back.
  SetPod("gang-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return State("gang") == "Succeeded"; }));
  EXPECT_TRUE(Eventually([&] { return !Get(Resource::PodGroups(), "gang").has_value(); }));
}

// A pass that runs before the job informer shows the operator's own status write (a pod event
// often arrives first) must build on that write, not on the cached job. Here the job informer is
// stopped, so its cache stays at the version from before the job succeeded: the next pass must
// not create the cleaned-up Service and pods again.
TEST_F(ControllerTest, PassAfterOwnStatusWriteDoesNotUndoItFromAStaleCache) {
  controller_.reset();  // this test drives one Reconciler by hand
  kube::Informer jobs(*client_, Resource::TrainingJobs(), {.namespace_ = "default"});
  kube::Informer pods(*client_, Resource::Pods(), {.namespace_ = "default"});
  kube::Informer services(*client_, Resource::Services(), {.namespace_ = "default"});
  EventRecorder events(*client_, "kubetrain-operator");
  Reconciler reconciler(*client_, jobs, pods, services, events, nullptr, nullptr, {});
  ASSERT_THAT(kube::testing::StartAndSync({&jobs, &pods, &services}), IsOk());
  Create(Job("st", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  ASSERT_TRUE(Eventually([&] { return jobs.Get("default/st").has_value(); }));
  ASSERT_THAT(reconciler.Reconcile("default/st"), IsOk());  // Service, pods, Created
  ASSERT_TRUE(Eventually([&] {
    auto job = jobs.Get("default/st");
    return job && job->value("status", json::object()).contains("conditions") &&
           pods.List().size() == 3 && services.Get("default/st").has_value();
  }));
  jobs.Stop();  // the cache now holds the job as it was before it succeeded

  SetPod("st-ps-0", "Running");
  SetPod("st-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] {
    auto pod = pods.Get("default/st-worker-0");
    return pod && (*pod)["status"].value("phase", "") == "Succeeded";
  }));
  ASSERT_THAT(reconciler.Reconcile("default/st"), IsOk());  // Succeeded
  EXPECT_EQ(State("st"), "Succeeded");
  ASSERT_THAT(reconciler.Reconcile("default/st"), IsOk());  // ps-0 and Service deleted
  ASSERT_TRUE(Eventually([&] {
    return !pods.Get("default/st-ps-0").has_value() && !services.Get("default/st").has_value();
  }));

  ASSERT_THAT(reconciler.Reconcile("default/st"), IsOk());  // cache still from before the success
  EXPECT_FALSE(Get(Resource::Pods(), "st-ps-0").has_value());
  EXPECT_FALSE(Get(Resource::Services(), "st").has_value());
  EXPECT_EQ(State("st"), "Succeeded");
  pods.Stop();
  services.Stop();
}

// An elastic job scaled through the scale subresource, as `kubectl scale tj/el --replicas=N`
// sends it: the new Worker is created and no pod restarts; past maxReplicas the job is reported
// and kept at the bound, not failed.
TEST_F(ControllerTest, ElasticJobScalesThroughTheScaleSubresourceWithoutRestarts) {
  json job = Job("el", {{"PS", Replica(1)}, {"Worker", Replica(2)}});
  job["spec"]["elastic"] = {{"minReplicas", 1}, {"maxReplicas", 3}};
  Create(job);
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "el-worker-1").has_value(); }));
  // The scale comes once the operator has recorded the job at 2 Workers; a scale that lands
  // before its first status write is the job's first size, not a change from 2.
  ASSERT_TRUE(Eventually(
      [&] { return Status("el").value(json::json_pointer("/elastic/targetWorkers"), 0) == 2; }));
  const std::string ps = Uid("el-ps-0");
  const std::string worker = Uid("el-worker-0");
  auto scale = [&](int replicas) {
    auto r = client_->Patch(Resource::TrainingJobs(), "default", "el", kube::PatchType::kMerge,
                            json{{"spec", {{"replicas", replicas}}}}.dump(), "scale");
    ASSERT_TRUE(r.ok()) << r.status();
  };
  scale(3);
  ASSERT_TRUE(Eventually([&] { return Get(Resource::Pods(), "el-worker-2").has_value(); }));
  EXPECT_TRUE(Eventually([&] { return HasEvent("el", "Scaled Worker replicas 2 → 3"); }));
  EXPECT_EQ(Uid("el-ps-0"), ps);
  EXPECT_EQ(Uid("el-worker-0"), worker);
  scale(5);
  EXPECT_TRUE(Eventually([&] {
    return HasEvent("el",
                    "TrainingJob default/el: spec.replicaSpecs.Worker.replicas: must be between "
                    "spec.elastic.minReplicas (1) and spec.elastic.maxReplicas (3), got 5");
  }));
  // The Warning is recorded before the status write that carries the condition lands.
  EXPECT_TRUE(Eventually([&] { return State("el") == "ScalingLimited"; })) << State("el");
  EXPECT_FALSE(Get(Resource::Pods(), "el-worker-3").has_value());
  EXPECT_FALSE(HasEvent("el", "Lost el-worker"));  // nothing was lost
  EXPECT_EQ(Uid("el-worker-0"), worker);
}

}  // namespace
}  // namespace kubetrain::controller::testing
