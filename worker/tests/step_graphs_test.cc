// Training steps through captured graphs (worker/core/step_graphs.h) on the CPU, with a recording
// device that captures as a GPU does: bit-identical to uncaptured steps, captured once per batch
// size, falling back when a capture fails, one launch and one host wait per step.
#include "worker/core/step_graphs.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/data/batch_iterator.h"
#include "worker/core/model.h"
#include "worker/core/models.h"
#include "worker/core/random.h"
#include "worker/core/sgd.h"
#include "worker/tests/counting_device.h"
#include "worker/tests/graph_training.h"
#include "worker/tests/recording_device.h"

namespace kubetrain::worker::testing {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::HasSubstr;

// What `epochs` of uncaptured training on a recording device of its own leave behind.
GraphTestRun UncapturedRun(Device& cpu, bool cnn, const Dataset& data, int epochs) {
  RecordingDevice device(cpu);
  std::unique_ptr<Model> model = GraphTestModel(cnn, device);
  return GraphTestTrain(*model, data, 16, epochs);
}

// One step of `model` on the first `batch` examples of `data`.
void StepOnFirst(Model& model, const Dataset& data, int batch) {
  const std::vector<float> images(data.images.begin(),
                                  data.images.begin() + batch * data.example_size());
  const std::vector<int32_t> labels(data.labels.begin(), data.labels.begin() + batch);
  EXPECT_THAT(model.ComputeGradients(images, labels), IsOk());
}

// A recording device over the CPU for each test.
class StepGraphsTest : public ::testing::Test {
 protected:
  CpuDevice cpu_;
  RecordingDevice recording_{cpu_};
};
using RecordingDeviceTest = StepGraphsTest;

class GraphedTraining : public ::testing::TestWithParam<bool> {};

TEST_P(GraphedTraining, EqualsUncapturedTrainingToTheBit) {
  const bool cnn = GetParam();
  const Dataset data = GraphTestImages(44, 5);  // batches of 16, 16, 12
  CpuDevice cpu;
  const GraphTestRun expected = UncapturedRun(cpu, cnn, data, 3);

  RecordingDevice device(cpu);
  std::unique_ptr<Model> graphed = GraphTestModel(cnn, device, /*graphed=*/true);
  const GraphTestRun got = GraphTestTrain(*graphed, data, 16, 3);

  EXPECT_TRUE(SameBits(got.losses, expected.losses));
  EXPECT_TRUE(SameBits(got.values, expected.values));
  // Warm-ups at 16 (step 1) and 12 (step 3), captures at step 2 and at the next epoch's step 3.
  const StepGraphs::Stats& stats = graphed->step_graphs().stats();
  EXPECT_EQ(stats.eager_steps, 2);
  EXPECT_EQ(stats.captures, 2);
  EXPECT_EQ(stats.replays, 7);
  EXPECT_EQ(device.graphs_launched(), 7);
}

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, GraphedTraining, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Cnn" : "Mlp";
                         });

TEST_F(StepGraphsTest, RecapturesEverySizeAfterTheBuffersGrow) {
  const Dataset data = GraphTestImages(8, 6);
  std::unique_ptr<Model> model = GraphTestModel(false, recording_, /*graphed=*/true);
  const auto step = [&](int batch) { StepOnFirst(*model, data, batch); };
  step(4);  // warm-up
  step(4);  // captured
  EXPECT_EQ(model->step_graphs().stats().captures, 1);
  step(8);  // warm-up: the buffers grow
  step(8);  // captured, after every graph was dropped
  EXPECT_EQ(model->step_graphs().size(), 1u);
  step(4);  // warm already: captured again at once
  step(4);  // replayed
  const StepGraphs::Stats& stats = model->step_graphs().stats();
  EXPECT_EQ(stats.eager_steps, 2);
  EXPECT_EQ(stats.captures, 3);
  EXPECT_EQ(stats.replays, 4);
  EXPECT_EQ(model->step_graphs().size(), 2u);
}

TEST_F(StepGraphsTest, KeepsTheGraphsOfTheLastFourSizes) {
  const Dataset data = GraphTestImages(8, 11);
  std::unique_ptr<Model> model = GraphTestModel(false, recording_, /*graphed=*/true);
  for (int round = 0; round < 2; ++round) {
    for (int batch = 8; batch >= 4; --batch) {  // the largest first: no buffer grows later
      StepOnFirst(*model, data, batch);
      StepOnFirst(*model, data, batch);
      EXPECT_LE(model->step_graphs().size(), StepGraphs::kGraphsKept);
    }
  }
  // Five sizes round-robin through four graphs: each is evicted before it comes again, so the
  // second round captures each size once more (without a warm-up) and replays it once.
  const StepGraphs::Stats& stats = model->step_graphs().stats();
  EXPECT_EQ(stats.eager_steps, 5);
  EXPECT_EQ(stats.captures, 5 + 5);
  EXPECT_EQ(stats.replays, 5 + 10);
}

