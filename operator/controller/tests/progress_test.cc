#include "operator/controller/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/loopback.h"
#include "common/testing/status_matchers.h"
#include "operator/controller/tests/fake_chief.h"

namespace kubetrain::controller {

using ::kubetrain::testing::IsOk;
namespace {

// Every field of `want`, the doubles to within 4 ULPs (as EXPECT_DOUBLE_EQ).
::testing::Matcher<const api::Progress&> ProgressIs(const api::Progress& want) {
  using ::testing::DoubleEq;
  using ::testing::Field;
  return ::testing::AllOf(Field("step", &api::Progress::step, want.step),
                          Field("epoch", &api::Progress::epoch, want.epoch),
                          Field("loss", &api::Progress::loss, DoubleEq(want.loss)),
                          Field("accuracy", &api::Progress::accuracy, DoubleEq(want.accuracy)),
                          Field("examples_per_second", &api::Progress::examples_per_second,
                                DoubleEq(want.examples_per_second)));
}

TEST(Progress, ReadsTheChiefsGauges) {
  auto p = ParseProgress(R"(# HELP kubetrain_worker_global_step Global step of the ps.
# TYPE kubetrain_worker_global_step gauge
kubetrain_worker_global_step{job="fm",role="chief",index="0",device="cpu"} 1200
kubetrain_worker_epoch{job="fm",role="chief",index="0",device="cpu"} 2
kubetrain_worker_loss{job="fm",role="chief",index="0",device="cpu"} 0.41
kubetrain_worker_accuracy{job="fm",role="chief",index="0",device="cpu"} 0.861
kubetrain_worker_examples_per_second{job="fm",role="chief",index="0",device="cpu"} 21000
)");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(*p, ProgressIs({.step = 1200,
                              .epoch = 2,
                              .loss = 0.41,
                              .accuracy = 0.861,
                              .examples_per_second = 21000}));
}

TEST(Progress, OtherMetricsAreNotFound) {
  EXPECT_EQ(ParseProgress("up 1\n").status().code(), absl::StatusCode::kNotFound);
}

TEST(FinalSummary, TheLastSummaryLineWinsAndOtherLinesAreSkipped) {
  auto p = ParseFinalSummary(
      "step=100 loss=0.5\n"
      R"({"event":"training_complete","test_accuracy":0.80,"steps":468,"epochs":1})"
      "\nnot json {\n"
      R"(kubetrain | {"event":"training_complete","test_accuracy":0.8735,"test_loss":0.3571,)"
      R"("steps":936,"epochs":2,"examples_per_sec":20150.5})"
      "\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(*p, ProgressIs({.step = 936,
                              .epoch = 2,
                              .loss = 0.3571,
                              .accuracy = 0.8735,
                              .examples_per_second = 20150.5}));
}

TEST(FinalSummary, MissingOrMalformedIsNotFound) {
  EXPECT_EQ(ParseFinalSummary("").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseFinalSummary("Error: out of memory\n").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseFinalSummary(R"({"event":"training_complete","steps":)").status().code(),
            absl::StatusCode::kNotFound);
  // Fields of the wrong type read as zero rather than throwing.
  auto p = ParseFinalSummary(R"({"event":"training_complete","steps":"many"})");
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(p->step, 0);
}

api::Progress At(int64_t step, int64_t epoch) {
  api::Progress p;
  p.step = step;
  p.epoch = epoch;
  return p;
}

TEST(ProgressPoller, WritesANewEpochAtOnceAndOtherChangesAtMostEveryInterval) {
  ProgressPoller poller({.min_write_interval = absl::Seconds(30)}, [](const std::string&) {});
  absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_TRUE(poller.WorthWriting(std::nullopt, absl::InfinitePast(), At(10, 0), t0));
  EXPECT_FALSE(poller.WorthWriting(At(10, 0), t0, At(10, 0), t0 + absl::Minutes(5)));
  EXPECT_FALSE(poller.WorthWriting(At(10, 0), t0, At(50, 0), t0 + absl::Seconds(29)));
  EXPECT_TRUE(poller.WorthWriting(At(10, 0), t0, At(50, 0), t0 + absl::Seconds(30)));
  EXPECT_TRUE(poller.WorthWriting(At(10, 0), t0, At(11, 1), t0 + absl::Seconds(1)));
}

TEST(ProgressPoller, ReadsOffTheCallersThreadAndAnnouncesOnlyWhatIsWorthWriting) {
  testing::FakeChief chief;
  ::kubetrain::testing::SilentListener silent;
  absl::Mutex mu;
  std::vector<std::string> announced;
  // Generous bounds: reads on a loaded machine (a test run with -j) take a while.
  ProgressPoller poller({.interval = absl::Milliseconds(50),
                         .timeout = absl::Seconds(2),
                         .min_write_interval = absl::Seconds(30),
                         .threads = 2},
                        [&](const std::string& key) {
                          absl::MutexLock lock(&mu);
                          announced.push_back(key);
                        });
  poller.Start();
  // Tracking never waits for a read, even of a chief that does not answer.
  absl::Time before = absl::Now();
  poller.Track("ns/silent", "127.0.0.1", silent.port());
  poller.Track("ns/job", "127.0.0.1", chief.port());
  // A read of the silent chief would take its 2 s timeout.
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));
  auto count = [&](const std::string& key) {
    absl::MutexLock lock(&mu);
    return std::count(announced.begin(), announced.end(), key);
  };
  using ::kubetrain::testing::Eventually;
  EXPECT_TRUE(Eventually([&] { return count("ns/job") >= 1; }, absl::Seconds(30)));
  EXPECT_EQ(count("ns/job"), 1);
  // The step keeps growing at the same epoch: read again and again, announced no more.
  // The silent chief does not hold the other one up.
  EXPECT_TRUE(Eventually([&] { return chief.reads() >= 10; }, absl::Seconds(30))) << chief.reads();
  EXPECT_EQ(count("ns/job"), 1);
  ASSERT_TRUE(poller.Latest("ns/job").has_value());
  EXPECT_GE(poller.Latest("ns/job")->step, 2);
  // A new epoch is announced at once.
  chief.set_epoch(1);
  EXPECT_TRUE(Eventually([&] { return count("ns/job") >= 2; }, absl::Seconds(30)));
  EXPECT_EQ(count("ns/job"), 2);
  EXPECT_EQ(count("ns/silent"), 0);
  EXPECT_FALSE(poller.Latest("ns/silent").has_value());
  // Untracked: no more reads.
  poller.Untrack("ns/job");
  EXPECT_FALSE(poller.Latest("ns/job").has_value());
  absl::SleepFor(absl::Milliseconds(2200));  // a read in flight ends within its timeout
  int reads = chief.reads();
  absl::SleepFor(absl::Milliseconds(300));  // more than the poll interval: no read comes
  EXPECT_EQ(chief.reads(), reads);
  // Stopping waits at most for a read in flight (the silent one's timeout).
  before = absl::Now();
  poller.Stop();
  EXPECT_LT(absl::Now() - before, absl::Seconds(3));
}

}  // namespace
}  // namespace kubetrain::controller
