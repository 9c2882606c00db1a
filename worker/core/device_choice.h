// The worker's device decisions as pure functions of what the process was told and what the CUDA
// runtime reported, so every rule is unit-tested on machines without a GPU
// (docs/architecture.md §5.8):
//   - ExplainCudaProbe: cudaGetDeviceCount's answer (error code, count, driver and runtime
//     versions) → available or not, a bounded reason label and a sentence naming the fix;
//   - DecideDevice: --device (auto, cpu, cuda) + that answer → the backend, or the error;
//   - ChooseCudaOrdinal: --cuda-device, LOCAL_RANK, TF_CONFIG → which visible GPU this task uses;
//   - ExplainDuplicateGpu: NCCL's "Duplicate GPU detected" → the same fix in plain words.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kubetrain::worker {

// The cudaError_t values ExplainCudaProbe tells apart (cuda_device.cc checks them against
// driver_types.h at compile time; this header needs no CUDA).
namespace cuda_error {
inline constexpr int kSuccess = 0;
inline constexpr int kStubLibrary = 34;                  // cudaErrorStubLibrary
inline constexpr int kInsufficientDriver = 35;           // cudaErrorInsufficientDriver
inline constexpr int kNoDevice = 100;                    // cudaErrorNoDevice
inline constexpr int kSystemDriverMismatch = 803;        // cudaErrorSystemDriverMismatch
inline constexpr int kCompatNotSupportedOnDevice = 804;  // cudaErrorCompatNotSupportedOnDevice
}  // namespace cuda_error

// What the CUDA runtime said when asked for devices.
struct CudaProbeReport {
  bool built_with_cuda = true;
  int error = cuda_error::kSuccess;  // cudaGetDeviceCount's cudaError_t
  std::string error_text;            // cudaGetErrorName + cudaGetErrorString, for other errors
  int device_count = 0;
  // 1000 * major + 10 * minor (12080 = CUDA 12.8). driver_version is the newest CUDA the
  // installed driver supports, 0 when no driver is loaded (cudaDriverGetVersion).
  int driver_version = 0;
  int runtime_version = 0;  // cudaRuntimeGetVersion: the CUDA this build runs on
};

struct CudaAvailability {
  bool available = false;
  // Bounded, for the kubetrain_worker_device_info label: "gpu" when available, else
  // "no-cuda-build", "no-gpu", "no-driver", "driver-too-old", "driver-mismatch", "cuda-error".
  std::string reason;
  // Empty when available; otherwise what is wrong and what to do, versions included.
  std::string message;
  // A GPU appears to be there but cannot be used (an old or broken driver, a CUDA failure):
  // worth a warning when --device=auto falls back to the CPU. False for plain CPU machines.
  bool suspicious = false;
  int device_count = 0;
  // The versions as "13.0" (driver: the newest CUDA it supports; "none" without a driver);
  // empty in a build without CUDA.
  std::string driver_cuda;
  std::string runtime_cuda;
};

// "12.8" for 12080; "none" for 0.
std::string CudaVersionString(int version);
// The oldest NVIDIA driver branch for a CUDA major version ("580" for CUDA 13.x), "" if unknown.
std::string MinimumDriverFor(int runtime_version);

CudaAvailability ExplainCudaProbe(const CudaProbeReport& report);

struct DeviceDecision {
  bool use_cuda = false;
  // The kubetrain_worker_device_info reason label: "requested" (--device=cpu or cuda),
  // "gpu" (auto found one), or the CudaAvailability reason auto fell back for.
  std::string reason;
  // With auto on the CPU: why CUDA was not used (the availability message); else empty.
  std::string fallback;
  bool warn = false;  // log the fall-back at warning level (CudaAvailability::suspicious)
};

// `kind` is --device. "cpu" never looks at `cuda`. "cuda" without CUDA is FAILED_PRECONDITION
// "--device=cuda: <why>; <fix>, or pass --device=cpu". Unknown kinds are INVALID_ARGUMENT.
absl::StatusOr<DeviceDecision> DecideDevice(absl::string_view kind, const CudaAvailability& cuda);

// Which of the visible CUDA devices this task uses.
struct CudaOrdinalInputs {
  std::optional<int> flag;                // --cuda-device (KUBETRAIN_CUDA_DEVICE), when given
  std::optional<std::string> local_rank;  // LOCAL_RANK, when set
  // TF_CONFIG: the cluster-spec address ("host:port") of every training rank in rank order
  // (chief, then workers); empty without TF_CONFIG.
  std::vector<std::string> rank_addresses;
  int rank = -1;  // this task's rank; -1 for an evaluator or without TF_CONFIG
  std::optional<std::string> cuda_visible_devices;  // CUDA_VISIBLE_DEVICES, for messages
  int visible_devices = 0;                          // cudaGetDeviceCount
};

struct CudaOrdinal {
  int ordinal = 0;
  // Where it came from, for the log: "--cuda-device", "LOCAL_RANK", "TF_CONFIG" (the local
  // rank among this job's ranks on this host) or "default".
  std::string source;
};

// The first that applies: --cuda-device; LOCAL_RANK; the local rank among the training ranks
// whose TF_CONFIG host is this rank's host (loopback names count as one host); else 0.
// FAILED_PRECONDITION when the choice is not a visible device, or when more ranks of the job
// share this host than it has visible devices (they would share a GPU, which NCCL refuses); the
// message names --cuda-device, CUDA_VISIBLE_DEVICES and nvidia.com/gpu. INVALID_ARGUMENT for a
// LOCAL_RANK that is not a non-negative integer.
absl::StatusOr<CudaOrdinal> ChooseCudaOrdinal(const CudaOrdinalInputs& in);

// `status` unchanged unless it is NCCL's "Duplicate GPU detected" (two ranks on one GPU), which
// becomes FAILED_PRECONDITION saying so, with `ordinal` and the fix, the NCCL text kept.
absl::Status ExplainDuplicateGpu(const absl::Status& status, int ordinal);

}  // namespace kubetrain::worker
