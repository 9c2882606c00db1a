#include "worker/device/device_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>

namespace kubetrain::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::StatusOr<ChosenDevice> Make(const std::string& kind, CudaOrdinalInputs cuda = {}) {
  return MakeDevice({.kind = kind, .cpu = {.blas_threads = 1}, .cuda = std::move(cuda)});
}

TEST(MakeDevice, CpuIsTheOpenBlasBackend) {
  absl::StatusOr<ChosenDevice> device = Make("cpu");
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(device->device->name(), "cpu");
  EXPECT_NE(dynamic_cast<CpuDevice*>(device->device.get()), nullptr);
  EXPECT_EQ(DescribeDevice(*device->device), "cpu");
  EXPECT_EQ(device->decision.reason, "requested");
  EXPECT_FALSE(device->gpu.has_value());
}

TEST(MakeDevice, UnknownKindNamesTheFlagAndTheChoices) {
  absl::StatusOr<ChosenDevice> device = Make("tpu");
  ASSERT_TRUE(absl::IsInvalidArgument(device.status())) << device.status();
  EXPECT_THAT(device.status().message(), HasSubstr("--device"));
  EXPECT_THAT(device.status().message(), HasSubstr("\"tpu\""));
  EXPECT_THAT(device.status().message(), HasSubstr("auto, cpu, cuda"));
}

TEST(MakeDevice, KindsAreExactNames) {
  EXPECT_TRUE(absl::IsInvalidArgument(Make("CPU").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(Make("").status()));
}

TEST(CudaAvailable, SaysWhyNot) {
  const absl::Status available = CudaAvailable();
  if (available.ok()) return;  // a GPU machine; nothing to explain
  EXPECT_TRUE(absl::IsFailedPrecondition(available)) << available;
#if KUBETRAIN_HAVE_CUDA
  EXPECT_THAT(available.message(), HasSubstr("no CUDA device/driver"));
#else
  EXPECT_THAT(available.message(), HasSubstr("no CUDA backend"));
#endif
}

// What "cuda" and "auto" give depends on the machine; each branch checks its own promise.
TEST(MakeDevice, CudaWhereAvailableElseAClearPrecondition) {
  absl::StatusOr<ChosenDevice> device = Make("cuda");
  if (CudaAvailable().ok()) {
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ(device->device->name(), "cuda");
    EXPECT_THAT(DescribeDevice(*device->device), StartsWith("cuda:0 "));
    ASSERT_TRUE(device->gpu.has_value());
    EXPECT_EQ(device->gpu->source, "default");
    return;
  }
  ASSERT_TRUE(absl::IsFailedPrecondition(device.status())) << device.status();
  EXPECT_THAT(std::string(device.status().message()), StartsWith("--device=cuda: "));
  EXPECT_THAT(device.status().message(), HasSubstr(ProbeCuda().message));
  EXPECT_THAT(device.status().message(), HasSubstr("or pass --device=cpu"));
}

TEST(MakeDevice, AutoPrefersCudaAndFallsBackToCpuSayingWhy) {
  absl::StatusOr<ChosenDevice> device = Make("auto");
  ASSERT_TRUE(device.ok()) << device.status();
  const CudaAvailability cuda = ProbeCuda();
  EXPECT_EQ(device->device->name(), cuda.available ? "cuda" : "cpu");
  EXPECT_EQ(device->decision.reason, cuda.reason);
  EXPECT_EQ(device->decision.fallback, cuda.message);
  EXPECT_EQ(device->decision.warn, cuda.suspicious);
}

// The GPU choice applies: on a GPU machine a choice beyond the visible devices fails naming
// the flag; without one the device falls back before any GPU is chosen.
TEST(MakeDevice, AutoWithAnImpossibleGpuChoice) {
  absl::StatusOr<ChosenDevice> device = Make("auto", {.flag = 1023});
  if (!ProbeCuda().available) {
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ(device->device->name(), "cpu");
    return;
  }
  ASSERT_TRUE(absl::IsFailedPrecondition(device.status())) << device.status();
  EXPECT_THAT(device.status().message(), HasSubstr("--cuda-device=1023"));
}

// --tf32 is a GPU mode: asked of a task that runs on the CPU it is an error naming the flag,
// never silently ignored; on a GPU it is the device's GEMM mode.
// A flag only a GPU acts on, the DeviceRequest field it sets.
struct GpuOnlyFlag {
  const char* name;
  const char* flag;
  std::optional<bool> DeviceRequest::*field;
};

class GpuOnlyFlagOnTheCpu : public ::testing::TestWithParam<GpuOnlyFlag> {};

// Asked for (true) on the CPU the flag is refused naming it; unset or false (the worker's default
// leaves it unset) the CPU runs. Left unset, --tf32 is the GPU's choice (convolutions in TF32, as
// PyTorch); --tf32=false turns TF32 off, which the CPU never used either.
TEST_P(GpuOnlyFlagOnTheCpu, IsRefusedOnlyWhenAskedFor) {
  const GpuOnlyFlag& f = GetParam();
  auto on_cpu = [&](std::optional<bool> value) {
    DeviceRequest request{.kind = "cpu", .cpu = {.blas_threads = 1}};
    request.*f.field = value;
    return MakeDevice(request);
  };
  absl::StatusOr<ChosenDevice> cpu = on_cpu(true);
  ASSERT_TRUE(absl::IsFailedPrecondition(cpu.status())) << cpu.status();
  EXPECT_THAT(std::string(cpu.status().message()), StartsWith(std::string(f.flag) + ": "));
  EXPECT_THAT(cpu.status().message(), HasSubstr("runs on the CPU (requested)"));
  for (std::optional<bool> value : {std::optional<bool>(), std::optional<bool>(false)}) {
    absl::StatusOr<ChosenDevice> plain = on_cpu(value);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(plain->device->name(), "cpu");
  }
}

INSTANTIATE_TEST_SUITE_P(
    MakeDevice, GpuOnlyFlagOnTheCpu,
    ::testing::Values(GpuOnlyFlag{"Tf32", "--tf32", &DeviceRequest::tf32},
                      GpuOnlyFlag{"CudaGraphs", "--cuda-graphs", &DeviceRequest::cuda_graphs}),
    [](const ::testing::TestParamInfo<GpuOnlyFlag>& info) { return std::string(info.param.name); });

TEST(MakeDevice, Tf32IsTakenOnAGpu) {
  absl::StatusOr<ChosenDevice> automatic =
      MakeDevice({.kind = "auto", .cpu = {.blas_threads = 1}, .tf32 = true});
  if (!ProbeCuda().available) {
    ASSERT_TRUE(absl::IsFailedPrecondition(automatic.status())) << automatic.status();
    EXPECT_THAT(automatic.status().message(), HasSubstr(ProbeCuda().reason));
    return;
  }
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->device->name(), "cuda");
}

