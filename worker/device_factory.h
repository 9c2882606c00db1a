// Chooses the worker's compute backend from its --device flag.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/cpu/cpu_device.h"
#include "worker/device.h"

namespace kubetrain::worker {

// OK when this build has the CUDA backend and a CUDA device is visible; FAILED_PRECONDITION
// saying which of the two is missing otherwise.
absl::Status CudaAvailable();

// `kind` is the --device flag:
//   "cpu"  the OpenBLAS backend, configured by `cpu_options`;
//   "cuda" CUDA device 0; FAILED_PRECONDITION naming --device and the fix when this build has no
//          CUDA backend or no CUDA device is visible;
//   "auto" CUDA when available, else CPU (a CUDA device that is present but fails to start is an
//          error, not a silent fall-back to the CPU).
// Anything else is INVALID_ARGUMENT naming --device and the allowed values.
absl::StatusOr<std::unique_ptr<Device>> MakeDevice(absl::string_view kind,
                                                   const CpuDeviceOptions& cpu_options);

// A human description of `device` for logs and metric labels: "cpu", or for CUDA the ordinal and
// the GPU's name ("cuda:0 NVIDIA H100 80GB HBM3"); other devices give their name().
std::string DescribeDevice(const Device& device);

}  // namespace kubetrain::worker
