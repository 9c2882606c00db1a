#include "ps/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/synchronization/barrier.h"
#include "common/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "ps/tests/ps_cluster.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::IsOk;
using testing::kNotInitialised;

std::string Bytes(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Two partitions of "w": 4 and 2 elements, values 10..15.
ShardState TwoPartitions(TrainingConfig config) {
  ShardState state{config, 0, "run-1", {}};
  state.partitions.push_back({{"w", 0}, 0, {10, 11, 12, 13}, {}});
  state.partitions.push_back({{"w", 1}, 4, {14, 15}, {}});
  return state;
}

TrainingConfig Sync(int replicas, OptimizerOptions optimizer = {.learning_rate = 1}) {
  return {UpdateMode::kSync, replicas, optimizer};
}

// A push of the same value g to every element of both partitions, or of `g`'s six values in
// partition order. The strings live in the returned object so the GradientRefs stay valid.
struct Push {
  std::string a, b;
  PushArgs args;
  Push(int64_t step, float g) : Push(step, std::vector<float>(6, g)) {}
  Push(int64_t step, const std::vector<float>& g)
      : a(Bytes({g.begin(), g.begin() + 4})), b(Bytes({g.begin() + 4, g.end()})) {
    args.step = step;
    args.gradients = {{{"w", 0}, a}, {{"w", 1}, b}};
  }
};

// All values of the store, in partition order, and the step they belong to.
std::pair<std::vector<float>, int64_t> Values(const ShardStore& store, int64_t min_step = 0) {
  std::vector<float> out;
  auto pulled = store.Pull({}, min_step, absl::Now() + absl::Seconds(60),
                           [&](const PartitionKey&, uint64_t, std::span<const float> v) {
                             out.insert(out.end(), v.begin(), v.end());
                           });
  EXPECT_TRUE(pulled.ok()) << pulled.status();
  return {out, pulled.ok() ? pulled->global_step : -1};
}

std::vector<float> Minus(std::vector<float> v, float d) {
  for (float& x : v) x -= d;
  return v;
}

const std::vector<float> kInitial = {10, 11, 12, 13, 14, 15};

class StoreTest : public ::testing::Test {
 protected:
  prometheus::Registry registry_;
  PsMetrics metrics_{registry_};
  ShardStore store_{&metrics_};
};

TEST_F(StoreTest, UninitialisedRefusesPushAndPull) {
  auto pushed = store_.Push(Push(0, 1).args);
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pushed.status().message(), kNotInitialised);
  auto pulled = store_.Pull({}, 0, absl::Now(), [](auto&&...) {});
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(pulled.status().message(), kNotInitialised);
  EXPECT_EQ(store_.Export().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(store_.Status().initialized);
}

TEST_F(StoreTest, SyncAppliesTheAverageOnceAllReplicasArrived) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(3))), IsOk());
  for (float g : {1.0f, 2.0f}) {
    auto outcome = store_.Push(Push(0, g).args);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_FALSE(outcome->stale);
    EXPECT_EQ(outcome->global_step, 0);
    EXPECT_EQ(Values(store_).first, kInitial);  // nothing applied before the third
  }
  auto third = store_.Push(Push(0, 6).args);
  ASSERT_THAT(third, IsOk());
  EXPECT_EQ(third->global_step, 1);
  auto [values, step] = Values(store_);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(values, Minus(kInitial, 3));  // average (1 + 2 + 6) / 3, lr 1
}

// The push that completes a round goes into the update without being added to the sum first;
// the values must be those of the whole sum written out and then applied, bit for bit, whether
// other pushes came before it (3 workers) or it is the round's only one (1 worker).
TEST_F(StoreTest, TheCompletingPushUpdatesAsTheWrittenSumWould) {
  // Momentum: linear in the gradient, so one bit of difference in a sum reaches the values.
  const OptimizerOptions momentum{.kind = OptimizerKind::kMomentum, .learning_rate = 0.01};
  for (int workers : {3, 1}) {
    ShardStore store;
    ASSERT_THAT(store.Init(TwoPartitions(Sync(workers, momentum))), IsOk());
    auto optimizer = MakeOptimizer(momentum);
    ASSERT_THAT(optimizer, IsOk());
    std::vector<float> want = kInitial;
    std::vector<std::vector<float>> slots(1, std::vector<float>(want.size(), 0.0f));
    for (int64_t step = 0; step < 3; ++step) {
      std::vector<float> sum(want.size(), 0.0f);
      for (int w = 0; w < workers; ++w) {
        // Gradients whose sums round (magnitudes apart), different in every element.
        std::vector<float> g(want.size());
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] =
              (w == 0 ? 3.3f : 1e-3f) * static_cast<float>(i + 1) + 0.1f * static_cast<float>(step);
          sum[i] = w == 0 ? g[i] : sum[i] + g[i];
        }
        auto pushed = store.Push(Push(step, g).args);
        ASSERT_THAT(pushed, IsOk());
        EXPECT_EQ(pushed->global_step, w + 1 == workers ? step + 1 : step);
      }
      std::vector<std::span<float>> slot_spans(slots.begin(), slots.end());
      (*optimizer)->Apply(want, sum, slot_spans, step, static_cast<float>(workers));
      auto [values, at] = Values(store);
      EXPECT_EQ(at, step + 1);
      EXPECT_EQ(values, want) << workers << " workers, step " << step;
      // The velocity holds the averaged sums themselves: any bit of theirs shows there.
      auto exported = store.Export();
      ASSERT_THAT(exported, IsOk());
      std::vector<float> velocity;
      for (const PartitionState& p : exported->partitions) {
        const std::vector<float>& v = p.slots.at((*optimizer)->SlotNames()[0]);
        velocity.insert(velocity.end(), v.begin(), v.end());
      }
      EXPECT_EQ(velocity, slots[0]) << workers << " workers, step " << step;
    }
  }
}

