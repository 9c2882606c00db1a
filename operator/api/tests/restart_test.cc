#include "operator/api/restart.h"

#include <gtest/gtest.h>

namespace kubetrain::api {
namespace {

TEST(DecideExit, ZeroAlwaysSucceeds) {
  for (RestartPolicy p : {RestartPolicy::kAlways, RestartPolicy::kOnFailure, RestartPolicy::kNever,
                          RestartPolicy::kExitCode}) {
    EXPECT_EQ(DecideExit(p, 0), ExitAction::kSucceeded);
  }
}

TEST(DecideExit, ExitCodePolicyFailsOnProgramErrorsAndRetriesKills) {
  EXPECT_EQ(DecideExit(RestartPolicy::kExitCode, 1), ExitAction::kFail);
  EXPECT_EQ(DecideExit(RestartPolicy::kExitCode, 127), ExitAction::kFail);
  EXPECT_EQ(DecideExit(RestartPolicy::kExitCode, 128), ExitAction::kRestart);
  EXPECT_EQ(DecideExit(RestartPolicy::kExitCode, 137), ExitAction::kRestart);
  EXPECT_EQ(DecideExit(RestartPolicy::kExitCode, 255), ExitAction::kRestart);
}

TEST(DecideExit, OnFailureAndAlwaysRetryNeverFails) {
  EXPECT_EQ(DecideExit(RestartPolicy::kOnFailure, 1), ExitAction::kRestart);
  EXPECT_EQ(DecideExit(RestartPolicy::kAlways, 2), ExitAction::kRestart);
  EXPECT_EQ(DecideExit(RestartPolicy::kNever, 137), ExitAction::kFail);
}

TEST(DescribeExit, NamesTheSignal) {
  EXPECT_EQ(DescribeExit(137), "exited with code 137 (SIGKILL)");
  EXPECT_EQ(DescribeExit(143), "exited with code 143 (SIGTERM)");
  EXPECT_EQ(DescribeExit(3), "exited with code 3");
}

}  // namespace
}  // namespace kubetrain::api

namespace kubetrain::api {
namespace {

TEST(IndexSet, FormatsRangesLikeBatchJobs) {
  EXPECT_EQ(FormatIndexSet({0, 2, 3, 4, 7}), "0,2-4,7");
  EXPECT_EQ(FormatIndexSet({}), "");
  EXPECT_EQ(ParseIndexSet("0,2-4,7"), (std::set<int>{0, 2, 3, 4, 7}));
  EXPECT_EQ(ParseIndexSet("x,5,,9-8"), (std::set<int>{5}));
}

}  // namespace
}  // namespace kubetrain::api
