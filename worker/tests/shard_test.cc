#include "worker/core/data/shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "common/testing/status_matchers.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(EpochPermutation, IsAPermutation) {
  const std::vector<int64_t> perm = EpochPermutation(1000, 7, 3);
  std::vector<int64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(Sorted(perm), expected);
  EXPECT_NE(perm, expected);
}

TEST(EpochPermutation, SameSeedAndEpochGiveSameOrder) {
  EXPECT_EQ(EpochPermutation(60000, 42, 5), EpochPermutation(60000, 42, 5));
}

TEST(EpochPermutation, DifferentEpochGivesDifferentOrder) {
  EXPECT_NE(EpochPermutation(60000, 42, 0), EpochPermutation(60000, 42, 1));
}

TEST(EpochPermutation, DifferentSeedGivesDifferentOrder) {
  EXPECT_NE(EpochPermutation(60000, 1, 0), EpochPermutation(60000, 2, 0));
}

// Workers built from different releases must still agree: pin the generator's output.
TEST(EpochPermutation, IsStableAcrossBuilds) {
  EXPECT_EQ(EpochPermutation(10, 42, 0), (std::vector<int64_t>{9, 2, 3, 8, 0, 7, 1, 4, 6, 5}));
}

TEST(EpochShard, ShardsAreDisjointAndCoverTheEpoch) {
  constexpr int kWorkers = 4;
  std::vector<int64_t> all;
  for (int i = 0; i < kWorkers; ++i) {
    auto shard = EpochShard(1000, {.seed = 9, .index = i, .count = kWorkers}, 2);
    ASSERT_TRUE(shard.ok()) << shard.status();
    EXPECT_EQ(shard->size(), 250u);
    all.insert(all.end(), shard->begin(), shard->end());
  }
  std::vector<int64_t> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(Sorted(all), expected);  // disjoint (no duplicates) and covering
}

TEST(EpochShard, RemainderIsTheTailOfThePermutationAndDropped) {
  constexpr int kWorkers = 4;
  constexpr int64_t kN = 1003;
  std::set<int64_t> seen;
  for (int i = 0; i < kWorkers; ++i) {
    auto shard = EpochShard(kN, {.seed = 9, .index = i, .count = kWorkers}, 0);
    ASSERT_THAT(shard, IsOk());
    EXPECT_EQ(static_cast<int64_t>(shard->size()), ShardSize(kN, kWorkers));
    for (int64_t x : *shard) EXPECT_TRUE(seen.insert(x).second) << "duplicate " << x;
  }
  const std::vector<int64_t> perm = EpochPermutation(kN, 9, 0);
  EXPECT_EQ(seen.size(), 1000u);
  for (int64_t k = 1000; k < kN; ++k) EXPECT_EQ(seen.count(perm[k]), 0u);
}

TEST(EpochShard, StridesThroughTheSharedPermutation) {
  const std::vector<int64_t> perm = EpochPermutation(12, 3, 1);
  auto shard = EpochShard(12, {.seed = 3, .index = 1, .count = 3}, 1);
  ASSERT_THAT(shard, IsOk());
  EXPECT_EQ(*shard, (std::vector<int64_t>{perm[1], perm[4], perm[7], perm[10]}));
}

TEST(EpochShard, RejectsIndexOutOfRange) {
  auto shard = EpochShard(10, {.seed = 0, .index = 2, .count = 2}, 0);
  EXPECT_EQ(shard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(shard.status().message(), "shard index 2 is not in [0, 2)");
}

TEST(EpochShard, RejectsMoreWorkersThanExamples) {
  EXPECT_EQ(EpochShard(3, {.seed = 0, .index = 0, .count = 4}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::worker
