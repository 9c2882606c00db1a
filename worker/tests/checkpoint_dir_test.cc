// The checkpoint directory as another local user or a second run would meet it: private files and
// folders, refused directories (another user's, too open, a symlink, below a folder someone else
// could change), the lock against a second run, partial files and the start-up probe.
#include "worker/runtime/checkpoint_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/runtime/checkpoint.h"
#include "worker/tests/file_size_limit.h"
#include "worker/tests/loopback.h"
#include "worker/tests/spawn_logged.h"

namespace kubetrain::worker::checkpoint_dir_test {
namespace {

using ::kubetrain::testing::FreshTempDir;
using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::kubetrain::worker::testing::FileSizeLimit;
using ::kubetrain::worker::testing::SpawnLogged;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

constexpr uid_t kOtherUser = 65534;  // nobody

ps::ModelState SmallState(int64_t step) {
  ps::ModelState s;
  s.config.mode = ps::UpdateMode::kSync;
  s.config.replicas_to_aggregate = 1;
  s.global_step = step;
  s.run_id = "run-1";
  s.variables.push_back({"dense1/kernel", {1.5f, -2.0f, float(step)}, {}});
  return s;
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::vector<std::string> Temporaries(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".tmp") found.push_back(e.path().filename());
  }
  return found;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Another user's files need root to make.
#define SKIP_UNLESS_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another user"

TEST(CheckpointDir, MakesFoldersAndFilesPrivateWhateverTheUmask) {
  const std::string base = FreshTempDir("ckpt_dir_private");
  const std::string dir = base + "/job/checkpoints";
  const mode_t umask_was = umask(0);  // the widest: mkdir 0777, a 0644 file stays 0644
  auto path = Checkpointer({dir, 3}).Save(SmallState(1), "mlp");
  umask(umask_was);
  ASSERT_THAT(path, IsOk());
  EXPECT_EQ(ModeOf(base), 0700u);
  EXPECT_EQ(ModeOf(base + "/job"), 0700u);
  EXPECT_EQ(ModeOf(dir), 0700u);
  EXPECT_EQ(ModeOf(*path), 0600u);
  EXPECT_EQ(ModeOf(dir + "/checkpoint.json"), 0600u);
  EXPECT_EQ(ModeOf(dir + "/checkpoint.lock"), 0600u);
  fs::remove_all(base);
}

TEST(CheckpointDir, RefusesAnotherUsersDirectoryAndRestoresNothingFromIt) {
  SKIP_UNLESS_ROOT();
  const std::string dir = FreshTempDir("ckpt_dir_planted");
  {
    // What another user left: a directory of theirs holding a checkpoint.
    ASSERT_THAT(Checkpointer({dir, 3}).Save(SmallState(7), "mlp"), IsOk());
  }
  for (const auto& e : fs::directory_iterator(dir))
    ASSERT_EQ(lchown(e.path().c_str(), kOtherUser, kOtherUser), 0);
  ASSERT_EQ(chown(dir.c_str(), kOtherUser, kOtherUser), 0);
  auto latest = Checkpointer({dir, 3}).LoadLatest("mlp");
  EXPECT_THAT(latest,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("checkpoint directory " + dir + " is owned by uid " +
                                       std::to_string(kOtherUser)),
                             HasSubstr("not by this user (uid 0"), HasSubstr("--checkpoint-dir"))));
  fs::remove_all(dir);
}

