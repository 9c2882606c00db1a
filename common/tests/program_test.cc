#include "common/program.h"

#include <gtest/gtest.h>

#include <cstdlib>

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

}  // namespace
}  // namespace kubetrain
