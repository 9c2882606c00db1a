#include "operator/kube/rate_limiter.h"

#include <gtest/gtest.h>

namespace kubetrain::kube {
namespace {

TEST(TokenBucket, BurstIsFreeThenCallersQueueAtQps) {
  absl::Time now = absl::FromUnixSeconds(1000);
  TokenBucket bucket(10, 3, [&] { return now; });
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(100));
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(200));  // each waiter gets the next token in line
  now += absl::Seconds(1);  // 10 tokens later: the 2 owed are paid, 3 (the burst) saved up
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  EXPECT_EQ(bucket.Reserve(), absl::Milliseconds(100));
}

TEST(TokenBucket, NonPositiveQpsDisablesLimiting) {
  TokenBucket bucket(0, 1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
}

}  // namespace
}  // namespace kubetrain::kube
