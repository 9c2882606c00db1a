// Checked calls into the CUDA libraries: one macro per foreign error domain (CUDA runtime, cuBLAS,
// NCCL), each turning the library's code into an absl::Status whose message carries file:line,
// the call's text and the library's own description.
//
//   KT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes));        // returns the Status on failure
//   absl::Status s = KT_CUBLAS_STATUS(cublasSgemm(...));     // converts without returning
//
// The converting form serves void Device methods, which record their first error for the next
// Synchronize, and destructors, which log it (LogIfError): no code is ever dropped unread.
//
// Codes follow what a caller should do: FAILED_PRECONDITION for a machine without a CUDA
// device or driver (or a build without this GPU's architecture), RESOURCE_EXHAUSTED for out of
// memory, UNAVAILABLE for a device that is busy or a peer/network failure in NCCL, INTERNAL for
// everything that means a bug or a broken device.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/status.h"

namespace kubetrain::worker::cuda {
namespace internal {

// The slow paths, out of line: only reached on failure.
absl::Status CudaError(cudaError_t error, const char* call, const char* file, int line);
absl::Status CublasError(cublasStatus_t status, const char* call, const char* file, int line);
absl::Status NcclError(ncclResult_t result, const char* call, const char* file, int line);

}  // namespace internal

inline absl::Status CudaStatus(cudaError_t error, const char* call, const char* file, int line) {
  return error == cudaSuccess ? absl::OkStatus() : internal::CudaError(error, call, file, line);
}

inline absl::Status CublasStatus(cublasStatus_t status, const char* call, const char* file,
                                 int line) {
  return status == CUBLAS_STATUS_SUCCESS ? absl::OkStatus()
                                         : internal::CublasError(status, call, file, line);
}

// ncclInProgress (from a non-blocking communicator) counts as a failure here: callers that use
// non-blocking calls test for it before converting.
inline absl::Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line) {
  return result == ncclSuccess ? absl::OkStatus() : internal::NcclError(result, call, file, line);
}

// For destructors and other places that cannot return a Status: logs a failure at error level,
// `msg` with the status as its error field.
void LogIfError(const absl::Status& status, absl::string_view msg);

}  // namespace kubetrain::worker::cuda

#define KT_CUDA_STATUS(expr) \
  ::kubetrain::worker::cuda::CudaStatus((expr), #expr, __FILE__, __LINE__)
#define KT_CUBLAS_STATUS(expr) \
  ::kubetrain::worker::cuda::CublasStatus((expr), #expr, __FILE__, __LINE__)
#define KT_NCCL_STATUS(expr) \
  ::kubetrain::worker::cuda::NcclStatus((expr), #expr, __FILE__, __LINE__)

#define KT_CUDA_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(KT_CUDA_STATUS(expr))
#define KT_CUBLAS_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(KT_CUBLAS_STATUS(expr))
#define KT_NCCL_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(KT_NCCL_STATUS(expr))
