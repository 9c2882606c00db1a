// What a training step costs a GPU, counted on the CPU backend through CountingDevice: the
// kernel launches and host waits are the same calls whichever backend runs them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/core/cpu/cpu_device.h"
#include "worker/core/models.h"
#include "worker/core/random.h"
#include "worker/tests/counting_device.h"
#include "worker/tests/model_reads.h"

namespace kubetrain::worker {
namespace {

using testing::CountingDevice;
using testing::Gradients;

constexpr int kBatch = 64;

struct CnnBatch {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

CnnBatch RandomBatch(const CnnOptions& o) {
  Rng rng(7, 0);
  CnnBatch b;
  b.images.resize(static_cast<size_t>(kBatch) * o.height * o.width * o.channels);
  for (float& x : b.images) x = rng.Uniform();
  for (int i = 0; i < kBatch; ++i) b.labels.push_back(i % o.classes);
  return b;
}

// The whole model's update after an all-reduce is one fused kernel per 32 variables on a GPU
// (Device::ApplyUpdates), not one per variable; on the CPU it applies what ApplyUpdate does.
TEST(StepCosts, TheFusedUpdateIsOneLaunchPerThirtyTwoVariables) {
  CpuDevice cpu;
  CountingDevice counting(cpu);
  ps::UpdateRule rule;
  rule.kind = ps::UpdateKind::kMomentum;
  rule.lr = 0.1f;
  rule.momentum = 0.9f;
  const int variables = 40;
  std::vector<float> grad(variables * 3, 1.0f), value(grad.size(), 2.0f), slot(grad.size(), 0.5f);
  std::vector<float> want_value = value, want_slot = slot;
  std::vector<UpdateSlice> slices;
  for (int v = 0; v < variables; ++v) {
    slices.push_back({3, grad.data() + 3 * v, value.data() + 3 * v, slot.data() + 3 * v, nullptr});
    cpu.ApplyUpdate(rule, 3, grad.data() + 3 * v, want_value.data() + 3 * v,
                    want_slot.data() + 3 * v, nullptr);
  }
  counting.Reset();
  // The CPU's memory is the host's: the rule is read where it is.
  counting.ApplyUpdates(&rule, slices);
  EXPECT_EQ(counting.counts().launches, 2);
  EXPECT_EQ(value, want_value);
  EXPECT_EQ(slot, want_slot);
}

// A GPU's column budget (the whole batch) turns each convolution pass into one im2col and one
// GEMM, where the CPU's 1 MiB chunks take the second convolution one image at a time; the
// gradients are the same.
TEST(StepCosts, AGpuColumnBudgetRunsEachConvolutionPassAsOneGemm) {
  CpuDevice cpu;
  const CnnOptions options;
  CountingDevice chunked(cpu);                    // the CPU's budget
  CountingDevice whole(cpu, int64_t{256} << 20);  // CudaDevice's
  auto a = MakeCnn(chunked, options);
  auto b = MakeCnn(whole, options);
  ASSERT_TRUE(a.ok() && b.ok());
  const CnnBatch batch = RandomBatch(options);
  chunked.Reset();
  whole.Reset();
  auto loss_a = (*a)->ComputeGradients(batch.images, batch.labels);
  auto loss_b = (*b)->ComputeGradients(batch.images, batch.labels);
  ASSERT_TRUE(loss_a.ok() && loss_b.ok());
  EXPECT_NEAR(*loss_a, *loss_b, 1e-5);
  // conv1 forward + kernel gradient (the input needs none), conv2 forward + kernel and input
  // gradients, two dense layers with three each.
  EXPECT_EQ(whole.counts().gemms, 2 + 3 + 3 + 3);
  EXPECT_GT(chunked.counts().gemms, 150) << "the CPU budget no longer chunks conv2 by image";
  std::vector<float> ga = Gradients(**a);
  std::vector<float> gb = Gradients(**b);
  ASSERT_EQ(ga.size(), gb.size());
  float scale = 0, diff = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    scale = std::max(scale, std::abs(ga[i]));
    diff = std::max(diff, std::abs(ga[i] - gb[i]));
  }
  EXPECT_LE(diff, 1e-4f * scale) << "largest gradient " << scale;
}

// The CNN on a counting CPU device whose column budget is a GPU's (the whole batch at once).
class CountedCnnStep : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = MakeCnn(device_, options_);
    ASSERT_TRUE(made.ok()) << made.status();
    model_ = std::move(*made);
  }

  CpuDevice cpu_;
  CountingDevice device_{cpu_, int64_t{256} << 20};
  const CnnOptions options_{};
  std::unique_ptr<Model> model_;
  const CnnBatch batch_ = RandomBatch(options_);
};

// A gradient step waits for the device once: the loss's download (the Synchronize after it,
// which reports backend errors, has nothing left to wait for). Every further wait would stall a
// GPU's queue once more per step.
TEST_F(CountedCnnStep, AGradientStepWaitsForTheDeviceOnce) {
  for (int step = 0; step < 3; ++step) {
    device_.Reset();
    ASSERT_TRUE(model_->ComputeGradients(batch_.images, batch_.labels).ok());
    EXPECT_EQ(device_.counts().host_waits, 1) << "step " << step;
    EXPECT_EQ(device_.counts().uploads, 2) << "images and labels, nothing else";
  }
}

// With the loss left on the device (all-reduce: beside the gradients it sums) the step does not
// wait at all, and the loss is the mean the host would have summed.
TEST_F(CountedCnnStep, AGradientStepWithTheLossOnTheDeviceDoesNotWait) {
  absl::StatusOr<float> on_host = model_->ComputeGradients(batch_.images, batch_.labels);
  ASSERT_TRUE(on_host.ok()) << on_host.status();
  Tensor loss(device_, {1});
  device_.Reset();
  ASSERT_TRUE(model_->ComputeGradients(batch_.images, batch_.labels, loss.data()).ok());
  EXPECT_EQ(device_.counts().host_waits, 0);
  EXPECT_EQ(device_.counts().uploads, 2) << "images and labels, nothing else";
  float on_device = 0;
  device_.Download(loss, &on_device, 1);
  EXPECT_NEAR(on_device, *on_host, 1e-5f * std::max(1.0f, *on_host));
}

}  // namespace
}  // namespace kubetrain::worker
