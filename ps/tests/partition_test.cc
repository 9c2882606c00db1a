#include "ps/partition.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <utility>

#include "common/testing/status_matchers.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::IsOk;

std::map<PartitionKey, int> Placement(const PlacementPlan& plan) {
  std::map<PartitionKey, int> out;
  for (const PartitionSpec& p : plan.partitions()) out[p.key] = p.ps;
  return out;
}

// The fewest and the most bytes any ps task of `plan` holds.
std::pair<uint64_t, uint64_t> LightestAndHeaviest(const PlacementPlan& plan) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int ps = 0; ps < plan.num_ps(); ++ps) {
    lo = std::min(lo, plan.BytesOn(ps));
    hi = std::max(hi, plan.BytesOn(ps));
  }
  return {lo, hi};
}

TEST(SplitEvenly, PiecesDifferByAtMostOneElement) {
  auto pieces = SplitEvenly(10, 4);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0], std::make_pair(uint64_t{0}, uint64_t{4}));
  EXPECT_EQ(pieces[1], std::make_pair(uint64_t{4}, uint64_t{3}));
  EXPECT_EQ(pieces[2], std::make_pair(uint64_t{7}, uint64_t{3}));
  EXPECT_EQ(SplitEvenly(8, 4).size(), 2u);
  EXPECT_EQ(SplitEvenly(3, 4).size(), 1u);
}

