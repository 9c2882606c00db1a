// ShardStore's elastic sync mode (docs/architecture.md §5.10): the membership decides each
// step's quota.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/status_matchers.h"
#include "ps/store.h"
#include "ps/tests/store_testing.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::IsOk;
using testing::Elastic;
using testing::From;
using testing::kInitial;
using testing::Minus;
using testing::Push;
using testing::StoreTest;
using testing::TwoPartitions;
using testing::Values;

TEST_F(StoreTest, ElasticStepAggregatesOneGradientPerMember) {
  ASSERT_THAT(store_.Init(TwoPartitions(Elastic(3))), IsOk());
  for (uint32_t w : {0u, 1u, 2u}) ASSERT_THAT(store_.Join(w, false), IsOk());
  auto view = store_.Join(2, false);
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->members, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(view->quota, 3);
  Push p0(0, 1), p1(0, 2), p2(0, 6);
  ASSERT_THAT(store_.Push(From(0, p0)), IsOk());
  ASSERT_THAT(store_.Push(From(1, p1)), IsOk());
  EXPECT_EQ(Values(store_).second, 0);  // the third member has not pushed
  auto third = store_.Push(From(2, p2));
  ASSERT_THAT(third, IsOk());
  EXPECT_EQ(third->global_step, 1);
  EXPECT_EQ(Values(store_).first, Minus(kInitial, 3));  // (1 + 2 + 6) / 3
  EXPECT_EQ(store_.Status().gradients_applied, 3);
}

TEST_F(StoreTest, ElasticLeaveCompletesTheStepThatWaitedForTheLeaver) {
  ASSERT_THAT(store_.Init(TwoPartitions(Elastic(2))), IsOk());
  for (uint32_t w : {0u, 1u, 2u}) ASSERT_THAT(store_.Join(w, false), IsOk());
  Push p0(0, 1), p1(0, 3);
  ASSERT_THAT(store_.Push(From(0, p0)), IsOk());
  ASSERT_THAT(store_.Push(From(1, p1)), IsOk());
  auto left = store_.Join(2, /*leave=*/true);
  ASSERT_THAT(left, IsOk());
  EXPECT_EQ(left->members, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(left->quota, 2);
  EXPECT_EQ(left->global_step, 1);
  EXPECT_EQ(Values(store_, 1).first, Minus(kInitial, 2));  // (1 + 3) / 2, applied once
  EXPECT_EQ(store_.Status().gradients_applied, 2);
}

TEST_F(StoreTest, ElasticSilentMemberTimesOut) {
  ASSERT_THAT(store_.Init(TwoPartitions(Elastic(1))), IsOk());
  const absl::Time t0 = absl::Now();
  ASSERT_THAT(store_.Join(0, false, t0), IsOk());
  ASSERT_THAT(store_.Join(1, false, t0), IsOk());
  Push p0(0, 4);
  ASSERT_THAT(store_.Push(From(0, p0)), IsOk());
  EXPECT_EQ(Values(store_).second, 0);
  // Worker 1 vanished without leaving (its pod was killed): worker 0's next heartbeat, past
  // the timeout, drops it, and the step goes on without it.
  auto view = store_.Join(0, false, absl::Now() + absl::Seconds(6));
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->members, (std::vector<uint32_t>{0}));
  EXPECT_EQ(view->global_step, 1);
  EXPECT_EQ(Values(store_, 1).first, Minus(kInitial, 4));
}

TEST_F(StoreTest, AMemberTimedOutByAPushIsReportedByTheNextJoin) {
  ASSERT_THAT(store_.Init(TwoPartitions(Elastic(1))), IsOk());
  ASSERT_THAT(store_.Join(0, false), IsOk());
  // Worker 1 was last heard from well past the timeout and never left (its pod was killed);
  // its Join reports its own arrival.
  auto joined = store_.Join(1, false, absl::Now() - absl::Seconds(60));
  ASSERT_THAT(joined, IsOk());
  EXPECT_TRUE(joined->changed);
  // Worker 0's push drops it; a push answers no membership, so nothing has reported it yet.
  Push p0(0, 4);
  ASSERT_THAT(store_.Push(From(0, p0)), IsOk());
  auto heartbeat = store_.Join(0, false);
  ASSERT_THAT(heartbeat, IsOk());
  EXPECT_TRUE(heartbeat->changed);  // the ps logs the change now
  EXPECT_EQ(heartbeat->members, (std::vector<uint32_t>{0}));
  auto next = store_.Join(0, false);
  ASSERT_THAT(next, IsOk());
  EXPECT_FALSE(next->changed);  // once
}

