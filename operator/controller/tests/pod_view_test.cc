#include "operator/controller/pod_view.h"

#include <gtest/gtest.h>

#include <optional>

namespace kubetrain::controller {
namespace {

using nlohmann::json;

TEST(PodView, ReadsLabelsPhaseAndExitCode) {
  json pod = json::parse(R"({"metadata":{"name":"j-worker-1","uid":"u1",
      "labels":{"kubetrain.dev/replica-type":"worker","kubetrain.dev/replica-index":"1"}},
    "status":{"phase":"Failed","podIP":"127.0.1.5","containerStatuses":[
      {"name":"sidecar","state":{"terminated":{"exitCode":0}}},
      {"name":"kubetrain","state":{"terminated":{"exitCode":137,"reason":"OOMKilled"}}}]}})");
  auto v = ViewPod(pod);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->type, api::ReplicaType::kWorker);
  EXPECT_EQ(v->index, 1);
  EXPECT_EQ(v->phase, "Failed");
  EXPECT_EQ(v->exit_code, 137);
  EXPECT_EQ(v->reason, "OOMKilled");
  EXPECT_EQ(v->pod_ip, "127.0.1.5");
  EXPECT_FALSE(v->deleting);
}

TEST(PodView, EvictedPodWithoutExitCodeCountsAsKilled) {
  json pod = json::parse(R"({"metadata":{"name":"j-ps-0","deletionTimestamp":"2026-01-01T00:00:00Z",
      "labels":{"kubetrain.dev/replica-type":"ps","kubetrain.dev/replica-index":"0"}},
    "status":{"phase":"Failed","reason":"Evicted"}})");
  auto v = ViewPod(pod);
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->deleting);
  EXPECT_FALSE(v->exit_code.has_value());
  EXPECT_EQ(EffectiveExitCode(*v), 137);
}

// A pod taken away (evicted, preempted) rather than ended by its program.
TEST(PodView, ReadsWhyAPodWasDisrupted) {
  json pod = json::parse(R"({"metadata":{"name":"j-worker-1",
      "labels":{"kubetrain.dev/replica-type":"worker","kubetrain.dev/replica-index":"1"}},
    "status":{"phase":"Failed","reason":"Evicted"}})");
  EXPECT_EQ(ViewPod(pod)->disruption, "Evicted");
  pod["status"] = json::parse(R"({"phase":"Failed","conditions":[
      {"type":"Ready","status":"False"},
      {"type":"DisruptionTarget","status":"True","reason":"PreemptionByScheduler"}],
    "containerStatuses":[{"name":"kubetrain","state":{"terminated":{"exitCode":1}}}]})");
  EXPECT_EQ(ViewPod(pod)->disruption, "PreemptionByScheduler");
  json cached = pod;
  StripPodForCache(cached);
  EXPECT_EQ(ViewPod(cached)->disruption, "PreemptionByScheduler");
  EXPECT_EQ(cached["status"]["conditions"].size(), 1u);  // only DisruptionTarget is kept
  pod["status"]["conditions"][1]["status"] = "False";
  EXPECT_EQ(ViewPod(pod)->disruption, "");
  pod["status"] = json::parse(R"({"phase":"Failed","reason":"OOMKilled"})");
  EXPECT_EQ(ViewPod(pod)->disruption, "");
}

TEST(PodView, ReadsTheTrainingContainersTerminationMessageOnly) {
  json pod = json::parse(R"({"metadata":{"name":"j-worker-0",
      "labels":{"kubetrain.dev/replica-type":"worker","kubetrain.dev/replica-index":"0"}},
    "status":{"phase":"Succeeded","containerStatuses":[
      {"name":"sidecar","state":{"terminated":{"exitCode":0,"message":"not this"}}},
      {"name":"kubetrain","state":{"terminated":{"exitCode":0,"message":"{\"steps\":9}"}}}]}})");
  auto v = ViewPod(pod);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->termination_message, R"({"steps":9})");
  pod["status"]["containerStatuses"][1]["state"]["terminated"]["message"] = 42;  // not text
  EXPECT_EQ(ViewPod(pod)->termination_message, "");
}

// The cache keeps what the reconciler reads of a pod, and the view of it is unchanged.
TEST(PodView, TheCachedPodKeepsWhatTheViewAndTheClusterCheckRead) {
  json pod = json::parse(R"({"apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"j-worker-0","namespace":"default","uid":"u0","resourceVersion":"7",
      "labels":{"kubetrain.dev/replica-type":"worker","kubetrain.dev/replica-index":"0"},
      "ownerReferences":[{"uid":"job-uid","controller":true}],
      "managedFields":[{"manager":"kubetrain-operator"}]},
    "spec":{"hostname":"j-worker-0","volumes":[{"name":"data","emptyDir":{}}],
      "containers":[{"name":"kubetrain","image":"kubetrain/worker:0.1.0","args":["--model=mlp"],
        "env":[{"name":"KUBETRAIN_MODE","value":"ps-sync"},
               {"name":"TF_CONFIG","value":"{\"cluster\":{\"worker\":[\"a:2222\"]}}"}],
        "resources":{"limits":{"cpu":"1"}}}]},
    "status":{"phase":"Succeeded","podIP":"127.0.1.5","hostIP":"127.0.0.1",
      "conditions":[{"type":"Ready","status":"False"}],
      "containerStatuses":[{"name":"kubetrain","ready":false,"image":"x","imageID":"y",
        "state":{"terminated":{"exitCode":0,"message":"{\"event\":\"training_complete\"}"}}}]}})");
  std::optional<PodView> before = ViewPod(pod);
  json cached = pod;
  StripPodForCache(cached);
  std::optional<PodView> after = ViewPod(cached);
  ASSERT_TRUE(before.has_value() && after.has_value());
  EXPECT_EQ(after->name, before->name);
  EXPECT_EQ(after->uid, before->uid);
  EXPECT_EQ(after->phase, "Succeeded");
  EXPECT_EQ(after->pod_ip, before->pod_ip);
  EXPECT_EQ(after->exit_code, 0);
  EXPECT_EQ(after->termination_message, before->termination_message);
  EXPECT_EQ(cached["metadata"]["ownerReferences"], pod["metadata"]["ownerReferences"]);
  EXPECT_FALSE(cached["metadata"].contains("managedFields"));
  EXPECT_EQ(cached["spec"], json::parse(R"({"containers":[{"name":"kubetrain","env":[
      {"name":"TF_CONFIG","value":"{\"cluster\":{\"worker\":[\"a:2222\"]}}"}]}]})"));
  EXPECT_FALSE(cached["status"].contains("conditions"));
  EXPECT_LT(cached.dump().size(), pod.dump().size());
}

TEST(PodView, ForeignPodsAreIgnored) {
  EXPECT_FALSE(ViewPod(json::parse(R"({"metadata":{"name":"x","labels":{"app":"y"}}})")));
}

}  // namespace
}  // namespace kubetrain::controller
