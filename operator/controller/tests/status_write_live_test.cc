// The controller's status writes from its stripped cache (kube::StripForCache), against a live
// localkube: /status takes only status from the body, so what the cache dropped stays on the
// server.
#include <gtest/gtest.h>

#include <string>

#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/tests/controller_fixture.h"
#include "operator/kube/informer.h"

namespace kubetrain::controller::testing {

using ::kubetrain::testing::IsOk;
namespace {

constexpr char kLastApplied[] = "kubectl.kubernetes.io/last-applied-configuration";

using ControllerStatusWriteTest = ControllerTest;

// The controller caches TrainingJobs stripped and PUTs /status with its cached copy as the body.
TEST_F(ControllerStatusWriteTest, KeepsTheAnnotationsTheCacheDropped) {
  // The server's own /status semantics first, with no controller writing meanwhile.
  controller_.reset();
  json job = kube::testing::LoadSourceYaml("deploy/examples/fashion-mnist.yaml");
  ASSERT_TRUE(job.is_object());
  job["metadata"]["namespace"] = "default";
  std::string applied = job.dump();
  job["metadata"]["annotations"] = {{kLastApplied, applied}, {"team.example.com/owner", "ml"}};
  Create(job);

  auto stored = client_->Get(Resource::TrainingJobs(), "default", "fashion-mnist");
  ASSERT_THAT(stored, IsOk());
  EXPECT_TRUE((*stored)["metadata"].contains("managedFields"));
  json body = *stored;
  kube::StripForCache(body);
  body["metadata"].erase("annotations");
  body["metadata"]["labels"] = {{"not", "written"}};
  const std::string now = kube::FormatTime(absl::Now());
  body["status"] = {{"startTime", now}};
  auto written = client_->UpdateStatus(Resource::TrainingJobs(), "default", body);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ((*written)["metadata"]["annotations"], (*stored)["metadata"]["annotations"]);
  EXPECT_FALSE((*written)["metadata"].contains("labels"));
  EXPECT_EQ((*written)["status"]["startTime"], now);

  StartController();
  auto condition = [&](const std::string& type) {
    for (const json& c : Status("fashion-mnist").value("conditions", json::array())) {
      if (c.value("type", "") == type && c.value("status", "") == "True") return true;
    }
    return false;
  };
  ASSERT_TRUE(Eventually([&] { return condition("Created"); }));
  // The chief (worker 0) exits 0: the job succeeds, with more status writes.
  ASSERT_TRUE(
      Eventually([&] { return Get(Resource::Pods(), "fashion-mnist-worker-0").has_value(); }));
  SetPod("fashion-mnist-worker-0", "Succeeded", 0);
  ASSERT_TRUE(Eventually([&] { return condition("Succeeded"); }));
  controller_.reset();

  auto after = client_->Get(Resource::TrainingJobs(), "default", "fashion-mnist");
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ((*after)["metadata"]["annotations"],
            json({{kLastApplied, applied}, {"team.example.com/owner", "ml"}}));
  EXPECT_EQ((*after)["spec"], (*stored)["spec"]);
}

}  // namespace
}  // namespace kubetrain::controller::testing
