// An all-reduce replica's parameters and optimizer slots through a checkpoint (replica_state.h).
#include "worker/runtime/replica_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/models.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Each;
using ::testing::HasSubstr;

std::vector<float> Read(Device& device, const Tensor& t) {
  std::vector<float> host(t.size());
  device.Download(t, host.data(), t.size());
  EXPECT_THAT(device.Synchronize(), IsOk());
  return host;
}

TEST(ReplicaState, ACheckpointRestoresValuesAndSlotsIntoAnotherReplica) {
  CpuDevice device;
  auto trained = MakeModel("mlp", device, 1);
  auto fresh = MakeModel("mlp", device, 2);
  ASSERT_THAT(trained.status(), IsOk());
  ASSERT_THAT(fresh.status(), IsOk());
  ReplicaState from(device, **trained);
  from.StartSlots({"m", "v"}, 0.0f);
  // Slots that differ per variable and per name.
  for (size_t i = 0; i < (*trained)->variables().size(); ++i) {
    device.Fill(from.slots(i)[0].size(), 0.25f + static_cast<float>(i), from.slots(i)[0].data());
    device.Fill(from.slots(i)[1].size(), -1.0f - static_cast<float>(i), from.slots(i)[1].data());
  }
  ps::ModelState checkpoint;
  ASSERT_THAT(from.Export(&checkpoint), IsOk());
  ASSERT_EQ(checkpoint.variables.size(), (*trained)->variables().size());
  EXPECT_EQ(checkpoint.variables[0].slots.size(), 2u);

  ReplicaState to(device, **fresh);
  to.StartSlots({"m", "v"}, 0.0f);
  ASSERT_THAT(to.Restore(checkpoint, "/ckpt"), IsOk());
  for (size_t i = 0; i < (*fresh)->variables().size(); ++i) {
    EXPECT_EQ(Read(device, (*fresh)->variables()[i]->value),
              Read(device, (*trained)->variables()[i]->value));
    EXPECT_THAT(Read(device, to.slots(i)[0]), Each(0.25f + static_cast<float>(i)));
    EXPECT_THAT(Read(device, to.slots(i)[1]), Each(-1.0f - static_cast<float>(i)));
  }
}

TEST(ReplicaState, AnotherOptimizersSlotsStartAfreshAndTheValuesAreKept) {
  CpuDevice device;
  auto trained = MakeModel("mlp", device, 1);
  auto fresh = MakeModel("mlp", device, 2);
  ASSERT_THAT(trained.status(), IsOk());
  ASSERT_THAT(fresh.status(), IsOk());
  ReplicaState adam(device, **trained);
  adam.StartSlots({"m", "v"}, 3.0f);
  ps::ModelState checkpoint;
  ASSERT_THAT(adam.Export(&checkpoint), IsOk());

  ReplicaState adagrad(device, **fresh);
  adagrad.StartSlots({"accumulator"}, 0.1f);
  ASSERT_THAT(adagrad.Restore(checkpoint, "/ckpt"), IsOk());
  EXPECT_EQ(Read(device, (*fresh)->variables()[0]->value),
            Read(device, (*trained)->variables()[0]->value));
  EXPECT_THAT(Read(device, adagrad.slots(0)[0]), Each(0.1f));
}

TEST(ReplicaState, ACheckpointOfAnotherModelNamesTheVariableAndTheDirectory) {
  CpuDevice device;
  auto mlp = MakeModel("mlp", device, 1);
  auto cnn = MakeModel("cnn", device, 1);
  ASSERT_THAT(mlp.status(), IsOk());
  ASSERT_THAT(cnn.status(), IsOk());
  ReplicaState from(device, **cnn);
  from.StartSlots({}, 0.0f);
  ps::ModelState checkpoint;
  ASSERT_THAT(from.Export(&checkpoint), IsOk());

  ReplicaState to(device, **mlp);
  to.StartSlots({}, 0.0f);
  EXPECT_THAT(to.Restore(checkpoint, "/data/ckpt"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("checkpoint in /data/ckpt has no variable "),
                             HasSubstr("written for another model"))));
}

}  // namespace
}  // namespace kubetrain::worker
