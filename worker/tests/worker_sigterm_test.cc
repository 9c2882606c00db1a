// kubetrain-worker as a process: SIGTERM ends it within 2 s, exit status 143, whatever it is
// waiting on.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/temp_dir.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/tests/loopback.h"
#include "worker/tests/spawn_logged.h"

namespace kubetrain::worker {
namespace {

using testing::ClosedAddress;

class WorkerSigtermTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(kDefaultFashionMnistDir))) {
      GTEST_SKIP() << "Fashion-MNIST not installed (dataset-fashion-mnist)";
    }
    // The test's own empty folder: an earlier run's logs and checkpoints would otherwise answer
    // a wait before this run's worker got there, or be resumed from.
    dir_ = ::kubetrain::testing::FreshTempDir(
        std::string("worker_sigterm_") +
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }

  // Starts the worker with `args`, its output to a log of its own in the test's folder.
  pid_t Start(std::vector<std::string> args) {
    args.insert(args.begin(), KUBETRAIN_WORKER_BIN);
    log_ = dir_ + "/worker-" + std::to_string(started_++) + ".log";
    return testing::SpawnLogged(std::move(args), log_);
  }

  // Sends SIGTERM after `delay`; the exit status and the seconds from signal to exit (or -1
  // when it had not exited after 5 s, after which it is killed).
  std::pair<int, double> TerminateAfter(pid_t pid, absl::Duration delay) {
    absl::SleepFor(delay);
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, WNOHANG), 0) << "exited before SIGTERM; see " << log_;
    kill(pid, SIGTERM);
    const absl::Time sent = absl::Now();
    while (absl::Now() - sent < absl::Seconds(5)) {
      if (waitpid(pid, &status, WNOHANG) == pid) {
        return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                absl::ToDoubleSeconds(absl::Now() - sent)};
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return {-1, -1};
  }

  // Expects what TerminateAfter reported to be a stop as SIGTERM asks: exit status 143 within
  // 2 s of the signal.
  void ExpectExited143Within2s(const std::pair<int, double>& stopped) {
    const auto [code, seconds] = stopped;
    EXPECT_EQ(code, 143) << "see " << log_;
    EXPECT_GE(seconds, 0) << "still running 5 s after SIGTERM; see " << log_;
    EXPECT_LT(seconds, 2.0) << "see " << log_;
  }

  std::vector<std::string> WorkerArgs(const std::string& ps) {
    return {"--ps=" + ps,          "--worker-index=1",         "--num-workers=2",
            "--device=cpu",        "--bind-address=127.0.0.1", "--metrics-port=0",
            "--ready-timeout=60s", "--job-name=sigterm-test"};
  }

  // Waits up to `timeout` for `text` in the log of the last Start; false if it never came.
  bool WaitForLog(const std::string& path, const std::string& text, absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      std::ifstream in(path);
      std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (contents.find(text) != std::string::npos) return true;
      absl::SleepFor(absl::Milliseconds(100));
    }
    return false;
  }
  // Until the worker's log has `text`; kills it (and reaps it) when it never comes.
  bool WaitForLogOrKill(pid_t pid, const std::string& text) {
    if (WaitForLog(log_, text, absl::Seconds(60))) return true;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return false;
  }

  std::string dir_;  // the test's own, emptied in SetUp
  std::string log_;  // the last Start's
  int started_ = 0;
};

TEST_F(WorkerSigtermTest, StopsWhileLoadingTheData) {
  pid_t pid = Start(WorkerArgs(ClosedAddress()));
  // Early, before the data has loaded: the phase under test, which logs nothing to wait for.
  ExpectExited143Within2s(TerminateAfter(pid, absl::Milliseconds(300)));
}

TEST_F(WorkerSigtermTest, StopsWhileWaitingForTheParameterServers) {
  pid_t pid = Start(WorkerArgs(ClosedAddress()));
  ASSERT_TRUE(WaitForLogOrKill(pid, "Waiting for the parameter servers")) << "see " << log_;
  ExpectExited143Within2s(TerminateAfter(pid, absl::ZeroDuration()));
}

TEST_F(WorkerSigtermTest, ChiefStopsWhileWaitingForTheParameterServers) {
  std::vector<std::string> args = WorkerArgs(ClosedAddress());
  args[1] = "--worker-index=0";
  args.push_back("--checkpoint-dir=" + dir_ + "/checkpoints");
  pid_t pid = Start(args);
  ASSERT_TRUE(WaitForLogOrKill(pid, "Waiting for parameter servers")) << "see " << log_;
  ExpectExited143Within2s(TerminateAfter(pid, absl::ZeroDuration()));
}

// A rank blocked inside a Gloo collective whose peer stopped answering cannot poll the stop
// flag; the stop watchdog still ends it within 2 s.
TEST_F(WorkerSigtermTest, AllReduceRankStopsWhileBlockedInACollective) {
  const std::string coordinator = ClosedAddress();
  std::vector<std::string> common = {"--mode=allreduce",
                                     "--coordinator=" + coordinator,
                                     "--num-workers=2",
                                     "--device=cpu",
                                     "--bind-address=127.0.0.1",
                                     "--metrics-port=0",
                                     "--ready-timeout=60s",
                                     "--log-every=1s",
                                     "--job-name=sigterm-allreduce"};
  std::vector<std::string> chief_args = common;
  chief_args.push_back("--worker-index=0");
  chief_args.push_back("--checkpoint-dir=" + dir_ + "/checkpoints");
  pid_t chief = Start(chief_args);
  const std::string chief_log = log_;
  std::vector<std::string> peer_args = common;
  peer_args.push_back("--worker-index=1");
  pid_t peer = Start(peer_args);
  ASSERT_TRUE(WaitForLog(chief_log, "msg=progress", absl::Seconds(90)))
      << "the two ranks did not start training; see " << chief_log << " and " << log_;
  kill(peer, SIGSTOP);  // the chief's next all-reduce now waits on a peer that never answers
  log_ = chief_log;
  const std::pair<int, double> stopped = TerminateAfter(chief, absl::Milliseconds(500));
  kill(peer, SIGKILL);
  waitpid(peer, nullptr, 0);
  ExpectExited143Within2s(stopped);
}

}  // namespace
}  // namespace kubetrain::worker