// --precision reaches the CPU backend too: its GEMMs then read bf16 operands (1 + 2^-10 has no
// bf16 value but 1), as a GPU's would.
TEST(MakeDevice, Bf16PrecisionReachesTheCpusGemms) {
  for (const Precision precision : {Precision::kFloat32, Precision::kBFloat16}) {
    absl::StatusOr<ChosenDevice> chosen =
        MakeDevice({.kind = "cpu", .cpu = {.blas_threads = 1}, .precision = precision});
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    const float a = 1.0f + std::ldexp(1.0f, -10), b = 1.0f;
    float c = 0.0f;
    chosen->device->Gemm(false, false, 1, 1, 1, 1.0f, &a, &b, 0.0f, &c);
    EXPECT_EQ(c, precision == Precision::kBFloat16 ? 1.0f : a) << PrecisionName(precision);
  }
}

TEST(ProbeCuda, AgreesWithCudaAvailable) {
  const CudaAvailability cuda = ProbeCuda();
  const absl::Status available = CudaAvailable();
  EXPECT_EQ(cuda.available, available.ok()) << available;
  if (!cuda.available) {
    EXPECT_EQ(available.message(), cuda.message);
    EXPECT_NE(cuda.reason, "gpu");
  }
#if KUBETRAIN_HAVE_CUDA
  EXPECT_NE(cuda.runtime_cuda, "none");  // the runtime answers without a driver
  EXPECT_FALSE(cuda.runtime_cuda.empty());
#else
  EXPECT_EQ(cuda.reason, "no-cuda-build");
#endif
}

}  // namespace
}  // namespace kubetrain::worker
