#include "worker/core/device_choice.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/host_port.h"

namespace kubetrain::worker {
namespace {

constexpr absl::string_view kOwnGpuFix =
    "give every rank a GPU of its own: request nvidia.com/gpu: 1 in the pod template's "
    "resources.limits (each pod then sees only its GPU), set CUDA_VISIBLE_DEVICES per process "
    "(kubetrain run does), or choose one per task with --cuda-device (KUBETRAIN_CUDA_DEVICE)";

// "1 CUDA device is visible (CUDA_VISIBLE_DEVICES=\"0\")".
std::string Visible(const CudaOrdinalInputs& in) {
  std::string s = in.visible_devices == 1
                      ? std::string("1 CUDA device is visible")
                      : absl::StrCat(in.visible_devices, " CUDA devices are visible");
  if (in.cuda_visible_devices.has_value()) {
    absl::StrAppend(&s, " (CUDA_VISIBLE_DEVICES=\"", *in.cuda_visible_devices, "\")");
  } else {
    absl::StrAppend(&s, " (CUDA_VISIBLE_DEVICES unset)");
  }
  return s;
}

// The host of a cluster-spec address, with every loopback name counted as one host.
std::string HostOf(const std::string& address) {
  std::string host;
  int port = 0;
  if (!SplitHostPort(address, &host, &port).ok()) host = address;
  host = absl::AsciiStrToLower(host);
  if (host == "localhost" || host == "ip6-localhost" || host == "::1" ||
      absl::StartsWith(host, "127.")) {
    return "loopback";
  }
  return host;
}

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

std::string CudaVersionString(int version) {
  if (version <= 0) return "none";
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

std::string MinimumDriverFor(int runtime_version) {
  switch (runtime_version / 1000) {
    case 13:
      return "580";
    case 12:
      return "525";
    case 11:
      return "450";
    default:
      return "";
  }
}

CudaAvailability ExplainCudaProbe(const CudaProbeReport& r) {
  CudaAvailability a;
  a.device_count = r.device_count;
  if (!r.built_with_cuda) {
    a.reason = "no-cuda-build";
    a.message =
        "this build has no CUDA backend (configured without nvcc, or with -DKUBETRAIN_CUDA=OFF)";
    return a;
  }
  const std::string driver = CudaVersionString(r.driver_version);
  const std::string runtime = CudaVersionString(r.runtime_version);
  a.driver_cuda = driver;
  a.runtime_cuda = runtime;
  const std::string minimum = MinimumDriverFor(r.runtime_version);
  const std::string needs =
      minimum.empty() ? std::string()
                      : absl::StrCat(", which needs NVIDIA driver ", minimum, " or newer");
  switch (r.error) {
    case cuda_error::kSuccess:
      if (r.device_count > 0) {
        a.available = true;
        a.reason = "gpu";
        return a;
      }
      a.reason = "no-gpu";
      a.message =
          "no CUDA device/driver: the driver reports no CUDA device (check CUDA_VISIBLE_DEVICES "
          "and the pod's nvidia.com/gpu limit)";
      return a;
    case cuda_error::kNoDevice:
      a.reason = "no-gpu";
      a.message = absl::StrCat(
          "no CUDA device/driver: no CUDA-capable GPU is visible (the NVIDIA driver, for CUDA ",
          driver, ", is loaded; check CUDA_VISIBLE_DEVICES and the pod's nvidia.com/gpu limit)");
      return a;
    case cuda_error::kStubLibrary:
      a.reason = "no-driver";
      a.message =
          "no CUDA device/driver: the CUDA toolkit's libcuda stub was loaded instead of the NVIDIA "
          "driver (take the toolkit's stubs folder off LD_LIBRARY_PATH, or run where the driver "
          "is installed)";
      return a;
    case cuda_error::kInsufficientDriver:
      if (r.driver_version <= 0) {
        a.reason = "no-driver";
        a.message = absl::StrCat(
            "no CUDA device/driver: no NVIDIA driver is loaded (libcuda.so.1 not found); this "
            "build's runtime is CUDA ",
            runtime, needs);
        return a;
      }
      a.reason = "driver-too-old";
      a.suspicious = true;
      a.message = absl::StrCat(
          "CUDA driver too old: the NVIDIA driver supports CUDA ", driver,
          " but this build's runtime is CUDA ", runtime, needs,
          "; upgrade the node's NVIDIA driver, or use a worker image built with a CUDA toolkit "
          "the driver supports");
      return a;
    case cuda_error::kCompatNotSupportedOnDevice:
      a.reason = "driver-too-old";
      a.suspicious = true;
      a.message = absl::StrCat(
          "CUDA driver too old: the NVIDIA driver supports CUDA ", driver,
          " and the forward-compatibility package (cuda-compat) cannot bring this GPU to CUDA ",
          runtime, needs, "; upgrade the node's NVIDIA driver");
      return a;
    case cuda_error::kSystemDriverMismatch:
      a.reason = "driver-mismatch";
      a.suspicious = true;
      a.message =
          "NVIDIA driver mismatch: the loaded kernel module and the user-space driver (libcuda) "
          "differ in version (a driver upgrade without a reboot, or an image that carries its "
          "own libcuda); reboot the node, or drop libcuda from the image";
      return a;
    default:
      a.reason = "cuda-error";
      a.suspicious = true;
      a.message = absl::StrCat("CUDA failed to start: ", r.error_text, " (driver supports CUDA ",
                               driver, ", runtime CUDA ", runtime, ")");
      return a;
  }
}

absl::StatusOr<DeviceDecision> DecideDevice(absl::string_view kind, const CudaAvailability& cuda) {
  if (kind == "cpu") return DeviceDecision{.use_cuda = false, .reason = "requested"};
  if (kind != "cuda" && kind != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device: unknown device \"", kind, "\"; expected one of: auto, cpu, cuda"));
  }
  if (cuda.available) {
    return DeviceDecision{.use_cuda = true, .reason = kind == "cuda" ? "requested" : "gpu"};
  }
  if (kind == "cuda") {
    return absl::FailedPreconditionError(
        absl::StrCat("--device=cuda: ", cuda.message, "; or pass --device=cpu"));
  }
  return DeviceDecision{
      .use_cuda = false, .reason = cuda.reason, .fallback = cuda.message, .warn = cuda.suspicious};
}

absl::StatusOr<CudaOrdinal> ChooseCudaOrdinal(const CudaOrdinalInputs& in) {
  if (in.visible_devices < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA device to choose from: ", Visible(in)));
  }
  const std::string choose_from = in.visible_devices == 1
                                      ? std::string("the only one is 0")
                                      : absl::StrCat("choose 0..", in.visible_devices - 1);
  if (in.flag.has_value()) {
    if (*in.flag < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cuda-device: must be >= 0, got ", *in.flag));
    }
    if (*in.flag >= in.visible_devices) {
      return absl::FailedPreconditionError(
          absl::StrCat("--cuda-device=", *in.flag, ": only ", Visible(in), "; ", choose_from));
    }
    return CudaOrdinal{.ordinal = *in.flag, .source = "--cuda-device"};
  }
  if (in.local_rank.has_value() && !in.local_rank->empty()) {
    int local_rank = 0;
    if (!AllDigits(*in.local_rank) || !absl::SimpleAtoi(*in.local_rank, &local_rank)) {
      return absl::InvalidArgumentError(
          absl::StrCat("LOCAL_RANK=\"", *in.local_rank,
                       "\": not a non-negative integer (unset it, or choose "
                       "the GPU with --cuda-device)"));
    }
    if (local_rank >= in.visible_devices) {
      return absl::FailedPreconditionError(
          absl::StrCat("LOCAL_RANK=", local_rank, ", but only ", Visible(in),
                       ": ranks on this host would share a GPU, which NCCL refuses; ", kOwnGpuFix));
    }
    return CudaOrdinal{.ordinal = local_rank, .source = "LOCAL_RANK"};
  }
  if (in.rank >= 0 && static_cast<size_t>(in.rank) < in.rank_addresses.size()) {
    const std::string self = HostOf(in.rank_addresses[in.rank]);
    std::vector<int> here;
    int local_rank = 0;
    for (size_t i = 0; i < in.rank_addresses.size(); ++i) {
      if (HostOf(in.rank_addresses[i]) != self) continue;
      if (static_cast<int>(i) < in.rank) ++local_rank;
      here.push_back(static_cast<int>(i));
    }
    if (static_cast<int>(here.size()) > in.visible_devices) {
      std::vector<int> named(here.begin(), here.begin() + std::min<size_t>(here.size(), 8));
      return absl::FailedPreconditionError(
          absl::StrCat("TF_CONFIG puts ", here.size(), " ranks of this job on this host (ranks ",
                       absl::StrJoin(named, ", "), here.size() > named.size() ? ", ..." : "",
                       "; this is rank ", in.rank, "), but only ", Visible(in),
                       ": they would share a GPU, which NCCL refuses; ", kOwnGpuFix));
    }
    return CudaOrdinal{.ordinal = local_rank, .source = "TF_CONFIG"};
  }
  return CudaOrdinal{.ordinal = 0, .source = "default"};
}

absl::Status ExplainDuplicateGpu(const absl::Status& status, int ordinal) {
  if (status.ok() || !absl::StrContains(absl::AsciiStrToLower(status.message()), "duplicate gpu")) {
    return status;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("two ranks of this job got the same GPU (this rank uses CUDA device ", ordinal,
                   "), which NCCL refuses; ", kOwnGpuFix, " [NCCL: ", status.message(), "]"));
}

}  // namespace kubetrain::worker
