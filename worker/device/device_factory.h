// Chooses the worker's compute backend from its --device flag, and on CUDA which GPU
// (the rules: worker/core/device_choice.h; docs/architecture.md §5.8).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/device.h"
#include "worker/core/device_choice.h"
#include "worker/core/precision.h"

namespace kubetrain::worker {

// What this process sees of CUDA: ExplainCudaProbe over cudaGetDeviceCount and the driver and
// runtime versions, or reason "no-cuda-build" in a build without the CUDA backend.
CudaAvailability ProbeCuda();

// OK when this build has the CUDA backend and a CUDA device is visible; FAILED_PRECONDITION
// saying what is missing otherwise (ProbeCuda's message).
absl::Status CudaAvailable();

struct DeviceRequest {
  // --device:
  //   "cpu"  the OpenBLAS backend, configured by `cpu`;
  //   "cuda" a CUDA device; FAILED_PRECONDITION naming --device, the cause (no CUDA build, no
  //          GPU, no driver, a driver too old for this build's CUDA runtime, ...) and the fix;
  //   "auto" CUDA when available, else CPU (ChosenDevice::decision says why). A CUDA device
  //          that is present but fails to start is an error, not a fall-back to the CPU.
  // Anything else is INVALID_ARGUMENT naming --device and the allowed values.
  std::string kind = "auto";
  CpuDeviceOptions cpu;
  // Which GPU (ChooseCudaOrdinal); visible_devices is filled in from the probe.
  CudaOrdinalInputs cuda;
  // --tf32: unset, the GPU's convolutions in TF32 and its GEMMs in FP32 (as PyTorch's defaults);
  // true, both in TF32; false, neither (CudaDeviceOptions::tf32, tf32_convolutions). true is
  // FAILED_PRECONDITION naming the flag when the task ends up on the CPU.
  std::optional<bool> tf32;
  // --cuda-graphs: true is FAILED_PRECONDITION naming the flag when the task ends up on the CPU,
  // which runs its steps as issued; unset or false, any device.
  std::optional<bool> cuda_graphs;
  // --precision: the arithmetic of GEMMs and convolutions on either backend (worker/core/
  // precision.h); bf16 on a GPU before compute capability 8.0 is FAILED_PRECONDITION naming it.
  Precision precision = Precision::kFloat32;
};

struct ChosenDevice {
  std::unique_ptr<Device> device;
  DeviceDecision decision;         // backend, reason label, why auto fell back to the CPU
  CudaAvailability cuda;           // what CUDA said; not asked for --device=cpu
  std::optional<CudaOrdinal> gpu;  // on CUDA: the ordinal and where it came from
};

absl::StatusOr<ChosenDevice> MakeDevice(const DeviceRequest& request);

// A human description of `device` for logs and metric labels: "cpu", or for CUDA the ordinal and
// the GPU's name ("cuda:0 NVIDIA H100 80GB HBM3"); other devices give their name().
std::string DescribeDevice(const Device& device);

}  // namespace kubetrain::worker
