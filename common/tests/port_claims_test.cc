#include "common/port_claims.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "common/testing/status_matchers.h"

namespace kubetrain {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Candidates from a list, as the kernel's free ports would come.
std::function<absl::StatusOr<int>()> From(std::vector<int> ports) {
  return [ports = std::move(ports), i = size_t{0}]() mutable -> absl::StatusOr<int> {
    if (i == ports.size()) return absl::UnavailableError("no more candidates");
    return ports[i++];
  };
}

// `n` port numbers free a moment ago and claimed by no one now (claimed, then released), to
// offer as candidates.
std::vector<int> FreshPorts(int n) {
  absl::StatusOr<PortClaims> claims = ClaimFreeLoopbackPorts(n);
  EXPECT_THAT(claims, IsOk());
  return claims.ok() ? claims->ports() : std::vector<int>(n, 0);
}

// Two runs started at once may be offered the same free port; the second claim skips it.
TEST(PortClaims, APortClaimedElsewhereIsSkipped) {
  const std::vector<int> p = FreshPorts(4);
  absl::StatusOr<PortClaims> first = ClaimPorts(2, From({p[0], p[1]}));
  ASSERT_THAT(first, IsOk());
  absl::StatusOr<PortClaims> second = ClaimPorts(2, From({p[1], p[0], p[2], p[3]}));
  ASSERT_THAT(second, IsOk());
  EXPECT_THAT(first->ports(), ElementsAre(p[0], p[1]));
  EXPECT_THAT(second->ports(), ElementsAre(p[2], p[3]));
}

TEST(PortClaims, ARepeatedCandidateIsClaimedOnce) {
  const std::vector<int> p = FreshPorts(2);
  absl::StatusOr<PortClaims> claims = ClaimPorts(2, From({p[0], p[0], p[1]}));
  ASSERT_THAT(claims, IsOk());
  EXPECT_THAT(claims->ports(), ElementsAre(p[0], p[1]));
}

// Claims end with their owner (here its destruction; a process's with the process), and a
// move or an Add keeps them.
TEST(PortClaims, AReleasedPortCanBeClaimedAgain) {
  const int port = FreshPorts(1)[0];
  {
    absl::StatusOr<PortClaims> held = ClaimPorts(1, From({port}));
    ASSERT_THAT(held, IsOk());
    PortClaims moved = *std::move(held);
    PortClaims all;
    all.Add(std::move(moved));
    EXPECT_THAT(all.ports(), ElementsAre(port));
    EXPECT_THAT(ClaimPorts(1, From({port})), StatusIs(absl::StatusCode::kUnavailable))
        << "still held after the move and the Add";
  }
  absl::StatusOr<PortClaims> again = ClaimPorts(1, From({port}));
  ASSERT_THAT(again, IsOk());
  EXPECT_THAT(again->ports(), ElementsAre(port));
}

TEST(PortClaims, RunningOutOfCandidatesIsAnError) {
  const int port = FreshPorts(1)[0];
  absl::StatusOr<PortClaims> held = ClaimPorts(1, From({port}));
  ASSERT_THAT(held, IsOk());
  const std::vector<int> taken(200, port);
  EXPECT_THAT(ClaimPorts(1, From(taken)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no free loopback port left")));
}

TEST(ClaimFreeLoopbackPorts, GivesDifferentPortsToEachOfTwoClaims) {
  absl::StatusOr<PortClaims> a = ClaimFreeLoopbackPorts(64);
  absl::StatusOr<PortClaims> b = ClaimFreeLoopbackPorts(64);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  std::set<int> all(a->ports().begin(), a->ports().end());
  all.insert(b->ports().begin(), b->ports().end());
  EXPECT_EQ(all.size(), 128u);
  // Each held port is refused to a third claim.
  EXPECT_THAT(ClaimPorts(1, From({a->ports().front(), b->ports().back()})),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace kubetrain