TEST_F(StoreTest, ElasticMemberJoiningMidStepIsWaitedFor) {
  ASSERT_THAT(store_.Init(TwoPartitions(Elastic(2))), IsOk());
  ASSERT_THAT(store_.Join(0, false), IsOk());
  ASSERT_THAT(store_.Join(1, false), IsOk());
  Push p0(0, 1), p1(0, 2), p2(0, 3);
  ASSERT_THAT(store_.Push(From(0, p0)), IsOk());
  ASSERT_THAT(store_.Join(2, false), IsOk());
  ASSERT_THAT(store_.Push(From(1, p1)), IsOk());
  EXPECT_EQ(Values(store_).second, 0);  // the new member's gradient counts for this step
  ASSERT_THAT(store_.Push(From(2, p2)), IsOk());
  // Started at two, now three: the sum over the nominal two, (1 + 2 + 3) / 2.
  EXPECT_EQ(Values(store_, 1).first, Minus(kInitial, 3));
}

TEST_F(StoreTest, ElasticBackupWorkersShrinkTheQuota) {
  ASSERT_THAT(store_.Init(TwoPartitions(Elastic(2, /*backup=*/1))), IsOk());
  for (uint32_t w : {0u, 1u, 2u}) ASSERT_THAT(store_.Join(w, false), IsOk());
  Push p0(0, 2), p1(0, 4), p2(0, 100);
  ASSERT_THAT(store_.Push(From(0, p0)), IsOk());
  ASSERT_THAT(store_.Push(From(1, p1)), IsOk());
  auto late = store_.Push(From(2, p2));
  ASSERT_THAT(late, IsOk());
  EXPECT_TRUE(late->stale);
  EXPECT_EQ(Values(store_).first, Minus(kInitial, 3));
  EXPECT_EQ(metrics_.stale_gradients_dropped(), 1);
}

TEST_F(StoreTest, ElasticStepBelowTheMinimumSizeWaitsForAMemberToComeBack) {
  TrainingConfig config = Elastic(2);
  config.min_members = 2;
  ASSERT_THAT(store_.Init(TwoPartitions(config)), IsOk());
  ASSERT_THAT(store_.Join(0, false), IsOk());
  ASSERT_THAT(store_.Join(1, false), IsOk());
  ASSERT_THAT(store_.Join(1, /*leave=*/true), IsOk());  // preempted
  Push p0(0, 2), p1(0, 4);
  ASSERT_THAT(store_.Push(From(0, p0)), IsOk());
  EXPECT_EQ(Values(store_).second, 0);            // one member, but the job's minimum is two
  ASSERT_THAT(store_.Push(From(1, p1)), IsOk());  // its replacement
  EXPECT_EQ(Values(store_, 1).first, Minus(kInitial, 3));
}

TEST_F(StoreTest, ElasticPushRestoresAMembershipTheStoreLost) {
  // A ps that restarted knows no members; the first pushes bring them back.
  ASSERT_THAT(store_.Init(TwoPartitions(Elastic(1))), IsOk());
  Push p(0, 1);
  ASSERT_THAT(store_.Push(From(7, p)), IsOk());
  EXPECT_EQ(store_.Status().members, 1u);
  EXPECT_EQ(Values(store_).second, 1);  // alone, it was the quota
}

TEST_F(StoreTest, MembershipBeforeInitAndProgressSurvivesExportAndInit) {
  auto early = store_.Join(3, false);
  ASSERT_THAT(early, IsOk());
  EXPECT_EQ(early->members, (std::vector<uint32_t>{3}));
  ShardState state = TwoPartitions(Elastic(1));
  state.gradients_applied = 40;
  ASSERT_THAT(store_.Init(std::move(state)), IsOk());
  EXPECT_EQ(store_.Status().members, 1u);  // Init keeps the members
  Push p(0, 1);
  ASSERT_THAT(store_.Push(From(3, p)), IsOk());
  auto exported = store_.Export();
  ASSERT_THAT(exported, IsOk());
  EXPECT_EQ(exported->gradients_applied, 41);
  EXPECT_TRUE(exported->config.elastic);
  store_.Close();
  EXPECT_EQ(store_.Join(3, false).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(StoreTest, ElasticScheduleFollowsGradientsNotSteps) {
  // Decay to 0 over 4 nominal steps of 2 gradients: after 4 steps of 1 member the schedule is
  // half-way, not over, so a shrunken job keeps the rate its examples call for.
  OptimizerOptions decay{.learning_rate = 1, .decay_steps = 4, .min_lr_ratio = 0};
  TrainingConfig config = Elastic(2);
  config.optimizer = decay;
  ASSERT_THAT(store_.Init(TwoPartitions(config)), IsOk());
  ASSERT_THAT(store_.Join(0, false), IsOk());
  for (int s = 0; s < 4; ++s) {
    Push p(s, 2);  // one gradient over the nominal two: 1 per step
    ASSERT_THAT(store_.Push(From(0, p)), IsOk());
  }
  // Schedule steps 0,0,1,1: rates 1, 1, cos factor at 1/4 twice.
  const double r1 = LearningRateAt(decay, 1);
  const float applied = static_cast<float>(2 + 2 * r1);
  auto [values, step] = Values(store_);
  EXPECT_EQ(step, 4);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(values[i], kInitial[i] - applied, 1e-5);
}

}  // namespace
}  // namespace kubetrain::ps
