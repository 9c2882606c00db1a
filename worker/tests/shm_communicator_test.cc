// The shared-memory communicator against a segment another process of the user corrupts: a
// header that says other sizes, a file truncated under the ranks, a non-finite value in a rank's
// contribution, ranks killed during the rendezvous, a /dev/shm too small. Every rank must fail
// with an error that names what happened (or fall back to TCP saying why), never crash, and no
// segment may stay behind. The ranks are threads joined to one coordinator on 127.0.0.1, and the
// "other process" opens the segment by the name rank 0 says at the rendezvous.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "common/testing/status_matchers.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/shm_communicator.h"
#include "worker/collective/shm_fault_guard.h"
#include "worker/collective/shm_layout.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::Not;

// A directory of this test's own standing in for /dev/shm (a tmpfs where there is one).
std::string SegmentDir(const std::string& name) {
  const std::filesystem::path base = std::filesystem::exists("/dev/shm")
                                         ? std::filesystem::path("/dev/shm")
                                         : std::filesystem::temp_directory_path();
  std::filesystem::path dir =
      base / ("kubetrain-test-shm-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// The segment files in `dir`.
std::vector<std::string> Segments(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().rfind(std::string(kShmNamePrefix), 0) == 0) {
      found.push_back(e.path().string());
    }
  }
  return found;
}

// A rank's store as it is, except that once it reads rank 0's segment name, `tap` runs first
// (another process acting on the segment at that moment); an error from it ends the Get.
class TappedStore final : public KeyValueStore {
 public:
  TappedStore(KeyValueStore& inner, std::function<absl::Status(const std::string&)> tap)
      : inner_(inner), tap_(std::move(tap)) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    return inner_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    absl::StatusOr<std::string> value = inner_.Get(key, timeout);
    if (value.ok() && key == "shm/name" && tap_) RETURN_IF_ERROR(tap_(*value));
    return value;
  }

 private:
  KeyValueStore& inner_;
  std::function<absl::Status(const std::string&)> tap_;
};

// Two (or `n`) ranks on threads in `dir`; rank 1's store is tapped with `tap`; `body` gets each
// rank's TryCreate result.
void TwoRanks(
    const std::string& dir, std::function<absl::Status(const std::string&)> tap,
    const std::function<void(int, absl::StatusOr<std::unique_ptr<ShmCommunicator>>)>& body,
    int n = 2) {
  auto server = CoordinatorServer::Start({"127.0.0.1:0", n});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto client =
          CoordinatorClient::Connect({.address = absl::StrCat("127.0.0.1:", (*server)->port()),
                                      .rank = rank,
                                      .world_size = n,
                                      .connect_timeout = absl::Seconds(10)});
      ASSERT_TRUE(client.ok()) << client.status();
      TappedStore store(**client, rank == 1 ? tap : nullptr);
      body(rank,
           ShmCommunicator::TryCreate(
               store, {.rank = rank, .size = n, .timeout = absl::Seconds(20), .directory = dir}));
    });
  }
  for (auto& t : threads) t.join();
}

// The other process: opens the segment rank 0 named (keeping it open in `fd`).
std::function<absl::Status(const std::string&)> OpenTheSegment(const std::string& dir, int* fd) {
  return [dir, fd](const std::string& said) {
    const std::string name = said.substr(0, said.find(' '));
    *fd = ::open((dir + name).c_str(), O_RDWR | O_CLOEXEC);
    EXPECT_GE(*fd, 0) << dir + name;
    return absl::OkStatus();
  };
}

void WriteChunkBytes(int fd, uint64_t value) {
  ASSERT_EQ(::pwrite(fd, &value, sizeof(value), offsetof(ShmHeader, chunk_bytes)),
            static_cast<ssize_t>(sizeof(value)));
}