TEST(CheckpointDir, RefusesADirectoryOthersCanWrite) {
  const std::string dir = FreshTempDir("ckpt_dir_open");
  fs::create_directories(dir);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  auto saved = Checkpointer({dir, 3}).Save(SmallState(1), "mlp");
  EXPECT_THAT(saved, StatusIs(absl::StatusCode::kFailedPrecondition,
                              AllOf(HasSubstr(dir), HasSubstr("mode 0777"),
                                    HasSubstr("chmod go-w " + dir))));
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

// A pod's emptyDir is 0777 and an fsGroup volume 2775: a checkpoint directory the chief makes
// inside one is its own and private, so the run goes ahead.
TEST(CheckpointDir, ANewDirectoryInsideAVolumeOthersCanWriteIsUsed) {
  const std::string volume = FreshTempDir("ckpt_dir_volume");
  fs::create_directories(volume);
  ASSERT_EQ(chmod(volume.c_str(), 0777), 0);
  auto saved = Checkpointer({volume + "/checkpoints", 3}).Save(SmallState(1), "mlp");
  EXPECT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(ModeOf(volume + "/checkpoints"), 0700u);
  fs::remove_all(volume);
}

TEST(CheckpointDir, RefusesASymlinkAndWritesNothingWhereItPoints) {
  const std::string base = FreshTempDir("ckpt_dir_symlink");
  fs::create_directories(base + "/elsewhere");
  fs::create_directory_symlink(base + "/elsewhere", base + "/checkpoints");
  auto saved = Checkpointer({base + "/checkpoints", 3}).Save(SmallState(1), "mlp");
  EXPECT_THAT(
      saved,
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr(base + "/checkpoints is a symlink (to " + base + "/elsewhere)"),
                     HasSubstr("set --checkpoint-dir to the real directory"))));
  EXPECT_TRUE(fs::is_empty(base + "/elsewhere"));
  fs::remove_all(base);
}

// The predictable default path: another user makes its first folder and links the job's folder
// to a directory of their choosing (here one root owns), which the run would fill.
TEST(CheckpointDir, RefusesAPathThroughAFolderAnotherUserOwns) {
  SKIP_UNLESS_ROOT();
  const std::string base = fs::path(FreshTempDir("ckpt_dir_parent")).lexically_normal();
  fs::create_directories(base + "/kubetrain");
  fs::create_directories(base + "/chosen");
  fs::create_directory_symlink(base + "/chosen", base + "/kubetrain/job");
  ASSERT_EQ(lchown((base + "/kubetrain/job").c_str(), kOtherUser, kOtherUser), 0);
  ASSERT_EQ(chown((base + "/kubetrain").c_str(), kOtherUser, kOtherUser), 0);
  auto saved = Checkpointer({base + "/kubetrain/job/checkpoints", 3}).Save(SmallState(1), "mlp");
  EXPECT_THAT(saved, StatusIs(absl::StatusCode::kFailedPrecondition,
                              AllOf(HasSubstr("the folder " + base +
                                              "/kubetrain above it is "
                                              "owned by uid " +
                                              std::to_string(kOtherUser)),
                                    HasSubstr("--checkpoint-dir"))));
  EXPECT_TRUE(fs::is_empty(base + "/chosen"));
  fs::remove_all(base);
}

TEST(CheckpointDir, FollowsASymlinkOfTheUsersOwnAboveTheDirectory) {
  const std::string base = FreshTempDir("ckpt_dir_own_link");
  fs::create_directories(base + "/disk");
  fs::create_directory_symlink("disk", base + "/data");  // relative, as often
  auto saved = Checkpointer({base + "/data/run/checkpoints", 3}).Save(SmallState(1), "mlp");
  ASSERT_THAT(saved, IsOk());
  EXPECT_TRUE(fs::exists(base + "/disk/run/checkpoints/ckpt-1.pb"));
  fs::remove_all(base);
}

TEST(CheckpointDir, RemovesThePartialFilesOfEarlierRunsAndNothingElse) {
  const std::string dir = FreshTempDir("ckpt_dir_stale");
  fs::create_directories(dir);
  for (const char* name : {"ckpt-5.pb.tmp", "checkpoint.json.tmp", "notes.tmp"}) {
    std::ofstream(dir + "/" + name) << "partial";
  }
  ASSERT_THAT(Checkpointer({dir, 3}).Save(SmallState(6), "mlp"), IsOk());
  EXPECT_EQ(Temporaries(dir), std::vector<std::string>{"notes.tmp"});
  fs::remove_all(dir);
}

