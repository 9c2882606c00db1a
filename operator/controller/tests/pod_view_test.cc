#include "operator/controller/pod_view.h"

#include <gtest/gtest.h>

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

TEST(PodView, ForeignPodsAreIgnored) {
  EXPECT_FALSE(ViewPod(json::parse(R"({"metadata":{"name":"x","labels":{"app":"y"}}})")));
}

}  // namespace
}  // namespace kubetrain::controller
