#include "ps/store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "absl/synchronization/barrier.h"
#include "absl/synchronization/notification.h"
#include "common/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "ps/tests/ps_cluster.h"
#include "ps/tests/store_testing.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::IsOk;
using testing::kNotInitialised;

using testing::kInitial;
using testing::Minus;
using testing::Push;
using testing::StoreTest;
using testing::Sync;
using testing::TwoPartitions;
using testing::Values;

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

// A pull's revision names the values it read: a cached encoding of them is reused only while
// they stay the same, so every update, and a new Init even at the same step, must change it.
TEST_F(StoreTest, EveryUpdateGivesThePartitionsANewRevision) {
  auto revisions = [this](int64_t min_step) {
    std::vector<uint64_t> out;
    auto pulled = store_.Pull({}, min_step, absl::Now() + absl::Seconds(60),
                              [&](const PartitionKey&, uint64_t, std::span<const float>,
                                  uint64_t revision) { out.push_back(revision); });
    EXPECT_THAT(pulled, IsOk());
    return out;
  };
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(1))), IsOk());
  const std::vector<uint64_t> initial = revisions(0);
  ASSERT_EQ(initial.size(), 2u);
  EXPECT_NE(initial[0], initial[1]);
  EXPECT_EQ(revisions(0), initial);  // reading changes nothing
  ASSERT_THAT(store_.Push(Push(0, 1).args), IsOk());
  const std::vector<uint64_t> stepped = revisions(1);
  ASSERT_EQ(stepped.size(), 2u);
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(1))), IsOk());  // same keys, same step 0 again
  const std::vector<uint64_t> again = revisions(0);
  ASSERT_EQ(again.size(), 2u);
  std::set<uint64_t> all(initial.begin(), initial.end());
  all.insert(stepped.begin(), stepped.end());
  all.insert(again.begin(), again.end());
  EXPECT_EQ(all.size(), 6u) << "a revision was reused";
}

// Each partition has its own round (BytePS's per-key rounds): a worker that pushes a shard in
// pieces gets a piece's new values as soon as every worker's push of that piece is in, while the
// rest of the shard still waits for its gradients.
TEST_F(StoreTest, EachPartitionCompletesItsOwnRound) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(2))), IsOk());
  const std::vector<PartitionKey> first = {{"w", 0}}, second = {{"w", 1}};
  auto piece = [](const Push& push, size_t i) {
    PushArgs args = push.args;
    args.gradients = {push.args.gradients[i]};
    return args;
  };
  Push one(0, 2), two(0, 4);
  ASSERT_THAT(store_.Push(piece(one, 0)), IsOk());
  EXPECT_FALSE(store_.PullReady(first, 1));
  auto completed = store_.Push(piece(two, 0));
  ASSERT_THAT(completed, IsOk());
  EXPECT_FALSE(completed->stale);
  // The first partition moved to step 1 with the average of its two gradients; the shard's step
  // is still 0, and the second partition is untouched and not ready.
  EXPECT_EQ(completed->global_step, 0);
  EXPECT_TRUE(store_.PullReady(first, 1));
  EXPECT_FALSE(store_.PullReady(second, 1));
  EXPECT_FALSE(store_.PullReady({}, 1));
  std::vector<float> got;
  auto pulled = store_.Pull(first, 1, absl::InfinitePast(),
                            [&](const PartitionKey&, uint64_t, std::span<const float> v, uint64_t) {
                              got.assign(v.begin(), v.end());
                            });
  ASSERT_THAT(pulled, IsOk());
  EXPECT_EQ(pulled->global_step, 1);
  EXPECT_EQ(pulled->gradients_applied, 2);
  EXPECT_EQ(got, std::vector<float>({7, 8, 9, 10}));
  EXPECT_EQ(store_.Status().global_step, 0);
  EXPECT_EQ(store_.Pull(second, 1, absl::InfinitePast(), [](auto&&...) {}).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // A push of the first partition for step 0 now comes too late there.
  auto late = store_.Push(piece(Push(0, 1), 0));
  ASSERT_THAT(late, IsOk());
  EXPECT_TRUE(late->stale);

  ASSERT_THAT(store_.Push(piece(one, 1)), IsOk());
  ASSERT_THAT(store_.Push(piece(two, 1)), IsOk());
  EXPECT_EQ(Values(store_, 1), std::make_pair(Minus(kInitial, 3), int64_t{1}));
  EXPECT_EQ(store_.Status().gradients_applied, 2);
}

// A job with more ps tasks than partitions leaves a ps with none; its workers still push to it
// (nothing) and pull from it with the next step, so its step moves with theirs.
TEST_F(StoreTest, APsHoldingNoPartitionStepsWithItsWorkers) {
  ShardState empty{Sync(2), 0, "run-1", {}};
  ASSERT_THAT(store_.Init(std::move(empty)), IsOk());
  const PushArgs nothing{"run-1", 0, 0, {}};
  ASSERT_THAT(store_.Push(nothing), IsOk());
  EXPECT_FALSE(store_.PullReady({}, 1));
  auto second = store_.Push(nothing);
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(second->global_step, 1);
  EXPECT_TRUE(store_.PullReady({}, 1));
  EXPECT_EQ(store_.Status().gradients_applied, 2);
  auto late = store_.Push(nothing);
  ASSERT_THAT(late, IsOk());
  EXPECT_TRUE(late->stale);
  auto next = store_.Push({"run-1", 1, 1, {}});
  ASSERT_THAT(next, IsOk());
  EXPECT_FALSE(next->stale);
}

// A checkpoint holds one step's values: Export waits for a partition a step behind the others.
TEST_F(StoreTest, ExportWaitsForEveryPartitionToReachTheSameStep) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(1))), IsOk());
  Push push(0, 1);
  PushArgs first = push.args;
  first.gradients.pop_back();
  ASSERT_THAT(store_.Push(first), IsOk());  // partition 0 at step 1, partition 1 at 0
  absl::Notification exported;
  std::optional<absl::StatusOr<ShardState>> state;
  std::thread exporter([&] {
    state = store_.Export(absl::Minutes(1));
    exported.Notify();
  });
  EXPECT_FALSE(exported.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  PushArgs second = push.args;
  second.gradients.erase(second.gradients.begin());
  ASSERT_THAT(store_.Push(second), IsOk());
  exporter.join();
  ASSERT_THAT(*state, IsOk());
  EXPECT_EQ((*state)->global_step, 1);
  EXPECT_EQ((*state)->partitions[0].values, std::vector<float>({9, 10, 11, 12}));
  EXPECT_EQ((*state)->partitions[1].values, std::vector<float>({13, 14}));
  // Without the wait, a partition a step ahead is exported as it is, at the shard's step.
  first.step = 1;
  ASSERT_THAT(store_.Push(first), IsOk());
  auto now = store_.Export(absl::ZeroDuration());
  ASSERT_THAT(now, IsOk());
  EXPECT_EQ(now->global_step, 1);
  EXPECT_EQ(now->partitions[0].values, std::vector<float>({8, 9, 10, 11}));
}

TEST_F(StoreTest, RejectsMalformedPushes) {
  ASSERT_THAT(store_.Init(TwoPartitions(Sync(2))), IsOk());
  Push none(0, 1);
  none.args.gradients.clear();
  EXPECT_EQ(store_.Push(none.args).status().code(), absl::StatusCode::kInvalidArgument);
  Push wrong_size(0, 1);
  wrong_size.args.gradients[1].values =
      GradientBytes(absl::string_view(wrong_size.b).substr(0, wrong_size.b.size() - 4));
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

}  // namespace
}  // namespace kubetrain::ps
