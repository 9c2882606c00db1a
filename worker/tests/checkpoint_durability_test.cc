// kubetrain-worker as a process: a chief told its checkpoints do not outlive its pod
// (KUBETRAIN_CHECKPOINT_DURABLE=false, set by the operator) says so at start.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/scoped_env.h"
#include "worker/tests/loopback.h"
#include "worker/tests/spawn_logged.h"

namespace kubetrain::worker {
namespace {

constexpr char kWarning[] = "Checkpoints are inside the pod and are lost when it is recreated";

class CheckpointDurabilityTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Runs a chief whose data folder does not exist: it opens its checkpoint directory, then
  // fails loading the data. Its output.
  std::string RunChief(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {KUBETRAIN_WORKER_BIN,
                                     "--ps=" + testing::ClosedAddress(),
                                     "--worker-index=0",
                                     "--num-workers=1",
                                     "--device=cpu",
                                     "--bind-address=127.0.0.1",
                                     "--metrics-port=0",
                                     "--job-name=durability-test",
                                     "--data-dir=" + dir_ + "/no-data",
                                     "--checkpoint-dir=" + dir_ + "/ckpt"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string log = dir_ + "/worker.log";
    pid_t pid = testing::SpawnLogged(args, log);
    int status = 0;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (waitpid(pid, &status, WNOHANG) != pid) {
      if (absl::Now() > give_up) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        ADD_FAILURE() << "the chief did not exit";
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
    std::ifstream in(log);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string dir_ = ::testing::TempDir() + "/checkpoint_durability_" + std::to_string(getpid());
};

TEST_F(CheckpointDurabilityTest, AChiefWithCheckpointsInItsPodWarnsAtStart) {
  std::filesystem::create_directories(dir_);
  std::string out = RunChief({"--checkpoint-durable=false"});
  EXPECT_NE(out.find(kWarning), std::string::npos) << out;
  EXPECT_NE(out.find(dir_ + "/ckpt"), std::string::npos) << out;
}

TEST_F(CheckpointDurabilityTest, TheOperatorsEnvironmentVariableIsEnough) {
  std::filesystem::create_directories(dir_);
  std::string out;
  {
    ::kubetrain::testing::ScopedEnv env({{"KUBETRAIN_CHECKPOINT_DURABLE", "false"}});
    out = RunChief({});
  }
  EXPECT_NE(out.find(kWarning), std::string::npos) << out;
}

TEST_F(CheckpointDurabilityTest, DurableOrLocalCheckpointsAreNotWarnedAbout) {
  std::filesystem::create_directories(dir_);
  std::string out = RunChief({});
  EXPECT_EQ(out.find(kWarning), std::string::npos) << out;
  // It did get as far as the data: the warning would have come before.
  EXPECT_NE(out.find("no-data"), std::string::npos) << out;
}

}  // namespace
}  // namespace kubetrain::worker
