// A task told to stop (SIGTERM sets the flag Trainer::Run watches) returns promptly from every
// state it can wait in: the ps not up, a ps that accepts connections but never answers, the
// chief not having initialised the ps yet, and a sync pull waiting for a peer's push.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>

#include "common/testing/loopback.h"
#include "common/testing/temp_dir.h"
#include "ps/server.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/fashion_mnist_fixture.h"
#include "worker/tests/loopback.h"

namespace kubetrain::worker {
namespace {

using testing::ClosedAddress;

class TrainerStopTest : public FashionMnistTest {
 protected:
  TrainerOptions Options() {
    TrainerOptions o;
    o.epochs = 1;
    o.checkpoint_dir = ::kubetrain::testing::FreshTempDir(
        std::string("trainer_stop_") +
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    // Long enough that a task which ignores the stop flag is caught waiting.
    o.ready_timeout = absl::Seconds(20);
    return o;
  }

  // Runs the task, sets the stop flag once `ready()` holds and `settle` has passed, and returns
  // how long Run took to return after that.
  absl::Duration RunThenStop(const TrainerOptions& options, TaskIdentity id, absl::Duration settle,
                             const std::function<bool()>& ready = nullptr) {
    auto run = std::async(std::launch::async, [&] {
      CpuDevice device;
      Trainer trainer(options, id, device, &data_->train, &data_->test, nullptr);
      return trainer.Run(stop_);
    });
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (ready && !ready() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
    absl::SleepFor(settle);  // "still running after `settle`" is part of what is tested
    EXPECT_NE(run.wait_for(std::chrono::seconds(0)), std::future_status::ready)
        << "Run returned before it was stopped: " << run.get().status();
    stop_ = true;
    const absl::Time stopped = absl::Now();
    absl::StatusOr<TrainingSummary> result = run.get();
    const absl::Duration took = absl::Now() - stopped;
    EXPECT_FALSE(result.ok());
    return took;
  }

  std::atomic<bool> stop_{false};
};

TEST_F(TrainerStopTest, ChiefWaitingForAPsThatIsNotUpStopsPromptly) {
  const absl::Duration took =
      RunThenStop(Options(), {Role::kChief, 0, 2, {ClosedAddress()}}, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(1));
}

TEST_F(TrainerStopTest, WorkerCallingAPsThatNeverAnswersStopsPromptly) {
  ::kubetrain::testing::SilentListener silent;
  const absl::Duration took =
      RunThenStop(Options(), {Role::kWorker, 1, 2, {silent.address()}}, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(1));
}

TEST_F(TrainerStopTest, ChiefCallingAPsThatNeverAnswersStopsPromptly) {
  ::kubetrain::testing::SilentListener silent;
  const absl::Duration took =
      RunThenStop(Options(), {Role::kChief, 0, 2, {silent.address()}}, absl::Seconds(2));
  EXPECT_LT(took, absl::Seconds(1));
}

TEST_F(TrainerStopTest, WorkerWaitingForTheChiefToInitialiseStopsPromptly) {
  auto ps = ps::PsServer::Start({.address = "127.0.0.1:0"}, nullptr);
  ASSERT_TRUE(ps.ok()) << ps.status();
  // The retry backoff has grown to its longest (2 s) by now.
  const absl::Duration took =
      RunThenStop(Options(), {Role::kWorker, 1, 2, {(*ps)->address()}}, absl::Seconds(4.5));
  EXPECT_LT(took, absl::Seconds(1));
}

TEST_F(TrainerStopTest, SyncTaskWaitingInPullForAPeerStopsPromptly) {
  auto ps = ps::PsServer::Start({.address = "127.0.0.1:0"}, nullptr);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ps::PsServer& server = **ps;
  // The chief of two workers pushes step 0 and then waits for the other, which never comes.
  const absl::Duration took =
      RunThenStop(Options(), {Role::kChief, 0, 2, {server.address()}}, absl::Seconds(1.5),
                  [&] { return server.store().Status().initialized; });
  EXPECT_EQ(server.store().Status().global_step, 0);
  EXPECT_LT(took, absl::Seconds(1));
}

}  // namespace
}  // namespace kubetrain::worker