// Connected ranks that all-reduce once, wait while `corrupt` acts on the segment, then all-reduce
// `count` floats again: `check` gets each rank's second result.
void CorruptBetweenCollectives(const std::string& dir, size_t count,
                               const std::function<void(int fd)>& corrupt,
                               const std::function<void(int, const absl::Status&)>& check) {
  int fd = -1;
  absl::BlockingCounter first_done(2);
  absl::Notification corrupted;
  std::thread other([&] {
    first_done.Wait();
    corrupt(fd);
    corrupted.Notify();
  });
  TwoRanks(dir, OpenTheSegment(dir, &fd), [&](int rank, auto comm) {
    ASSERT_TRUE(comm.ok()) << comm.status();
    ASSERT_NE(*comm, nullptr);
    std::vector<float> data(count, 1.0f);
    EXPECT_THAT((*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum), IsOk());
    first_done.DecrementCount();
    corrupted.WaitForNotification();
    check(rank, (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum));
    EXPECT_FALSE((*comm)->Barrier().ok()) << "a broken communicator stays broken";
  });
  other.join();
  if (fd >= 0) ::close(fd);
}

TEST(ShmSegment, AHeaderThatSaysOtherSizesAtTheRendezvousIsAnErrorOnEveryRank) {
  const std::string dir = SegmentDir("header-early");
  int fd = -1;
  auto open_and_corrupt = [&](const std::string& said) {
    RETURN_IF_ERROR(OpenTheSegment(dir, &fd)(said));
    WriteChunkBytes(fd, uint64_t{1} << 40);
    return absl::OkStatus();
  };
  TwoRanks(dir, open_and_corrupt, [&](int rank, auto comm) {
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kDataLoss) << "rank " << rank;
    EXPECT_THAT(comm.status().message(),
                HasSubstr("header field chunk_bytes is 1099511627776, expected 4194304"));
    EXPECT_THAT(comm.status().message(), HasSubstr("rank 1 found"));
  });
  ::close(fd);
  EXPECT_THAT(Segments(dir), ::testing::IsEmpty());
  std::filesystem::remove_all(dir);
}

TEST(ShmSegment, AHeaderRewrittenAfterTheRendezvousFailsTheNextCollectiveNotTheProcess) {
  const std::string dir = SegmentDir("header-late");
  for (size_t count : {size_t{100}, size_t{1} << 20}) {  // whole chunks and shared-out ones
    CorruptBetweenCollectives(
        dir, count, [](int fd) { WriteChunkBytes(fd, uint64_t{1} << 40); },
        [](int rank, const absl::Status& s) {
          EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "rank " << rank << ": " << s;
          EXPECT_THAT(s.message(),
                      HasSubstr("header field chunk_bytes is 1099511627776, expected 4194304"));
        });
  }
  EXPECT_THAT(Segments(dir), ::testing::IsEmpty());
  std::filesystem::remove_all(dir);
}

TEST(ShmSegment, ASegmentTruncatedUnderTheRanksIsAnErrorOnEveryRankNotSigbus) {
  const std::string dir = SegmentDir("truncated");
  for (size_t count : {size_t{100}, size_t{1} << 20}) {
    CorruptBetweenCollectives(
        dir, count, [](int fd) { ASSERT_EQ(::ftruncate(fd, 0), 0); },
        [&](int rank, const absl::Status& s) {
          EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "rank " << rank << ": " << s;
          EXPECT_THAT(s.message(), HasSubstr(absl::StrCat(" shrank to 0 bytes under rank ", rank,
                                                          ": another process truncated it")));
          EXPECT_THAT(s.message(), HasSubstr(dir + "/kubetrain-"));
        });
  }
  // Truncated before rank 1 opened it: rank 1 says so and every rank fails alike.
  int fd = -1;
  auto open_and_truncate = [&](const std::string& said) {
    RETURN_IF_ERROR(OpenTheSegment(dir, &fd)(said));
    EXPECT_EQ(::ftruncate(fd, 0), 0);
    return absl::OkStatus();
  };
  TwoRanks(dir, open_and_truncate, [&](int rank, auto comm) {
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kDataLoss) << "rank " << rank;
    EXPECT_THAT(comm.status().message(), HasSubstr("is 0 bytes, expected"));
  });
  ::close(fd);
  EXPECT_THAT(Segments(dir), ::testing::IsEmpty());
  std::filesystem::remove_all(dir);
}

