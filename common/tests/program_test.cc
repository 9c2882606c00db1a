#include "common/program.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace kubetrain {
namespace {

// Two locks taken in both orders by one thread: no deadlock, but a cycle in absl's lock graph,
// which its deadlock detection (on in Debian's libabsl) reports by aborting the process.
void TakeInBothOrders() {
  absl::Mutex a, b;
  {
    absl::MutexLock first(&a);
    absl::MutexLock second(&b);
  }
  {
    absl::MutexLock first(&b);
    absl::MutexLock second(&a);
  }
}

TEST(ProgramDeathTest, OptimisedProgramsDoNotTrackLockOrderAndDebugOnesDo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
#ifdef NDEBUG
  EXPECT_EXIT(
      {
        SetUpProgram();
        TakeInBothOrders();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
#else
  EXPECT_DEATH(
      {
        SetUpProgram();
        TakeInBothOrders();
      },
      "deadlock");
#endif
}

// Minor page faults this thread takes to allocate `bytes`, write them all and free them.
long FaultsToFillAndFree(size_t bytes) {
  rusage before{}, after{};
  ::getrusage(RUSAGE_THREAD, &before);
  char* buffer = static_cast<char*>(std::malloc(bytes));
  std::memset(buffer, 1, bytes);
  asm volatile("" : : "r"(buffer) : "memory");  // the compiler may not drop the pair
  std::free(buffer);
  ::getrusage(RUSAGE_THREAD, &after);
  return after.ru_minflt - before.ru_minflt;
}

// Whether this process's allocator takes the settings (glibc's does, unless the environment
// tunes it; a sanitizer's does not), asked in a child so that this process keeps its defaults.
bool AllocatorTakesSettings() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(SetUpLargeMessageAllocator() ? 0 : 3);
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A ps piece's answer, received again each step: with glibc's defaults each one lands in pages
// the kernel must find and zero again; after SetUpLargeMessageAllocator the second reuses the
// first's.
TEST(ProgramDeathTest, LargeMessageBuffersReuseTheirPagesAfterSetUp) {
  if (!AllocatorTakesSettings()) {
    GTEST_SKIP() << "the allocator is not glibc's malloc, or the environment tunes it";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  constexpr size_t kBytes = 8 << 20;
  const long pages = kBytes / ::sysconf(_SC_PAGESIZE);
  EXPECT_EXIT(
      {
        FaultsToFillAndFree(kBytes);
        std::exit(FaultsToFillAndFree(kBytes) > pages / 2 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        if (!SetUpLargeMessageAllocator()) std::exit(3);
        FaultsToFillAndFree(kBytes);
        std::exit(FaultsToFillAndFree(kBytes) < pages / 10 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// A malloc setting of the environment's is the operator's choice: it stays as given.
TEST(ProgramDeathTest, LargeMessageAllocatorLeavesTheEnvironmentsMallocSettings) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("MALLOC_ARENA_MAX", "4", 1);
        std::exit(SetUpLargeMessageAllocator() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        ::setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0", 1);
        std::exit(SetUpLargeMessageAllocator() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kubetrain
