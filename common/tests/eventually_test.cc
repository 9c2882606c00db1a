#include "common/testing/eventually.h"

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain::testing {
namespace {

TEST(Eventually, ReturnsTrueOnceThePredicateHolds) {
  int calls = 0;
  EXPECT_TRUE(Eventually([&] { return ++calls == 3; }, absl::Seconds(5), absl::Milliseconds(1)));
  EXPECT_EQ(calls, 3);
}

TEST(Eventually, GivesUpAfterTheTimeout) {
  const absl::Time start = absl::Now();
  EXPECT_FALSE(Eventually([] { return false; }, absl::Milliseconds(50), absl::Milliseconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
}

}  // namespace
}  // namespace kubetrain::testing