TEST_F(StepGraphsTest, FailedCaptureFallsBackToUncapturedSteps) {
  const Dataset data = GraphTestImages(40, 7);
  const GraphTestRun expected = UncapturedRun(cpu_, false, data, 2);

  recording_.FailNextCapture(
      absl::InternalError("operation not permitted when stream is capturing"));
  std::unique_ptr<Model> graphed = GraphTestModel(false, recording_, /*graphed=*/true);
  const GraphTestRun got = GraphTestTrain(*graphed, data, 16, 2);

  EXPECT_TRUE(SameBits(got.losses, expected.losses));
  EXPECT_TRUE(SameBits(got.values, expected.values));
  EXPECT_FALSE(graphed->step_graphs().active());
  EXPECT_EQ(graphed->step_graphs().stats().captures, 0);
  EXPECT_EQ(graphed->step_graphs().stats().eager_steps, 6);
  EXPECT_EQ(recording_.graphs_launched(), 0);
}

TEST_F(StepGraphsTest, GradientsReadyHookKeepsStepsUncaptured) {
  const Dataset data = GraphTestImages(32, 8);
  std::unique_ptr<Model> model = GraphTestModel(false, recording_, /*graphed=*/true);
  GraphTestTrain(*model, data, 16, 1);
  EXPECT_EQ(model->step_graphs().size(), 1u);
  int calls = 0;
  model->SetGradientsReady([&](size_t) { ++calls; });
  EXPECT_EQ(model->step_graphs().size(), 0u);
  GraphTestTrain(*model, data, 16, 1);
  EXPECT_EQ(calls, 2 * 3);  // three dense layers per step
  EXPECT_EQ(model->step_graphs().stats().replays, 1);
  EXPECT_EQ(recording_.graphs_launched(), 1);
}

TEST_F(StepGraphsTest, ReplayedStepIsOneLaunchAndOneHostWait) {
  const Dataset data = GraphTestImages(16, 9);
  CountingDevice device(recording_);
  std::unique_ptr<Model> model = GraphTestModel(true, device, /*graphed=*/true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(model->ComputeGradients(data.images, data.labels), IsOk());
  }
  device.Reset();
  EXPECT_THAT(model->ComputeGradients(data.images, data.labels), IsOk());
  EXPECT_EQ(device.counts().launches, 1);
  EXPECT_EQ(device.counts().host_waits, 1);
  EXPECT_EQ(device.counts().uploads, 0);
}

TEST_F(StepGraphsTest, LossLeftOnTheDeviceMatchesUncapturedSteps) {
  const Dataset data = GraphTestImages(16, 10);
  std::vector<float> losses[2];
  for (int graphed = 0; graphed < 2; ++graphed) {
    std::unique_ptr<Model> model = GraphTestModel(false, recording_, graphed == 1);
    Tensor loss(recording_, {1});
    for (int i = 0; i < 4; ++i) {
      ASSERT_THAT(model->ComputeGradients(data.images, data.labels, loss.data()), IsOk());
      losses[graphed].push_back(0.0f);
      recording_.Download(loss, &losses[graphed].back(), 1);
    }
    EXPECT_EQ(model->step_graphs().stats().replays, graphed == 1 ? 3 : 0);
  }
  EXPECT_TRUE(SameBits(losses[0], losses[1]));
}

TEST_F(RecordingDeviceTest, CaptureRefusesHostWaitsNamingTheCall) {
  Tensor x(recording_, {4});
  ASSERT_THAT(recording_.BeginCapture(), IsOk());
  recording_.Fill(4, 1.0f, x.data());
  EXPECT_THAT(recording_.Synchronize(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(recording_.EndCapture(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                HasSubstr("Synchronize during graph capture")));
}

TEST_F(RecordingDeviceTest, CaptureRefusesUploadsFromUnstagedMemory) {
  Tensor x(recording_, {2});
  const std::vector<float> pageable = {1.0f, 2.0f};
  ASSERT_THAT(recording_.BeginCapture(), IsOk());
  recording_.Upload(pageable.data(), x, 2);
  EXPECT_THAT(recording_.EndCapture(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                HasSubstr("CopyHostToDevice from host memory")));
}

TEST_F(RecordingDeviceTest, ReplayUploadsWhatTheStagingHoldsAtLaunch) {
  Tensor x(recording_, {1});
  auto* staged = static_cast<float*>(recording_.AllocateHostBytes(sizeof(float)));
  ASSERT_THAT(recording_.BeginCapture(), IsOk());
  recording_.Upload(staged, x, 1);
  recording_.Scale(1, 2.0f, x.data());
  absl::StatusOr<std::unique_ptr<DeviceGraph>> graph = recording_.EndCapture();
  ASSERT_THAT(graph, IsOk());
  float out = 0.0f;
  for (float in : {3.0f, 5.0f}) {
    *staged = in;
    ASSERT_THAT(recording_.LaunchGraph(**graph), IsOk());
    recording_.Download(x, &out, 1);
    EXPECT_EQ(out, 2.0f * in);
  }
  recording_.FreeHostBytes(staged);
}

TEST(StepGraphs, CpuDeviceDoesNotCapture) {
  CpuDevice cpu;
  EXPECT_FALSE(cpu.SupportsGraphs());
  EXPECT_THAT(cpu.BeginCapture(), StatusIs(absl::StatusCode::kUnimplemented));
  StepGraphs graphs(cpu, "m");
  graphs.set_enabled(true);
  EXPECT_FALSE(graphs.active());
}

}  // namespace
}  // namespace kubetrain::worker::testing
