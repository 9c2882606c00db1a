#include "worker/device/device_factory.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

#if KUBETRAIN_HAVE_CUDA
#include "worker/cuda/cuda_device.h"
#endif

namespace kubetrain::worker {
namespace {

absl::StatusOr<std::unique_ptr<Device>> MakeCudaDevice(
    [[maybe_unused]] int ordinal, [[maybe_unused]] const DeviceRequest& request) {
#if KUBETRAIN_HAVE_CUDA
  ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                   CudaDevice::Create({.ordinal = ordinal,
                                       .tf32 = request.tf32.value_or(false),
                                       .tf32_convolutions = request.tf32.value_or(true),
                                       .precision = request.precision}));
  return std::unique_ptr<Device>(std::move(device));
#else
  return CudaAvailable();
#endif
}

}  // namespace

CudaAvailability ProbeCuda() {
#if KUBETRAIN_HAVE_CUDA
  return ProbeCudaDevices().availability;
#else
  return ExplainCudaProbe({.built_with_cuda = false});
#endif
}

absl::Status CudaAvailable() {
#if KUBETRAIN_HAVE_CUDA
  return ProbeCudaDevices().status;
#else
  return absl::FailedPreconditionError(ProbeCuda().message);
#endif
}

absl::StatusOr<ChosenDevice> MakeDevice(const DeviceRequest& request) {
  ChosenDevice chosen;
  if (request.kind != "cpu") chosen.cuda = ProbeCuda();
  ASSIGN_OR_RETURN(chosen.decision, DecideDevice(request.kind, chosen.cuda));
  if (!chosen.decision.use_cuda) {
    if (request.tf32 == true) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--tf32: TF32 is a tensor-core mode of NVIDIA GPUs, and this task runs on the CPU (",
          chosen.decision.reason, "); drop --tf32 or run on a GPU"));
    }
    if (request.cuda_graphs == true) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--cuda-graphs: CUDA graphs capture a GPU's training steps, and this task runs on the "
          "CPU (",
          chosen.decision.reason,
          "), which runs them as issued; drop --cuda-graphs or run on a GPU"));
    }
    CpuDeviceOptions cpu = request.cpu;
    cpu.precision = request.precision;
    chosen.device = std::make_unique<CpuDevice>(cpu);
    return chosen;
  }
  CudaOrdinalInputs inputs = request.cuda;
  inputs.visible_devices = chosen.cuda.device_count;
  absl::StatusOr<CudaOrdinal> gpu = ChooseCudaOrdinal(inputs);
  if (!gpu.ok()) {
    return absl::Status(gpu.status().code(),
                        absl::StrCat("--device=", request.kind, ": ", gpu.status().message()));
  }
  chosen.gpu = *gpu;
  absl::StatusOr<std::unique_ptr<Device>> device = MakeCudaDevice(gpu->ordinal, request);
  if (!device.ok()) {
    const absl::Status& status = device.status();
    return absl::Status(
        status.code(),
        absl::StrCat("--device=", request.kind, ": ", status.message(),
                     absl::IsFailedPrecondition(status) ? "; or pass --device=cpu" : ""));
  }
  chosen.device = std::move(*device);
  return chosen;
}

std::string DescribeDevice(const Device& device) {
#if KUBETRAIN_HAVE_CUDA
  if (const auto* cuda = dynamic_cast<const CudaDevice*>(&device)) return cuda->description();
#endif
  return std::string(device.name());
}

}  // namespace kubetrain::worker
