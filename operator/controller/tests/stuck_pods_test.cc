// A pod of a job left Terminating by a node that stopped answering (stuck_pods.cc): replaced
// once its grace period and kStuckPodMargin have passed, not before.
#include <gtest/gtest.h>

#include <string>

#include "operator/controller/reconciler.h"
#include "operator/controller/tests/job_builders.h"
#include "operator/controller/tests/reconciler_fixture.h"

namespace kubetrain::controller::testing {
namespace {

// What the taint eviction controller does to a pod on an unreachable node: the DisruptionTarget
// condition, then a graceful delete that no kubelet will ever confirm.
void EvictFromLostNode(kube::testing::FakeApiClient& api, const std::string& pod) {
  json status = {{"status",
                  {{"conditions",
                    {{{"type", "DisruptionTarget"},
                      {"status", "True"},
                      {"reason", "DeletionByTaintManager"},
                      {"message", "Taint manager: deleting due to NoExecute taint"}}}}}}};
  ASSERT_THAT(api.Patch(Resource::Pods(), "default", pod, kube::PatchType::kMerge, status.dump()),
              IsOk());
  ASSERT_THAT(api.Delete(Resource::Pods(), "default", pod, {.grace_period_seconds = 5}), IsOk());
}

TEST_F(ReconcilerTest, APodStuckTerminatingOnALostNodeIsForceDeletedAndReplaced) {
  Create(Job("lost", {{"PS", Replica(1)}, {"Worker", Replica(2)}}));
  Settle("lost");
  RunAll("lost");
  const std::string ps = Uid("lost-ps-0"), worker = Uid("lost-worker-1");
  EvictFromLostNode(api_, "lost-ps-0");
  EvictFromLostNode(api_, "lost-worker-1");

  // Within its grace period and the margin after it, a pod may still be stopping: kept.
  ReconcileResult r = Settle("lost");
  EXPECT_EQ(Uid("lost-ps-0"), ps);
  ASSERT_TRUE(r.requeue_after.has_value()) << "nothing else wakes a job whose node is silent";
  EXPECT_LE(*r.requeue_after, absl::Seconds(5) + kStuckPodMargin);
  clock_.Advance(absl::Seconds(5) + kStuckPodMargin - absl::Seconds(1));
  Settle("lost");
  EXPECT_EQ(Uid("lost-ps-0"), ps);
  EXPECT_TRUE(Deleting("lost-ps-0"));

  // Past it: forced out, and both replicas made again under their names.
  clock_.Advance(absl::Seconds(1));
  Settle("lost");
  EXPECT_TRUE(HasEvent("ForceDeletedPod",
                       "pod=lost-ps-0: still Terminating 10s after its grace "
                       "period (evicted from a node that stopped answering)"));
  EXPECT_TRUE(HasEvent("ForceDeletedPod", "pod=lost-worker-1"));
  Settle("lost");
  EXPECT_FALSE(Uid("lost-ps-0").empty());
  EXPECT_NE(Uid("lost-ps-0"), ps);
  EXPECT_FALSE(Deleting("lost-ps-0"));
  EXPECT_FALSE(Uid("lost-worker-1").empty());
  EXPECT_NE(Uid("lost-worker-1"), worker);
  EXPECT_EQ(PodNames().size(), 3u);
}

}  // namespace
}  // namespace kubetrain::controller::testing
