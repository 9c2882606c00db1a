#include "worker/device_factory.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace kubetrain::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(MakeDevice, CpuIsTheOpenBlasBackend) {
  absl::StatusOr<std::unique_ptr<Device>> device = MakeDevice("cpu", {.blas_threads = 1});
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->name(), "cpu");
  EXPECT_NE(dynamic_cast<CpuDevice*>(device->get()), nullptr);
  EXPECT_EQ(DescribeDevice(**device), "cpu");
}

TEST(MakeDevice, UnknownKindNamesTheFlagAndTheChoices) {
  absl::StatusOr<std::unique_ptr<Device>> device = MakeDevice("tpu", {});
  ASSERT_TRUE(absl::IsInvalidArgument(device.status())) << device.status();
  EXPECT_THAT(device.status().message(), HasSubstr("--device"));
  EXPECT_THAT(device.status().message(), HasSubstr("\"tpu\""));
  EXPECT_THAT(device.status().message(), HasSubstr("auto, cpu, cuda"));
}

TEST(MakeDevice, KindsAreExactNames) {
  EXPECT_TRUE(absl::IsInvalidArgument(MakeDevice("CPU", {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(MakeDevice("", {}).status()));
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
  absl::StatusOr<std::unique_ptr<Device>> device = MakeDevice("cuda", {});
  if (CudaAvailable().ok()) {
    ASSERT_TRUE(device.ok()) << device.status();
    EXPECT_EQ((*device)->name(), "cuda");
    EXPECT_THAT(DescribeDevice(**device), StartsWith("cuda:0 "));
    return;
  }
  ASSERT_TRUE(absl::IsFailedPrecondition(device.status())) << device.status();
  EXPECT_THAT(std::string(device.status().message()), StartsWith("--device=cuda: "));
  EXPECT_THAT(device.status().message(), HasSubstr("or pass --device=cpu"));
}

TEST(MakeDevice, AutoPrefersCudaAndFallsBackToCpu) {
  absl::StatusOr<std::unique_ptr<Device>> device = MakeDevice("auto", {});
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->name(), CudaAvailable().ok() ? "cuda" : "cpu");
}

}  // namespace
}  // namespace kubetrain::worker
