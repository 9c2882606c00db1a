#include "worker/device_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

#if KUBETRAIN_HAVE_CUDA
#include "worker/cuda/cuda_device.h"
#endif

namespace kubetrain::worker {
namespace {

#if KUBETRAIN_HAVE_CUDA
constexpr absl::string_view kCudaFix = "run where a GPU and its driver are visible";
#else
constexpr absl::string_view kCudaFix = "use a build configured with nvcc (KUBETRAIN_CUDA=AUTO/ON)";
#endif

absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice() {
#if KUBETRAIN_HAVE_CUDA
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device, CudaDevice::Create());
  return std::unique_ptr<Device>(std::move(device));
#else
  return CudaAvailable();
#endif
}

}  // namespace

absl::Status CudaAvailable() {
#if KUBETRAIN_HAVE_CUDA
  return ProbeCudaDevices().status;
#else
  return absl::FailedPreconditionError(
      "this build has no CUDA backend (configured without nvcc, or with -DKUBETRAIN_CUDA=OFF)");
#endif
}

absl::StatusOr<std::unique_ptr<Device>> MakeDevice(absl::string_view kind,
                                                   const CpuDeviceOptions& cpu_options) {
  if (kind == "cpu") return std::make_unique<CpuDevice>(cpu_options);
  if (kind != "cuda" && kind != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: unknown device \"", kind, "\"; expected one of: auto, cpu, cuda"));
  }
  if (kind == "auto" && !CudaAvailable().ok()) return std::make_unique<CpuDevice>(cpu_options);
  absl::StatusOr<std::unique_ptr<Device>> device = MakeCudaDevice();
  if (device.ok()) return device;
  const absl::Status& status = device.status();
  if (!absl::IsFailedPrecondition(status)) {
    return absl::Status(status.code(), absl::StrCat("--device=", kind, ": ", status.message()));
  }
  return absl::FailedPreconditionError(absl::StrCat("--device=", kind, ": ", status.message(), "; ",
                                                    kCudaFix, ", or pass --device=cpu"));
}

std::string DescribeDevice(const Device& device) {
#if KUBETRAIN_HAVE_CUDA
  if (const auto* cuda = dynamic_cast<const CudaDevice*>(&device)) return cuda->description();
#endif
  return std::string(device.name());
}

}  // namespace kubetrain::worker