// A write over the file-size limit (or onto a full disk) fails with the cause named, leaves no
// partial file and the earlier checkpoint as it was; without SIGXFSZ ignored, this test's
// process would have been killed by the signal.
TEST(CheckpointDir, AFailedWriteSaysWhyAndLeavesNoPartialFile) {
  const std::string dir = FreshTempDir("ckpt_dir_efbig");
  Checkpointer c({dir, 3});
  ASSERT_THAT(c.Save(SmallState(1), "mlp"), IsOk());
  ps::ModelState big = SmallState(2);
  big.variables[0].values.assign(4096, 0.5f);
  absl::StatusOr<std::string> saved;
  {
    FileSizeLimit limit(1024);
    saved = c.Save(big, "mlp");
  }
  EXPECT_THAT(saved, StatusIs(absl::StatusCode::kUnavailable,
                              AllOf(HasSubstr("cannot write " + dir + "/ckpt-2.pb.tmp"),
                                    HasSubstr("File too large"),
                                    HasSubstr("the file-size limit, ulimit -f, is 1024 bytes"))));
  EXPECT_EQ(Temporaries(dir), std::vector<std::string>{});
  EXPECT_FALSE(fs::exists(dir + "/ckpt-2.pb"));
  auto latest = c.LoadLatest("mlp");
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  EXPECT_EQ((*latest)->global_step, 1);
  fs::remove_all(dir);
}

TEST(CheckpointDir, ADirectoryThatCannotBeWrittenIsRefusedAtOpen) {
  const std::string dir = FreshTempDir("ckpt_dir_probe");
  absl::StatusOr<std::shared_ptr<CheckpointDir>> opened;
  {
    FileSizeLimit limit(0);  // as a full disk: no byte can be written
    opened = CheckpointDir::Open(dir);
  }
  EXPECT_THAT(opened,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("checkpoint directory " + dir + " cannot be written"),
                             HasSubstr("File too large"),
                             HasSubstr("set --checkpoint-dir to another folder"))));
  EXPECT_EQ(Temporaries(dir), std::vector<std::string>{});
  fs::remove_all(dir);
}

TEST(CheckpointDir, OneProcessSharesItsDirectory) {
  const std::string dir = FreshTempDir("ckpt_dir_shared");
  auto first = CheckpointDir::Open(dir, "job-a");
  ASSERT_THAT(first, IsOk());
  auto second = CheckpointDir::Open(dir + "/.", "job-a");
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(first->get(), second->get());
  first->reset();
  second->reset();
  fs::remove_all(dir);
}

// Two chiefs in one directory: the second is refused, naming the first; the first's lock goes
// with its process, however it ends.
TEST(CheckpointDir, ASecondRunIsRefusedNamingTheFirstUntilTheFirstEnds) {
  if (!fs::exists(std::string(kDefaultFashionMnistDir))) {
    GTEST_SKIP() << "Fashion-MNIST not installed (dataset-fashion-mnist)";
  }
  const std::string dir = FreshTempDir("ckpt_dir_two_runs");
  const std::string log = dir + ".log";
  // The first run: a chief waiting for a ps that never answers.
  std::vector<std::string> args = {KUBETRAIN_WORKER_BIN,   "--ps=" + testing::ClosedAddress(),
                                   "--worker-index=0",     "--num-workers=1",
                                   "--device=cpu",         "--bind-address=127.0.0.1",
                                   "--metrics-port=0",     "--ready-timeout=60s",
                                   "--job-name=first-run", "--checkpoint-dir=" + dir};
  const pid_t first = SpawnLogged(args, log);
  ASSERT_GT(first, 0);
  // Until its lock file names it.
  const std::string holder = absl::StrCat("\"pid\":", first);
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (Contents(dir + "/checkpoint.lock").find(holder) == std::string::npos &&
         absl::Now() < give_up && waitpid(first, nullptr, WNOHANG) == 0) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_NE(Contents(dir + "/checkpoint.lock").find(holder), std::string::npos)
      << "the first run never took the lock; see " << log;

  auto second = CheckpointDir::Open(dir, "second-run");
  EXPECT_THAT(second,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("checkpoint directory " + dir +
                                       " is in use by another run: "
                                       "pid " +
                                       std::to_string(first) + " on host "),
                             HasSubstr("job first-run"), HasSubstr("another --checkpoint-dir"))));

  kill(first, SIGKILL);  // a crash: nothing unlocks but the kernel
  int status = 0;
  ASSERT_EQ(waitpid(first, &status, 0), first);
  auto after = CheckpointDir::Open(dir, "second-run");
  EXPECT_THAT(after, IsOk());
  after = absl::UnknownError("closed");
  fs::remove_all(dir);
  fs::remove(log);
}

#undef SKIP_UNLESS_ROOT

}  // namespace
}  // namespace kubetrain::worker::checkpoint_dir_test
