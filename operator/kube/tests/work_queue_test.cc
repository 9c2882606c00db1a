#include "operator/kube/work_queue.h"

#include <gtest/gtest.h>

#include <thread>

#include "absl/time/clock.h"
#include "common/testing/eventually.h"

namespace kubetrain::kube {
namespace {

TEST(WorkQueue, DeduplicatesQueuedKeys) {
  WorkQueue q;
  q.Add("ns/a");
  q.Add("ns/a");
  q.Add("ns/b");
  EXPECT_EQ(q.Len(), 2u);
  EXPECT_EQ(*q.Get(), "ns/a");
  EXPECT_EQ(*q.Get(), "ns/b");
}

TEST(WorkQueue, KeyInProcessIsNotHandedOutTwiceAndRequeuedOnDone) {
  WorkQueue q;
  q.Add("ns/a");
  std::string key = *q.Get();
  q.Add("ns/a");  // changed while being reconciled
  EXPECT_EQ(q.Len(), 0u);
  q.Done(key);
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(*q.Get(), "ns/a");
}

// The lower lane: a finished job's cleanup (AddLater, while its pass runs) waits behind every
// job added since, even when its own status write adds it again meanwhile.
TEST(WorkQueue, AddLaterYieldsToEveryOtherKey) {
  WorkQueue q;
  q.Add("ns/done");
  std::string key = *q.Get();
  q.Add("ns/done");       // the informer saw the pass's own status write
  q.AddLater("ns/done");  // the pass asks for its cleanup after the others
  q.Done(key);
  q.Add("ns/b");
  q.Add("ns/done");  // another event: it stays in the lower lane
  q.Add("ns/c");
  q.AddLater("ns/d");
  q.AddLater("ns/b");  // already waiting in the upper lane: stays there
  EXPECT_EQ(q.Len(), 4u);
  EXPECT_EQ(*q.Get(), "ns/b");
  EXPECT_EQ(*q.Get(), "ns/c");
  EXPECT_EQ(*q.Get(), "ns/done");
  EXPECT_EQ(*q.Get(), "ns/d");
  EXPECT_EQ(q.Len(), 0u);
}

TEST(WorkQueue, AddAfterFiresByItself) {
  WorkQueue q;
  absl::Time start = absl::Now();
  q.AddAfter("ns/deadline", absl::Milliseconds(150));
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.Delayed(), 1u);
  std::optional<std::string> key = q.Get();  // blocks until the timer moves it in
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(*key, "ns/deadline");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(140));
}

TEST(WorkQueue, AddAfterFollowsAnInjectedClock) {
  FakeClock clock;
  WorkQueue q({.clock = &clock});
  q.AddAfter("ns/ttl", absl::Hours(1));
  clock.Advance(absl::Minutes(59));
  q.Wake();
  absl::SleepFor(absl::Milliseconds(20));  // time for the woken timer to move it in, were it due
  EXPECT_EQ(q.Len(), 0u);                  // not due yet
  EXPECT_EQ(q.Delayed(), 1u);
  clock.Advance(absl::Minutes(1));
  q.Wake();
  std::optional<std::string> key = q.Get();  // moved in at once, an hour early in real time
  ASSERT_TRUE(key.has_value());
  EXPECT_EQ(*key, "ns/ttl");
  EXPECT_EQ(q.Delayed(), 0u);
}

TEST(WorkQueue, RateLimitedBackoffGrowsAndForgetResets) {
  WorkQueue q({.base_delay = absl::Milliseconds(5), .max_delay = absl::Seconds(1)});
  for (int i = 0; i < 4; ++i) q.AddRateLimited("ns/x");
  EXPECT_EQ(q.NumRequeues("ns/x"), 4);
  q.Forget("ns/x");
  EXPECT_EQ(q.NumRequeues("ns/x"), 0);
}

TEST(WorkQueue, ShutDownWakesBlockedWorkers) {
  WorkQueue q;
  std::optional<std::string> got = "unset";
  std::thread worker([&] { got = q.Get(); });
  // Time for the worker to block in Get (nothing outside the queue shows it waiting); were it not
  // blocked yet, Get after ShutDown returns nothing all the same.
  absl::SleepFor(absl::Milliseconds(50));
  q.ShutDown();
  worker.join();
  EXPECT_FALSE(got.has_value());
}

TEST(WorkQueue, ManyWorkersNeverShareAKey) {
  WorkQueue q;
  std::mutex mu;
  std::set<std::string> active;
  bool overlap = false;
  std::atomic<int> handled{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        {
          std::lock_guard<std::mutex> lock(mu);
          overlap |= !active.insert(*key).second;
        }
        absl::SleepFor(absl::Microseconds(200));  // holds the key while others take theirs
        {
          std::lock_guard<std::mutex> lock(mu);
          active.erase(*key);
        }
        handled++;
        q.Done(*key);
      }
    });
  }
  for (int i = 0; i < 400; ++i) q.Add("ns/job-" + std::to_string(i % 5));
  // Every key handled once at least (adds of a key already queued merge) and the queue empty.
  EXPECT_TRUE(kubetrain::testing::Eventually([&] { return handled.load() >= 5 && q.Len() == 0; }));
  q.ShutDown();
  for (auto& t : workers) t.join();
  EXPECT_FALSE(overlap);
  EXPECT_GE(handled.load(), 5);
}

}  // namespace
}  // namespace kubetrain::kube
