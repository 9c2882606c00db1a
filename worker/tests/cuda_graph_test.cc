// Captured training steps on a GPU (worker/core/step_graphs.h, worker/cuda/cuda_graphs.cc): the
// same results to the bit as uncaptured steps, replays across a change of batch size, and the
// capture's refusals. Every test skips without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/testing/status_matchers.h"
#include "worker/cuda/cuda_device.h"
#include "worker/tests/graph_training.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::HasSubstr;

class CudaGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaProbe probe = ProbeCudaDevices();
    if (probe.device_count == 0) GTEST_SKIP() << probe.status.message();
    absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create();
    ASSERT_TRUE(device.ok()) << device.status();
    gpu_ = *std::move(device);
  }

  std::unique_ptr<CudaDevice> gpu_;
};

class CudaGraphedTraining : public CudaGraphTest, public ::testing::WithParamInterface<bool> {};

// One model trained twice from the same values, so that both runs use the convolution
// algorithms cuDNN chose for it.
TEST_P(CudaGraphedTraining, EqualsUncapturedTrainingToTheBit) {
  std::unique_ptr<Model> model = testing::GraphTestModel(GetParam(), *gpu_);
  ASSERT_NO_FATAL_FAILURE(testing::ExpectCapturedTrainingEqualsUncaptured(*model));
  // The short batch's graph is captured in the second epoch and replayed in the third, between
  // replays of the full batch's.
  const StepGraphs::Stats& stats = model->step_graphs().stats();
  EXPECT_TRUE(model->step_graphs().active());
  EXPECT_EQ(stats.captures, 2);
  EXPECT_EQ(stats.replays, 7);
  EXPECT_THAT(gpu_->Synchronize(), IsOk());
}

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, CudaGraphedTraining, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Cnn" : "Mlp";
                         });

TEST_F(CudaGraphTest, ReplayUploadsWhatTheStagingHoldsAtLaunch) {
  Tensor x(*gpu_, {1});
  Tensor y(*gpu_, {1});
  auto* staged = static_cast<float*>(gpu_->AllocateHostBytes(sizeof(float)));
  ASSERT_THAT(gpu_->BeginCapture(), IsOk());
  gpu_->Upload(staged, x, 1);
  gpu_->Gemm(false, false, 1, 1, 1, 2.0f, x.data(), x.data(), 0.0f, y.data());  // y = 2x²
  absl::StatusOr<std::unique_ptr<DeviceGraph>> graph = gpu_->EndCapture();
  ASSERT_THAT(graph, IsOk());
  for (float in : {3.0f, 5.0f}) {
    ASSERT_THAT(gpu_->WaitForGraphs(), IsOk());
    *staged = in;
    ASSERT_THAT(gpu_->LaunchGraph(**graph), IsOk());
    float out = 0.0f;
    gpu_->Download(y, &out, 1);
    EXPECT_EQ(out, 2.0f * in * in);
  }
  EXPECT_THAT(gpu_->Synchronize(), IsOk());
  graph->reset();
  gpu_->FreeHostBytes(staged);
}

TEST_F(CudaGraphTest, CaptureRefusesHostWaitsAndPageableUploads) {
  Tensor x(*gpu_, {2});
  const std::vector<float> pageable = {1.0f, 2.0f};
  ASSERT_THAT(gpu_->BeginCapture(), IsOk());
  gpu_->Upload(pageable.data(), x, 2);
  EXPECT_THAT(gpu_->EndCapture(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                           HasSubstr("CopyHostToDevice from host memory")));
  ASSERT_THAT(gpu_->BeginCapture(), IsOk());
  gpu_->Fill(2, 1.0f, x.data());
  EXPECT_THAT(gpu_->Synchronize(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(gpu_->EndCapture(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                           HasSubstr("Synchronize during graph capture")));
  // Nothing captured ran, and the device works on.
  gpu_->Upload(pageable.data(), x, 2);
  std::vector<float> out(2);
  gpu_->Download(x, out.data(), 2);
  EXPECT_THAT(gpu_->Synchronize(), IsOk());
  EXPECT_EQ(out, pageable);
}

}  // namespace
}  // namespace kubetrain::worker