TEST_F(StoreTest, StaleGradientsAreDroppedAndCounted) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(1))), IsOk());
  ASSERT_THAT(store_.Push(Push(0, 1).args), IsOk());
  auto stale = store_.Push(Push(0, 100).args);
  ASSERT_THAT(stale, IsOk());
  EXPECT_TRUE(stale->stale);
  EXPECT_EQ(stale->global_step, 1);
  EXPECT_EQ(Values(store_).first, Minus(kInitial, 1));
  EXPECT_EQ(metrics_.stale_gradients_dropped(), 1);
}

TEST_F(StoreTest, ConcurrentSyncPushesBumpTheStepOncePerRound) {
  constexpr int kWorkers = 4, kSteps = 60;
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(kWorkers))), IsOk());
  std::atomic<int> stale{0}, errors{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      for (int s = 0; s < kSteps; ++s) {
        // Sum over workers of (w + 1) is 10, so the average is 2.5 * (s % 3 + 1): exact.
        auto pushed = store_.Push(Push(s, float(w + 1) * float(s % 3 + 1)).args);
        if (!pushed.ok()) ++errors;
        if (pushed.ok() && pushed->stale) ++stale;
        auto pulled = store_.Pull({}, s + 1, absl::Now() + absl::Seconds(60), [](auto&&...) {});
        if (!pulled.ok()) ++errors;
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(stale, 0);
  float total = 0;
  for (int s = 0; s < kSteps; ++s) total += 2.5f * float(s % 3 + 1);
  auto [values, step] = Values(store_);
  EXPECT_EQ(step, kSteps);
  EXPECT_EQ(values, Minus(kInitial, total));
}

TEST_F(StoreTest, PushesBeyondTheQuotaOfAStepAreStale) {
  // Four workers, two to aggregate: TF's backup workers. Exactly two win the step.
  constexpr int kWorkers = 4;
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(2))), IsOk());
  absl::Barrier* start = new absl::Barrier(kWorkers);
  std::atomic<int> stale{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      if (start->Block()) delete start;
      auto pushed = store_.Push(Push(0, 4).args);
      ASSERT_TRUE(pushed.ok()) << pushed.status();
      if (pushed->stale) ++stale;
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(stale, 2);
  EXPECT_EQ(metrics_.stale_gradients_dropped(), 2);
  auto [values, step] = Values(store_);
  EXPECT_EQ(step, 1);
  EXPECT_EQ(values, Minus(kInitial, 4));  // average of 4 and 4, applied once
}

TrainingConfig Elastic(int nominal, int backup = 0) {
  TrainingConfig config = Sync(nominal);
  config.elastic = true;
  config.backup_workers = backup;
  config.member_timeout = absl::Seconds(5);
  return config;
}

PushArgs From(uint32_t worker, Push& push) {
  push.args.worker = worker;
  return push.args;
}

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

TEST_F(StoreTest, AsyncAppliesEveryPushOnArrival) {
  constexpr int kWorkers = 4, kPushes = 25;
  ASSERT_THAT(store_.Init(TwoPartitions({UpdateMode::kAsync, 1, {.learning_rate = 1}})), IsOk());
  auto first = store_.Push(Push(0, 1).args);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->global_step, 1);
  EXPECT_EQ(Values(store_).first, Minus(kInitial, 1));
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      // The step the gradient was computed at does not matter in async mode.
      for (int i = 0; i < kPushes; ++i) ASSERT_THAT(store_.Push(Push(0, 1).args), IsOk());
    });
  }
  for (auto& t : workers) t.join();
  auto [values, step] = Values(store_);
  EXPECT_EQ(step, 1 + kWorkers * kPushes);
  EXPECT_EQ(values, Minus(kInitial, 1 + kWorkers * kPushes));
  EXPECT_EQ(metrics_.stale_gradients_dropped(), 0);
}

TEST_F(StoreTest, BlockingPullWakesWhenTheStepArrives) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(1))), IsOk());
  std::pair<std::vector<float>, int64_t> seen;
  std::thread puller([&] { seen = Values(store_, /*min_step=*/2); });
  ASSERT_THAT(store_.Push(Push(0, 1).args), IsOk());
  ASSERT_THAT(store_.Push(Push(1, 1).args), IsOk());
  puller.join();
  // Whenever the pull started, it can only have answered with step 2's values.
  EXPECT_EQ(seen.second, 2);
  EXPECT_EQ(seen.first, Minus(kInitial, 2));
}

