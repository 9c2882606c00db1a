#include "operator/kube/rate_limiter.h"

#include <gtest/gtest.h>

namespace kubetrain::kube {
namespace {

TEST(TokenBucket, BurstIsFreeThenCallersQueueAtQps) {
  TokenBucket bucket(10, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
  absl::Duration fourth = bucket.Reserve();
  absl::Duration fifth = bucket.Reserve();
  EXPECT_GT(fourth, absl::Milliseconds(80));
  EXPECT_LE(fourth, absl::Milliseconds(100));
  EXPECT_GT(fifth, absl::Milliseconds(180));  // each waiter gets the next token in line
  EXPECT_LE(fifth, absl::Milliseconds(200));
}

TEST(TokenBucket, NonPositiveQpsDisablesLimiting) {
  TokenBucket bucket(0, 1);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(bucket.Reserve(), absl::ZeroDuration());
}

}  // namespace
}  // namespace kubetrain::kube