// A SIGBUS that is not about a watched segment still ends the process as it would have: a fault
// in another mapping, and one sent by kill().
TEST(ShmSegmentDeathTest, ASigbusElsewhereStillKillsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto watch_one = [] {
    // What the process had before the guard's handler: the default (a sanitizer's handler
    // would report and exit instead).
    ::signal(SIGBUS, SIG_DFL);
    void* watched =
        ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    auto guard = ShmFaultGuard::Watch(watched, 4096);
    if (!guard.ok()) std::abort();
    return std::move(*guard);
  };
  auto fault_elsewhere = [&] {
    ShmFaultGuard guard = watch_one();
    const int fd = ::memfd_create("other", MFD_CLOEXEC);  // no file to leave behind
    if (fd < 0 || ::ftruncate(fd, 4096) != 0) std::abort();
    auto* p = static_cast<volatile char*>(
        ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (p == MAP_FAILED || ::ftruncate(fd, 0) != 0) std::abort();
    p[0] = 1;  // past the end of its file: SIGBUS
  };
  EXPECT_EXIT(fault_elsewhere(), ::testing::KilledBySignal(SIGBUS), "");
  auto sent = [&] {
    ShmFaultGuard guard = watch_one();
    ::kill(::getpid(), SIGBUS);
    std::abort();
  };
  EXPECT_EXIT(sent(), ::testing::KilledBySignal(SIGBUS), "");
}

// A NaN in one rank's gradient: every rank names that rank and the element, none says a peer
// left; whichever rank reduces the element (its own or another's part), and in either way of
// reducing a chunk.
TEST(ShmSegment, ANonFiniteValueInARanksGradientIsNamedOnEveryRank) {
  const std::string dir = SegmentDir("nan");
  const size_t big = (size_t{4} << 20) / sizeof(float) + 37;
  struct Case {
    size_t count;
    int culprit;
    size_t element;
    float value;
  };
  for (const Case& c : {Case{100, 1, 17, std::numeric_limits<float>::quiet_NaN()},
                        Case{big, 1, 5, std::numeric_limits<float>::quiet_NaN()},
                        Case{big, 0, big - 100, std::numeric_limits<float>::infinity()},
                        Case{big, 0, big - 1, -std::numeric_limits<float>::infinity()}}) {
    TwoRanks(dir, nullptr, [&](int rank, auto comm) {
      ASSERT_TRUE(comm.ok()) << comm.status();
      ASSERT_NE(*comm, nullptr);
      std::vector<float> data(c.count, 0.5f);
      if (rank == c.culprit) data[c.element] = c.value;
      absl::Status s = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "rank " << rank << ": " << s;
      EXPECT_THAT(s.message(),
                  HasSubstr(absl::StrCat("rank ", c.culprit,
                                         "'s gradient holds a non-finite value at element ",
                                         c.element, " (")));
      EXPECT_THAT(s.message(), Not(HasSubstr("left")));
    });
  }
  // A maximum that would drop the NaN finds it all the same.
  TwoRanks(dir, nullptr, [&](int rank, auto comm) {
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<float> data(8, 1.0f);
    if (rank == 1) data[3] = std::numeric_limits<float>::quiet_NaN();
    absl::Status s = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kMax);
    EXPECT_THAT(s.message(), HasSubstr("rank 1's gradient holds a non-finite value at element 3"));
  });
  EXPECT_THAT(Segments(dir), ::testing::IsEmpty());
  std::filesystem::remove_all(dir);
}

// A record of a non-finite value that another rank is still writing (or died writing) when this
// rank finds one too: the rank reports the value, never OK as if its data were clean.
TEST(ShmSegment, ANonFiniteValueIsReportedWhileAnotherRanksRecordIsHalfWritten) {
  const std::string dir = SegmentDir("half-record");
  int fd = -1;
  auto open_and_begin_a_record = [&](const std::string& said) {
    RETURN_IF_ERROR(OpenTheSegment(dir, &fd)(said));
    const uint32_t being_written = 1;
    EXPECT_EQ(::pwrite(fd, &being_written, sizeof(being_written), offsetof(ShmSegment, failure)),
              static_cast<ssize_t>(sizeof(being_written)));
    return absl::OkStatus();
  };
  TwoRanks(dir, open_and_begin_a_record, [&](int rank, auto comm) {
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<float> data(100, 0.5f);
    if (rank == 1) data[17] = std::numeric_limits<float>::quiet_NaN();
    absl::Status s = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "rank " << rank << ": " << s;
    EXPECT_THAT(s.message(),
                HasSubstr("rank 1's gradient holds a non-finite value at element 17 ("));
  });
  ::close(fd);
  EXPECT_THAT(Segments(dir), ::testing::IsEmpty());
  std::filesystem::remove_all(dir);
}

