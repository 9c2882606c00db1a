// Convolutions through cuDNN for the CUDA backend (Device::MakeConvolution): NHWC images, the
// layer's HWIO kernel transposed to cuDNN's NHWC filter layout (OHWI) on the device, the
// algorithm of each direction chosen once per batch size by running cuDNN's candidates
// (cudnnFind*Ex) within a bounded workspace (worker/core/convolution.h), TF32 on tensor cores
// unless turned off (docs/architecture.md §5.8).
#pragma once

#include <cudnn.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/core/convolution.h"

namespace kubetrain::worker {

class CudaDevice;

namespace cuda {

// cuDNN's verdict as a Status naming the call, file and line: RESOURCE_EXHAUSTED when it ran
// out of memory, INTERNAL otherwise.
absl::Status CudnnStatus(cudnnStatus_t status, const char* call, const char* file, int line);

// The kernels of one convolution layer on `device`, which must outlive them; every call issues
// on the device's compute stream and records its first error there.
std::unique_ptr<ConvolutionKernels> MakeCudnnConvolution(CudaDevice& device,
                                                         const Conv2DShape& shape);

}  // namespace cuda
}  // namespace kubetrain::worker

#define KT_CUDNN_STATUS(expr) \
  ::kubetrain::worker::cuda::CudnnStatus((expr), #expr, __FILE__, __LINE__)
#define KT_CUDNN_RETURN_IF_ERROR(expr) RETURN_IF_ERROR(KT_CUDNN_STATUS(expr))
