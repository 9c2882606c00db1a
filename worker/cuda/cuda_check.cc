#include "worker/cuda/cuda_check.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace kubetrain::worker::cuda {
namespace internal {
namespace {

std::string Where(const char* call, const char* file, int line) {
  return absl::StrCat(file, ":", line, ": ", call, " failed: ");
}

}  // namespace

absl::Status CudaError(cudaError_t error, const char* call, const char* file, int line) {
  const std::string message = absl::StrCat(Where(call, file, line), cudaGetErrorString(error), " (",
                                           cudaGetErrorName(error), ")");
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return absl::FailedPreconditionError(absl::StrCat("no CUDA device/driver: ", message));
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return absl::FailedPreconditionError(
          absl::StrCat(message,
                       "; this build has no kernels for the GPU's architecture (rebuild with it in "
                       "CMAKE_CUDA_ARCHITECTURES)"));
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status CublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  const std::string message = absl::StrCat(Where(call, file, line), cublasGetStatusString(status),
                                           " (", cublasGetStatusName(status), ")");
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_LICENSE_ERROR:
      return absl::FailedPreconditionError(message);
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status NcclError(ncclResult_t result, const char* call, const char* file, int line) {
  std::string message = absl::StrCat(Where(call, file, line), ncclGetErrorString(result));
  // The thread's last NCCL error text; NCCL ignores the communicator argument.
  const char* detail = ncclGetLastError(nullptr);
  if (detail != nullptr && detail[0] != '\0') absl::StrAppend(&message, ": ", detail);
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::UnavailableError(message);
    case ncclInvalidUsage:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace internal

void LogIfError(const absl::Status& status, absl::string_view msg) {
  if (!status.ok()) log::Error(msg, {{"error", status}});
}

}  // namespace kubetrain::worker::cuda
