#include "common/backoff.h"

#include <gtest/gtest.h>

namespace kubetrain {
namespace {

TEST(Backoff, WithoutJitterDoublesUpToMax) {
  Backoff b({.initial = absl::Milliseconds(800), .max = absl::Seconds(5), .jitter = 0});
  EXPECT_EQ(b.Next(), absl::Milliseconds(800));
  EXPECT_EQ(b.Next(), absl::Milliseconds(1600));
  EXPECT_EQ(b.Next(), absl::Milliseconds(3200));
  EXPECT_EQ(b.Next(), absl::Seconds(5));
  EXPECT_EQ(b.Next(), absl::Seconds(5));
  EXPECT_EQ(b.attempts(), 5);
}

TEST(Backoff, JitterStaysWithinBandAndVaries) {
  Backoff b({.initial = absl::Seconds(1), .max = absl::Seconds(1), .jitter = 0.5}, 7);
  absl::Duration first = b.Next();
  bool varied = false;
  for (int i = 0; i < 50; ++i) {
    absl::Duration d = b.Next();
    EXPECT_GE(d, absl::Milliseconds(500));
    EXPECT_LE(d, absl::Seconds(1));
    varied |= d != first;
  }
  EXPECT_TRUE(varied);
}

TEST(Backoff, ResetStartsOver) {
  Backoff b({.initial = absl::Seconds(1), .max = absl::Seconds(30), .jitter = 0});
  b.Next();
  b.Next();
  b.Reset();
  EXPECT_EQ(b.Next(), absl::Seconds(1));
}

}  // namespace
}  // namespace kubetrain
