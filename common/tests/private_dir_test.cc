#include "common/private_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/testing/scoped_env.h"
#include "common/testing/unique_temp_dir.h"

namespace kubetrain {
namespace {

namespace fs = std::filesystem;

class PrivateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.Make("private-dir-"));
    root_ = tmp_.path();
  }
  static unsigned Mode(const std::string& path) {
    struct stat st;
    EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  }
  ::kubetrain::testing::UniqueTempDir tmp_;
  std::string root_;
};

TEST_F(PrivateDirTest, MakesTheDirectoryAndItsParentsOwnerOnly) {
  umask(022);
  std::string dir = root_ + "/a/b/c";
  ASSERT_TRUE(EnsurePrivateDirectory(dir).ok());
  EXPECT_EQ(Mode(root_ + "/a"), 0700u);
  EXPECT_EQ(Mode(root_ + "/a/b"), 0700u);
  EXPECT_EQ(Mode(dir), 0700u);
  EXPECT_TRUE(EnsurePrivateDirectory(dir).ok());  // again: the same directory is fine
}

TEST_F(PrivateDirTest, AnOwnReadableDirectoryIsMadePrivate) {
  std::string dir = root_ + "/readable";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  chmod(dir.c_str(), 0755);
  ASSERT_TRUE(EnsurePrivateDirectory(dir).ok());
  EXPECT_EQ(Mode(dir), 0700u);
}

TEST_F(PrivateDirTest, ASymlinkIsRefusedNamingItsTarget) {
  std::string elsewhere = root_ + "/elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0700), 0);
  std::string link = root_ + "/checkpoints";
  fs::create_directory_symlink(elsewhere, link);
  absl::Status s = EnsurePrivateDirectory(link);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find(link + " is a symbolic link (to " + elsewhere + ")"),
            std::string::npos)
      << s;
}

TEST_F(PrivateDirTest, AWorldWritableDirectoryIsRefused) {
  std::string dir = root_ + "/shared";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  chmod(dir.c_str(), 0777);
  absl::Status s = EnsurePrivateDirectory(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("may be written by other users (mode 0777)"), std::string::npos) << s;
}

TEST_F(PrivateDirTest, ADirectoryOfAnotherUserIsRefusedNamingTheOwner) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a directory to another user needs root";
  std::string dir = root_ + "/planted";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.c_str(), 65534, 65534), 0);
  absl::Status s = EnsurePrivateDirectory(dir);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("uid 65534"), std::string::npos) << s;
  EXPECT_NE(s.message().find("not to"), std::string::npos) << s;
}

TEST_F(PrivateDirTest, EachUserHasAScratchFolderOfTheirOwn) {
  ::kubetrain::testing::ScopedEnv env({{"TMPDIR", root_}});
  // Another user's run made the shared name first: it no longer stands in the way.
  ASSERT_EQ(mkdir((root_ + "/kubetrain").c_str(), 0755), 0);
  absl::StatusOr<std::string> dir = UserScratchDirectory();
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, absl::StrCat(root_, "/kubetrain-", geteuid()));
  EXPECT_EQ(Mode(*dir), 0700u);
  absl::StatusOr<std::string> a = MakeUniqueDirectory(*dir, "job-20261129-010203");
  absl::StatusOr<std::string> b = MakeUniqueDirectory(*dir, "job-20261129-010203");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(Mode(*a), 0700u);
}

}  // namespace
}  // namespace kubetrain