// Runs shm_rank_helper with `args`, its stdout and stderr into `out` (-1: not read).
pid_t SpawnHelper(std::vector<std::string> args, int* out) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  args.insert(args.begin(), KUBETRAIN_SHM_RANK_HELPER);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = -1;
  const int rc = posix_spawn(&child, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  *out = pipe_fds[0];
  return rc == 0 ? child : -1;
}

std::string ReadAll(int fd) {
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;) text.append(buf, n);
  ::close(fd);
  return text;
}

// Rank 0 killed (SIGKILL) while it waits for the others to open its segment leaves the file; the
// next rendezvous in that directory finds nobody holds it and removes it, and leaves none itself.
TEST(ShmSegment, ASegmentLeftByRanksKilledDuringTheRendezvousIsSweptByTheNext) {
  const std::string dir = SegmentDir("killed");
  auto server = CoordinatorServer::Start({"127.0.0.1:0", 2});
  ASSERT_TRUE(server.ok()) << server.status();
  int out = -1;
  const pid_t child = SpawnHelper({std::to_string((*server)->port()), "0", "2", dir}, &out);
  ASSERT_GT(child, 0);
  auto client =
      CoordinatorClient::Connect({.address = absl::StrCat("127.0.0.1:", (*server)->port()),
                                  .rank = 1,
                                  .world_size = 2,
                                  .connect_timeout = absl::Seconds(10)});
  ASSERT_TRUE(client.ok()) << client.status();
  TappedStore store(**client, [&](const std::string&) {
    // Rank 0 has made and named its segment and waits for rank 1: killed now.
    EXPECT_EQ(::kill(child, SIGKILL), 0);
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    return absl::AbortedError("rank 0 was killed");
  });
  auto comm = ShmCommunicator::TryCreate(
      store, {.rank = 1, .size = 2, .timeout = absl::Seconds(20), .directory = dir});
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kAborted);
  ReadAll(out);
  ASSERT_EQ(Segments(dir).size(), 1u) << "what the killed rank left";

  TwoRanks(dir, nullptr, [&](int, auto next) {
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_NE(*next, nullptr);
    EXPECT_THAT((*next)->Barrier(), IsOk());
  });
  EXPECT_THAT(Segments(dir), ::testing::IsEmpty());
  std::filesystem::remove_all(dir);
}

// A /dev/shm too small for the segment (a pod's default 64 MiB, here 64 KiB) is said as such, with
// what to do, and the ranks go on without it.
TEST(ShmSegment, AFullDevShmSaysSoAndWhatToDo) {
  auto server = CoordinatorServer::Start({"127.0.0.1:0", 1});
  ASSERT_TRUE(server.ok()) << server.status();
  int out = -1;
  const pid_t child = SpawnHelper({std::to_string((*server)->port()), "0", "1", "", "65536"}, &out);
  ASSERT_GT(child, 0);
  const std::string said = ReadAll(out);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << said;
  const uint64_t needed = ShmLayoutFor(1, size_t{4} << 20)->segment_bytes;
  EXPECT_THAT(said, HasSubstr(absl::StrCat("/dev/shm is full: ", needed,
                                           " bytes needed for the all-reduce segment, ")));
  EXPECT_THAT(said, HasSubstr("enlarge it"));
  EXPECT_THAT(said, HasSubstr("--communicator gloo"));
  EXPECT_THAT(said, HasSubstr("no shared-memory communicator: none")) << "it goes on without";
}

}  // namespace
}  // namespace kubetrain::worker
