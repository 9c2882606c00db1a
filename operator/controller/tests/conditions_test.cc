#include "operator/controller/conditions.h"

#include <gtest/gtest.h>

namespace kubetrain::controller {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

std::vector<std::string> Types(const api::TrainingJobStatus& s) {
  std::vector<std::string> out;
  for (const auto& c : s.conditions) out.push_back(c.type + "=" + c.status);
  return out;
}

TEST(Conditions, NewlyTrueConditionMovesLastSoItIsTheState) {
  api::TrainingJobStatus s;
  EXPECT_TRUE(SetCondition(&s, kCreated, true, "TrainingJobCreated", "created", kT0));
  EXPECT_TRUE(SetCondition(&s, kRunning, true, "TrainingJobRunning", "running", kT0));
  EXPECT_FALSE(SetCondition(&s, kRunning, true, "TrainingJobRunning", "running", kT0));
  EXPECT_TRUE(SetCondition(&s, kRestarting, true, "TrainingJobRestarting", "worker-1", kT0));
  EXPECT_EQ(Types(s),
            (std::vector<std::string>{"Created=True", "Running=False", "Restarting=True"}));
  EXPECT_TRUE(SetCondition(&s, kRunning, true, "TrainingJobRunning", "running", kT0));
  EXPECT_EQ(Types(s),
            (std::vector<std::string>{"Created=True", "Restarting=False", "Running=True"}));
}

TEST(Conditions, FinishedJobsDoNotChange) {
  api::TrainingJobStatus s;
  SetCondition(&s, kRunning, true, "R", "r", kT0);
  EXPECT_TRUE(SetCondition(&s, kSucceeded, true, "TrainingJobSucceeded", "done", kT0));
  EXPECT_TRUE(IsFinished(s));
  EXPECT_FALSE(IsTrue(s, kRunning));
  EXPECT_FALSE(SetCondition(&s, kFailed, true, "X", "y", kT0));
  EXPECT_EQ(s.conditions.back().type, "Succeeded");
}

TEST(Conditions, TransitionTimeKeptWhileStatusHolds) {
  api::TrainingJobStatus s;
  SetCondition(&s, kRunning, true, "R", "first", kT0);
  SetCondition(&s, kRunning, true, "R", "second", kT0 + absl::Seconds(30));
  EXPECT_EQ(s.conditions[0].last_transition_time, "2023-11-14T22:13:20Z");
  EXPECT_EQ(s.conditions[0].last_update_time, "2023-11-14T22:13:50Z");
}

}  // namespace
}  // namespace kubetrain::controller
