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

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using testing::CountingDevice;
using testing::GraphTestImages;
using testing::GraphTestModel;
using testing::GraphTestRun;
using testing::GraphTestTrain;
using ::testing::HasSubstr;
using testing::RecordingDevice;
using testing::SameBits;

class GraphedTraining : public ::testing::TestWithParam<bool> {};

TEST_P(GraphedTraining, EqualsUncapturedTrainingToTheBit) {
  const bool cnn = GetParam();
  const Dataset data = GraphTestImages(44, 5);  // batches of 16, 16, 12
  CpuDevice cpu;
  RecordingDevice eager_device(cpu);
  std::unique_ptr<Model> eager = GraphTestModel(cnn, eager_device);
  const GraphTestRun expected = GraphTestTrain(*eager, data, 16, 3);

  RecordingDevice device(cpu);
  std::unique_ptr<Model> graphed = GraphTestModel(cnn, device);
  graphed->UseStepGraphs(true);
  const GraphTestRun got = GraphTestTrain(*graphed, data, 16, 3);

  EXPECT_TRUE(SameBits(got.losses, expected.losses));
  EXPECT_TRUE(SameBits(got.values, expected.values));
  // Warm-ups at 16 (step 1) and 12 (step 3), captures at step 2 and at the next epoch's step 3.
  const StepGraphs::Stats& stats = graphed->step_graphs().stats();
  EXPECT_EQ(stats.eager_steps, 2);
  EXPECT_EQ(stats.captures, 2);
  EXPECT_EQ(stats.replays, 7);
  EXPECT_EQ(device.graphs_launched(), 7);
  EXPECT_EQ(eager->step_graphs().stats().replays, 0);
}

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, GraphedTraining, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Cnn" : "Mlp";
                         });