TEST(PlacementPlan, PartitionsStayUnderTheByteLimitAndCoverEachVariable) {
  // One ps task: the byte limit alone cuts (with more, the balance cut below may cut finer).
  auto plan = PlacementPlan::Build({{"embedding", 3'000'000}, {"bias", 10}}, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  uint64_t covered = 0;
  int pieces = 0;
  for (const PartitionSpec& p : plan->partitions()) {
    EXPECT_LE(p.bytes(), uint64_t{4} << 20);
    if (p.key.variable != "embedding") continue;
    EXPECT_EQ(p.offset, covered);  // contiguous, in index order
    EXPECT_EQ(p.key.index, static_cast<uint32_t>(pieces));
    covered += p.length;
    ++pieces;
  }
  EXPECT_EQ(covered, 3'000'000u);
  EXPECT_EQ(pieces, 3);  // 12 MB in pieces of at most 4 MiB
}

TEST(PlacementPlan, GreedyLargestFirstBalancesBytesNotCreationOrder) {
  // Round-robin by creation order would put both large variables on ps 0.
  auto plan = PlacementPlan::Build({{"big1", 1000}, {"small1", 10}, {"big2", 1000}, {"small2", 10}},
                                   2, {.max_partition_bytes = 1 << 20});
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto placed = Placement(*plan);
  auto ps_of = [&](const char* name) { return placed[PartitionKey{name, 0}]; };
  EXPECT_NE(ps_of("big1"), ps_of("big2"));
  EXPECT_NE(ps_of("small1"), ps_of("small2"));
  EXPECT_EQ(plan->BytesOn(0), plan->BytesOn(1));
}

TEST(PlacementPlan, LoadsDifferByNoMoreThanTheLargestPartition) {
  std::vector<VariableSpec> vars;
  std::mt19937 rng(7);
  for (int i = 0; i < 40; ++i) {
    vars.push_back(
        {"v" + std::to_string(i), std::uniform_int_distribution<uint64_t>(1, 5000)(rng)});
  }
  auto plan = PlacementPlan::Build(vars, 3, {.max_partition_bytes = 8000});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const auto [lo, hi] = LightestAndHeaviest(*plan);
  uint64_t total = 0, largest = 0;
  for (int ps = 0; ps < 3; ++ps) total += plan->BytesOn(ps);
  for (const PartitionSpec& p : plan->partitions()) largest = std::max(largest, p.bytes());
  uint64_t want_total = 0;
  for (const VariableSpec& v : vars) want_total += v.elements * 4;
  EXPECT_EQ(total, want_total);
  EXPECT_LE(hi - lo, largest);
  // PartitionsOn agrees with each partition's ps.
  for (int ps = 0; ps < 3; ++ps) {
    for (size_t p : plan->PartitionsOn(ps)) EXPECT_EQ(plan->partitions()[p].ps, ps);
  }
}

TEST(PlacementPlan, SameVariablesInAnyOrderGiveTheSamePlacement) {
  std::vector<VariableSpec> vars;
  for (int i = 0; i < 25; ++i) vars.push_back({"layer" + std::to_string(i), uint64_t(100 + i % 4)});
  auto first = PlacementPlan::Build(vars, 4, {.max_partition_bytes = 256});
  std::shuffle(vars.begin(), vars.end(), std::mt19937(3));
  auto shuffled = PlacementPlan::Build(vars, 4, {.max_partition_bytes = 256});
  auto again = PlacementPlan::Build(vars, 4, {.max_partition_bytes = 256});
  ASSERT_THAT(first, IsOk());
  ASSERT_THAT(shuffled, IsOk());
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(Placement(*first), Placement(*shuffled));
  EXPECT_EQ(Placement(*shuffled), Placement(*again));
}

// The Fashion-MNIST MLP (784-256-128-10): its first kernel is 85 % of the model, under the 4 MiB
// partition limit. Cut to a quarter of each task's share, it no longer sits whole on one ps.
TEST(PlacementPlan, AVariableMostOfTheModelIsSpreadOverThePsTasks) {
  const std::vector<VariableSpec> mlp = {{"dense0/kernel", 784 * 256}, {"dense0/bias", 256},
                                         {"dense1/kernel", 256 * 128}, {"dense1/bias", 128},
                                         {"dense2/kernel", 128 * 10},  {"dense2/bias", 10}};
  for (int num_ps : {2, 4}) {
    auto plan = PlacementPlan::Build(mlp, num_ps);
    ASSERT_THAT(plan, IsOk());
    const auto [lo, hi] = LightestAndHeaviest(*plan);
    EXPECT_LE(static_cast<double>(hi), 1.3 * lo) << num_ps << " ps";
    // Never cut finer than the floor: a cut variable's pieces are over half of 64 KiB.
    for (const PartitionSpec& p : plan->partitions()) {
      if (p.bytes() < mlp[p.variable].elements * 4) {
        EXPECT_GT(p.bytes(), 32u << 10);
      }
    }
  }
  // A 12 MB variable and a small one on 2 ps tasks: 4 MiB pieces alone would leave 8 MB on one
  // and 4 on the other.
  auto big = PlacementPlan::Build({{"embedding", 3'000'000}, {"bias", 10}}, 2);
  ASSERT_THAT(big, IsOk());
  const auto [big_lo, big_hi] = LightestAndHeaviest(*big);
  EXPECT_LE(static_cast<double>(big_hi), 1.01 * big_lo);
  // One ps holds everything: nothing is cut below the limit.
  auto single = PlacementPlan::Build(mlp, 1);
  ASSERT_THAT(single, IsOk());
  EXPECT_EQ(single->partitions().size(), mlp.size());
}

TEST(PlacementPlan, RejectsBadInput) {
  EXPECT_EQ(PlacementPlan::Build({{"a", 1}, {"a", 2}}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlacementPlan::Build({{"a", 0}}, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlacementPlan::Build({{"a", 1}}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlacementPlan::Build({}, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PlacementPlan, MorePsThanPartitionsLeavesSomeEmpty) {
  auto plan = PlacementPlan::Build({{"a", 4}}, 3);
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->PartitionsOn(0).size(), 1u);
  EXPECT_TRUE(plan->PartitionsOn(1).empty());
  EXPECT_EQ(plan->BytesOn(2), 0u);
}

// A sync worker moves each ps task's share in pieces of about equal bytes, in plan order, each
// partition in exactly one piece; a share under twice the minimum piece is one piece.
TEST(Pieces, CutAShareIntoRunsOfAboutEqualBytes) {
  // 64 MiB over 8 ps tasks: four 2 MiB partitions each.
  auto plan = PlacementPlan::Build({{"w", uint64_t{16} << 20}}, 8);
  ASSERT_THAT(plan, IsOk());
  for (int ps = 0; ps < plan->num_ps(); ++ps) {
    const auto pieces = plan->Pieces(ps, uint64_t{1} << 20, 8);
    ASSERT_EQ(pieces.size(), 4u) << "ps " << ps;
    std::vector<size_t> joined;
    for (const auto& piece : pieces) {
      ASSERT_EQ(piece.size(), 1u);
      joined.insert(joined.end(), piece.begin(), piece.end());
    }
    EXPECT_EQ(joined, plan->PartitionsOn(ps));
    EXPECT_EQ(plan->Pieces(ps, uint64_t{1} << 20, 2).size(), 2u);
    EXPECT_EQ(plan->Pieces(ps, uint64_t{5} << 20, 8).size(), 1u);
  }
  // Uneven partitions: a large one alone, the small ones together.
  auto mixed = PlacementPlan::Build(
      {{"big", 1'000'000}, {"a", 100'000}, {"b", 100'000}, {"c", 100'000}, {"d", 100'000}}, 1);
  ASSERT_THAT(mixed, IsOk());
  const auto pieces = mixed->Pieces(0, uint64_t{1} << 20, 8);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].size(), 1u);
  EXPECT_EQ(pieces[1].size(), 4u);
  EXPECT_EQ(mixed->Pieces(0, uint64_t{1} << 20, 1).size(), 1u);
}

}  // namespace
}  // namespace kubetrain::ps
