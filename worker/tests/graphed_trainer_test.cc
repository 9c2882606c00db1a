// The trainer with --cuda-graphs (TrainerOptions::step_graphs) on a device that captures as a GPU
// does (worker/tests/recording_device.h): whole ps trainings, the chief's evaluations and
// checkpoints between their steps, end with the same model as uncaptured steps, and their steps
// after each warm-up are graph launches.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "ps/server.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/fashion_mnist_fixture.h"
#include "worker/tests/recording_device.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

using GraphedTrainerTest = FashionMnistTest;

struct GraphedRun {
  absl::StatusOr<TrainingSummary> summary;
  int64_t graphs_launched = 0;
};

class GraphedPsTraining : public GraphedTrainerTest, public ::testing::WithParamInterface<Mode> {
 protected:
  // One chief training 2 epochs of 39 steps (the 44 examples left over are not a step) against
  // its own ps, its steps captured when `graphed`.
  GraphedRun Run(bool graphed) {
    const Dataset train = First(data_->train, 40 * 64 - 20);
    auto ps = ps::PsServer::Start({.address = "127.0.0.1:0"}, nullptr);
    EXPECT_TRUE(ps.ok()) << ps.status();
    if (!ps.ok()) return {ps.status()};
    CpuDevice cpu;
    testing::RecordingDevice device(cpu);
    TrainerOptions options;
    options.mode = GetParam();
    options.epochs = 2;
    options.batch_size = 64;
    options.step_graphs = graphed;
    options.checkpoint_dir = ::kubetrain::testing::FreshTempDir(
        std::string("graphed_trainer_") + (graphed ? "on_" : "off_") +
        std::to_string(static_cast<int>(GetParam())));
    Trainer trainer(options, {Role::kChief, 0, 1, {(*ps)->address()}}, device, &train,
                    &small_test(), nullptr);
    GraphedRun run;
    run.summary = trainer.Run(stop_);
    run.graphs_launched = device.graphs_launched();
    return run;
  }

  std::atomic<bool> stop_{false};
};

TEST_P(GraphedPsTraining, EndsWithTheModelOfUncapturedStepsAndLaunchesGraphs) {
  const GraphedRun eager = Run(false);
  const GraphedRun graphed = Run(true);
  ASSERT_THAT(eager.summary, IsOk());
  ASSERT_THAT(graphed.summary, IsOk());
  EXPECT_EQ(eager.graphs_launched, 0);
  EXPECT_EQ(graphed.summary->steps, eager.summary->steps);
  EXPECT_EQ(graphed.summary->test_loss, eager.summary->test_loss);
  EXPECT_EQ(graphed.summary->test_accuracy, eager.summary->test_accuracy);
  // 78 steps, the first of them the warm-up. The chief's first evaluation (at a larger batch)
  // grows the buffers, which drops the graph: the step after it is captured again at once.
  EXPECT_EQ(graphed.summary->steps, 78);
  EXPECT_EQ(graphed.graphs_launched, 77);
}

INSTANTIATE_TEST_SUITE_P(Modes, GraphedPsTraining, ::testing::Values(Mode::kPsSync, Mode::kPsAsync),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return info.param == Mode::kPsSync ? "PsSync" : "PsAsync";
                         });

}  // namespace
}  // namespace kubetrain::worker
