// --precision=bf16 on a GPU (docs/decisions/0011-bf16-mixed-precision.md): cuBLAS's bf16 GEMMs and
// cuDNN's bf16 convolutions against the CPU backend's bf16 arithmetic (the same rounding of the
// operands, float32 sums in another order), the step captured in a graph to the bit as in
// float32, and the refusal on GPUs before compute capability 8.0. Every test skips without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/cuda/cuda_device.h"
#include "worker/tests/graph_training.h"
#include "worker/tests/model_reads.h"
#include "worker/tests/random_images.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::testing::HasSubstr;

class CudaBf16Test : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaProbe probe = ProbeCudaDevices();
    if (probe.device_count == 0) GTEST_SKIP() << probe.status.message();
    int major = 0;
    ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
    absl::StatusOr<std::unique_ptr<CudaDevice>> device =
        CudaDevice::Create({.precision = Precision::kBFloat16});
    if (major < 8) {
      EXPECT_THAT(device.status(),
                  StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--precision=bf16")));
      GTEST_SKIP() << "compute capability " << major << ": bf16 is refused (checked)";
    }
    ASSERT_TRUE(device.ok()) << device.status();
    gpu_ = *std::move(device);
  }

  CpuDevice cpu_{{.blas_threads = 1, .precision = Precision::kBFloat16}};
  std::unique_ptr<CudaDevice> gpu_;
};

struct Bf16GemmCase {
  bool trans_a;
  bool trans_b;
  int m, n, k;
};

class CudaBf16Gemm : public CudaBf16Test, public ::testing::WithParamInterface<Bf16GemmCase> {};

// The products of bf16 operands are exact in float32 on both backends, so the two differ by
// the order of the float32 sums only.
TEST_P(CudaBf16Gemm, AgreesWithTheCpusBf16Gemm) {
  const auto [ta, tb, m, n, k] = GetParam();
  const float alpha = 1.5f, beta = -0.5f;
  const std::vector<float> a = RandomVector(int64_t{m} * k, 11),
                           b = RandomVector(int64_t{k} * n, 12);
  std::vector<float> want = RandomVector(int64_t{m} * n, 13);
  const std::vector<float> c = want;
  cpu_.Gemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, want.data());

  Tensor ga(*gpu_, {int64_t{m} * k}), gb(*gpu_, {int64_t{k} * n}), gc(*gpu_, {int64_t{m} * n});
  gpu_->Upload(a.data(), ga, ga.size());
  gpu_->Upload(b.data(), gb, gb.size());
  gpu_->Upload(c.data(), gc, gc.size());
  gpu_->Gemm(ta, tb, m, n, k, alpha, ga.data(), gb.data(), beta, gc.data());
  std::vector<float> got(static_cast<size_t>(gc.size()));
  gpu_->Download(gc, got.data(), gc.size());
  ASSERT_THAT(gpu_->Synchronize(), IsOk());
  // |a|, |b| < 1: the sum of the products' magnitudes is below k.
  const double tolerance = 1e-5 * alpha * k;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tolerance) << "at " << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBf16Gemm,
                         ::testing::Values(Bf16GemmCase{false, false, 37, 29, 53},
                                           Bf16GemmCase{true, false, 37, 29, 53},
                                           Bf16GemmCase{false, true, 37, 29, 53},
                                           Bf16GemmCase{true, true, 37, 29, 53},
                                           Bf16GemmCase{true, false, 25, 33, 4097},
                                           Bf16GemmCase{false, true, 513, 10, 129}),
                         [](const ::testing::TestParamInfo<Bf16GemmCase>& info) {
                           const Bf16GemmCase& p = info.param;
                           return absl::StrCat(p.trans_a ? "T" : "N", p.trans_b ? "T" : "N", "_",
                                               p.m, "x", p.n, "x", p.k);
                         });

// The CNN's convolutions run in cuDNN's bf16 configuration (bf16 images, filters and outputs,
// float32 sums) and its dense layers in cuBLAS's bf16 GEMMs; the CPU rounds the same operands
// but keeps each output in float32, so the two agree to bf16's precision (2^-8).
TEST_F(CudaBf16Test, CnnLossAndGradientsAgreeWithTheCpusBf16) {
  testing::ExpectCnnStepNear(*gpu_, cpu_, 2e-2, 5e-2);
}

class CudaBf16Graphs : public CudaBf16Test, public ::testing::WithParamInterface<bool> {};

// The bf16 operands live in the device's scratch memory, which the warm-up step grows: captured
// steps then replay the same work, to the bit.
TEST_P(CudaBf16Graphs, EqualUncapturedTrainingToTheBit) {
  std::unique_ptr<Model> model = testing::GraphTestModel(GetParam(), *gpu_);
  ASSERT_NO_FATAL_FAILURE(testing::ExpectCapturedTrainingEqualsUncaptured(*model));
  EXPECT_GT(model->step_graphs().stats().replays, 0);
  EXPECT_THAT(gpu_->Synchronize(), IsOk());
}

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, CudaBf16Graphs, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Cnn" : "Mlp";
                         });

}  // namespace
}  // namespace kubetrain::worker