TEST(StepGraphs, RecapturesEverySizeAfterTheBuffersGrow) {
  const Dataset data = GraphTestImages(8, 6);
  CpuDevice cpu;
  RecordingDevice device(cpu);
  std::unique_ptr<Model> model = GraphTestModel(false, device);
  model->UseStepGraphs(true);
  const auto step = [&](int batch) {
    const std::vector<float> images(data.images.begin(),
                                    data.images.begin() + batch * data.example_size());
    const std::vector<int32_t> labels(data.labels.begin(), data.labels.begin() + batch);
    EXPECT_THAT(model->ComputeGradients(images, labels), IsOk());
  };
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

TEST(StepGraphs, FailedCaptureFallsBackToUncapturedSteps) {
  const Dataset data = GraphTestImages(40, 7);
  CpuDevice cpu;
  RecordingDevice eager_device(cpu);
  std::unique_ptr<Model> eager = GraphTestModel(false, eager_device);
  const GraphTestRun expected = GraphTestTrain(*eager, data, 16, 2);

  RecordingDevice device(cpu);
  device.FailNextCapture(absl::InternalError("operation not permitted when stream is capturing"));
  std::unique_ptr<Model> graphed = GraphTestModel(false, device);
  graphed->UseStepGraphs(true);
  const GraphTestRun got = GraphTestTrain(*graphed, data, 16, 2);

  EXPECT_TRUE(SameBits(got.losses, expected.losses));
  EXPECT_TRUE(SameBits(got.values, expected.values));
  EXPECT_FALSE(graphed->step_graphs().active());
  EXPECT_EQ(graphed->step_graphs().stats().captures, 0);
  EXPECT_EQ(graphed->step_graphs().stats().eager_steps, 6);
  EXPECT_EQ(device.graphs_launched(), 0);
}

TEST(StepGraphs, GradientsReadyHookKeepsStepsUncaptured) {
  const Dataset data = GraphTestImages(32, 8);
  CpuDevice cpu;
  RecordingDevice device(cpu);
  std::unique_ptr<Model> model = GraphTestModel(false, device);
  model->UseStepGraphs(true);
  GraphTestTrain(*model, data, 16, 1);
  EXPECT_EQ(model->step_graphs().size(), 1u);
  int calls = 0;
  model->SetGradientsReady([&](size_t) { ++calls; });
  EXPECT_EQ(model->step_graphs().size(), 0u);
  GraphTestTrain(*model, data, 16, 1);
  EXPECT_EQ(calls, 2 * 3);  // three dense layers per step
  EXPECT_EQ(model->step_graphs().stats().replays, 1);
  EXPECT_EQ(device.graphs_launched(), 1);
}

TEST(StepGraphs, ReplayedStepIsOneLaunchAndOneHostWait) {
  const Dataset data = GraphTestImages(16, 9);
  CpuDevice cpu;
  RecordingDevice recording(cpu);
  CountingDevice device(recording);
  std::unique_ptr<Model> model = GraphTestModel(true, device);
  model->UseStepGraphs(true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(model->ComputeGradients(data.images, data.labels), IsOk());
  }
  device.Reset();
  EXPECT_THAT(model->ComputeGradients(data.images, data.labels), IsOk());
  EXPECT_EQ(device.counts().launches, 1);
  EXPECT_EQ(device.counts().host_waits, 1);
  EXPECT_EQ(device.counts().uploads, 0);
}

TEST(StepGraphs, LossLeftOnTheDeviceMatchesUncapturedSteps) {
  const Dataset data = GraphTestImages(16, 10);
  CpuDevice cpu;
  std::vector<float> losses[2];
  for (int graphed = 0; graphed < 2; ++graphed) {
    RecordingDevice device(cpu);
    std::unique_ptr<Model> model = GraphTestModel(false, device);
    model->UseStepGraphs(graphed == 1);
    Tensor loss(device, {1});
    for (int i = 0; i < 4; ++i) {
      ASSERT_THAT(model->ComputeGradients(data.images, data.labels, loss.data()), IsOk());
      losses[graphed].push_back(0.0f);
      device.Download(loss, &losses[graphed].back(), 1);
    }
    EXPECT_EQ(model->step_graphs().stats().replays, graphed == 1 ? 3 : 0);
  }
  EXPECT_TRUE(SameBits(losses[0], losses[1]));
}

TEST(RecordingDevice, CaptureRefusesHostWaitsNamingTheCall) {
  CpuDevice cpu;
  RecordingDevice device(cpu);
  Tensor x(device, {4});
  ASSERT_THAT(device.BeginCapture(), IsOk());
  device.Fill(4, 1.0f, x.data());
  EXPECT_THAT(device.Synchronize(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(device.EndCapture(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                            HasSubstr("Synchronize during graph capture")));
}

TEST(RecordingDevice, CaptureRefusesUploadsFromUnstagedMemory) {
  CpuDevice cpu;
  RecordingDevice device(cpu);
  Tensor x(device, {2});
  const std::vector<float> pageable = {1.0f, 2.0f};
  ASSERT_THAT(device.BeginCapture(), IsOk());
  device.Upload(pageable.data(), x, 2);
  EXPECT_THAT(device.EndCapture(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                            HasSubstr("CopyHostToDevice from host memory")));
}

TEST(RecordingDevice, ReplayUploadsWhatTheStagingHoldsAtLaunch) {
  CpuDevice cpu;
  RecordingDevice device(cpu);
  Tensor x(device, {1});
  auto* staged = static_cast<float*>(device.AllocateHostBytes(sizeof(float)));
  ASSERT_THAT(device.BeginCapture(), IsOk());
  device.Upload(staged, x, 1);
  device.Scale(1, 2.0f, x.data());
  absl::StatusOr<std::unique_ptr<DeviceGraph>> graph = device.EndCapture();
  ASSERT_THAT(graph, IsOk());
  float out = 0.0f;
  for (float in : {3.0f, 5.0f}) {
    *staged = in;
    ASSERT_THAT(device.LaunchGraph(**graph), IsOk());
    device.Download(x, &out, 1);
    EXPECT_EQ(out, 2.0f * in);
  }
  device.FreeHostBytes(staged);
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
}  // namespace kubetrain::worker