TEST_F(StoreTest, BlockingPullTimesOutOrIsWokenByClose) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(1))), IsOk());
  auto timed_out = store_.Pull({}, 5, absl::Now() + absl::Milliseconds(20), [](auto&&...) {});
  EXPECT_EQ(timed_out.status().code(), absl::StatusCode::kDeadlineExceeded);
  absl::Status closed_status;
  std::thread puller([&] {
    closed_status = store_.Pull({}, 5, absl::Now() + absl::Seconds(60), [](auto&&...) {}).status();
  });
  store_.Close();
  puller.join();
  EXPECT_EQ(closed_status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_.Push(Push(0, 1).args).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(StoreTest, ExportThenInitRestoresValuesSlotsAndStepExactly) {
  OptimizerOptions adam{.kind = OptimizerKind::kAdam, .learning_rate = 0.01};
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(1, adam))), IsOk());
  ASSERT_THAT(store_.Push(Push(0, 0.5f).args), IsOk());
  ASSERT_THAT(store_.Push(Push(1, -2.0f).args), IsOk());
  auto exported = store_.Export();
  ASSERT_THAT(exported, IsOk());
  EXPECT_EQ(exported->global_step, 2);
  EXPECT_EQ(exported->partitions[0].slots.size(), 2u);  // m and v

  ShardStore restored;
  ASSERT_THAT(restored.Init(*exported), IsOk());
  auto again = restored.Export();
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->global_step, 2);
  EXPECT_EQ(again->run_id, "run-1");
  ASSERT_EQ(again->partitions.size(), exported->partitions.size());
  for (size_t i = 0; i < again->partitions.size(); ++i) {
    EXPECT_EQ(again->partitions[i].key, exported->partitions[i].key);
    EXPECT_EQ(again->partitions[i].values, exported->partitions[i].values);
    EXPECT_EQ(again->partitions[i].slots, exported->partitions[i].slots);
  }
  // The same next gradient moves both to bit-identical values (slots and step really restored).
  ASSERT_THAT(store_.Push(Push(2, 1.5f).args), IsOk());
  ASSERT_THAT(restored.Push(Push(2, 1.5f).args), IsOk());
  EXPECT_EQ(Values(store_).first, Values(restored).first);
}

TEST_F(StoreTest, RejectsMalformedPushes) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(2))), IsOk());
  Push partial(0, 1);
  partial.args.gradients.pop_back();
  EXPECT_EQ(store_.Push(partial.args).status().code(), absl::StatusCode::kInvalidArgument);
  Push wrong_size(0, 1);
  wrong_size.args.gradients[1].bytes.remove_suffix(4);
  EXPECT_EQ(store_.Push(wrong_size.args).status().code(), absl::StatusCode::kInvalidArgument);
  Push unknown(0, 1);
  unknown.args.gradients[1].key = {"v", 0};
  EXPECT_EQ(store_.Push(unknown.args).status().code(), absl::StatusCode::kInvalidArgument);
  Push twice(0, 1);
  twice.args.gradients[1] = twice.args.gradients[0];
  EXPECT_EQ(store_.Push(twice.args).status().code(), absl::StatusCode::kInvalidArgument);
  Push other_run(0, 1);
  other_run.args.run_id = "run-0";
  EXPECT_EQ(store_.Push(other_run.args).status().code(), absl::StatusCode::kAborted);
  // None of them took a place in the round: two good pushes still complete step 0.
  ASSERT_THAT(store_.Push(Push(0, 1).args), IsOk());
  ASSERT_THAT(store_.Push(Push(0, 3).args), IsOk());
  EXPECT_EQ(Values(store_).first, Minus(kInitial, 2));
}

TEST_F(StoreTest, InitRejectsMisSizedOrUnknownSlots) {
  ShardState state = TwoPartitions(Sync(1, {.kind = OptimizerKind::kMomentum}));
  state.partitions[0].slots["momentum"] = {1, 2};
  EXPECT_EQ(store_.Init(state).code(), absl::StatusCode::kInvalidArgument);
  state = TwoPartitions(Sync(1));
  state.partitions[0].slots["m"] = {1, 2, 3, 4};
  EXPECT_EQ(store_.Init(state).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(store_.Status().initialized);
}

TEST(AsFloats, CopiesUnalignedBytes) {
  std::string buffer(1 + 2 * sizeof(float), '\0');
  const float two[2] = {1.5f, -3.0f};
  std::memcpy(buffer.data() + 1, two, sizeof(two));
  std::vector<float> scratch;
  auto floats = AsFloats(absl::string_view(buffer).substr(1), scratch);
  ASSERT_EQ(floats.size(), 2u);
  EXPECT_EQ(floats[0], 1.5f);
  EXPECT_EQ(floats[1], -3.0f);
}

}  // namespace
}  // namespace kubetrain::ps
