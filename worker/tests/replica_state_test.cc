// An all-reduce replica's parameters and optimizer slots through a checkpoint (replica_state.h).
#include "worker/runtime/replica_state.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
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

// Two seeded models on one CPU device: `from` writes a checkpoint that `to` restores.
struct TwoModels {
  CpuDevice device;
  std::unique_ptr<Model> from, to;
};
void MakeTwo(TwoModels& m, const char* from_model, const char* to_model) {
  auto from = MakeModel(from_model, m.device, 1);
  auto to = MakeModel(to_model, m.device, 2);
  ASSERT_THAT(from.status(), IsOk());
  ASSERT_THAT(to.status(), IsOk());
  m.from = std::move(*from);
  m.to = std::move(*to);
}

TEST(ReplicaState, ACheckpointRestoresValuesAndSlotsIntoAnotherReplica) {
  TwoModels m;
  ASSERT_NO_FATAL_FAILURE(MakeTwo(m, "mlp", "mlp"));
  CpuDevice& device = m.device;
  ReplicaState from(device, *m.from);
  from.StartSlots({"m", "v"}, 0.0f);
  // Slots that differ per variable and per name.
  for (size_t i = 0; i < m.from->variables().size(); ++i) {
    device.Fill(from.slots(i)[0].size(), 0.25f + static_cast<float>(i), from.slots(i)[0].data());
    device.Fill(from.slots(i)[1].size(), -1.0f - static_cast<float>(i), from.slots(i)[1].data());
  }
  ps::ModelState checkpoint;
  ASSERT_THAT(from.Export(&checkpoint), IsOk());
  ASSERT_EQ(checkpoint.variables.size(), m.from->variables().size());
  EXPECT_EQ(checkpoint.variables[0].slots.size(), 2u);

  ReplicaState to(device, *m.to);
  to.StartSlots({"m", "v"}, 0.0f);
  ASSERT_THAT(to.Restore(checkpoint, "/ckpt"), IsOk());
  for (size_t i = 0; i < m.to->variables().size(); ++i) {
    EXPECT_EQ(Read(device, m.to->variables()[i]->value),
              Read(device, m.from->variables()[i]->value));
    EXPECT_THAT(Read(device, to.slots(i)[0]), Each(0.25f + static_cast<float>(i)));
    EXPECT_THAT(Read(device, to.slots(i)[1]), Each(-1.0f - static_cast<float>(i)));
  }
}

TEST(ReplicaState, AnotherOptimizersSlotsStartAfreshAndTheValuesAreKept) {
  TwoModels m;
  ASSERT_NO_FATAL_FAILURE(MakeTwo(m, "mlp", "mlp"));
  CpuDevice& device = m.device;
  ReplicaState adam(device, *m.from);
  adam.StartSlots({"m", "v"}, 3.0f);
  ps::ModelState checkpoint;
  ASSERT_THAT(adam.Export(&checkpoint), IsOk());

  ReplicaState adagrad(device, *m.to);
  adagrad.StartSlots({"accumulator"}, 0.1f);
  ASSERT_THAT(adagrad.Restore(checkpoint, "/ckpt"), IsOk());
  EXPECT_EQ(Read(device, m.to->variables()[0]->value), Read(device, m.from->variables()[0]->value));
  EXPECT_THAT(Read(device, adagrad.slots(0)[0]), Each(0.1f));
}

TEST(ReplicaState, ACheckpointOfAnotherModelNamesTheVariableAndTheDirectory) {
  TwoModels m;
  ASSERT_NO_FATAL_FAILURE(MakeTwo(m, "cnn", "mlp"));
  ReplicaState from(m.device, *m.from);
  from.StartSlots({}, 0.0f);
  ps::ModelState checkpoint;
  ASSERT_THAT(from.Export(&checkpoint), IsOk());

  ReplicaState to(m.device, *m.to);
  to.StartSlots({}, 0.0f);
  EXPECT_THAT(to.Restore(checkpoint, "/data/ckpt"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("checkpoint in /data/ckpt has no variable "),
                             HasSubstr("written for another model"))));
}

}  // namespace
}  // namespace kubetrain::worker
