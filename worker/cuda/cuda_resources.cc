#include "worker/cuda/cuda_resources.h"

#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cudnn_convolution.h"

namespace kubetrain::worker::cuda {

template <typename Traits>
void Owned<Traits>::Reset() {
  LogIfError(Release(), "Failed to release a CUDA resource");
}

template class Owned<DeviceMemoryTraits>;
template class Owned<PinnedMemoryTraits>;
template class Owned<StreamTraits>;
template class Owned<EventTraits>;
template class Owned<GraphTraits>;
template class Owned<GraphExecTraits>;
template class Owned<CublasTraits>;
template class Owned<CudnnTraits>;

absl::Status DeviceMemoryTraits::Release(void* ptr) { return KT_CUDA_STATUS(cudaFree(ptr)); }

absl::Status PinnedMemoryTraits::Release(void* ptr) { return KT_CUDA_STATUS(cudaFreeHost(ptr)); }

absl::Status StreamTraits::Release(cudaStream_t stream) {
  return KT_CUDA_STATUS(cudaStreamDestroy(stream));
}

absl::Status EventTraits::Release(cudaEvent_t event) {
  return KT_CUDA_STATUS(cudaEventDestroy(event));
}

absl::Status GraphTraits::Release(cudaGraph_t graph) {
  return KT_CUDA_STATUS(cudaGraphDestroy(graph));
}

absl::Status GraphExecTraits::Release(cudaGraphExec_t exec) {
  return KT_CUDA_STATUS(cudaGraphExecDestroy(exec));
}

absl::Status CublasTraits::Release(cublasHandle_t handle) {
  return KT_CUBLAS_STATUS(cublasDestroy(handle));
}

absl::Status CudnnTraits::Release(cudnnHandle_t handle) {
  return KT_CUDNN_STATUS(cudnnDestroy(handle));
}

absl::StatusOr<DeviceMemory> AllocateDeviceMemory(size_t bytes) {
  void* ptr = nullptr;
  KT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes));
  return DeviceMemory(ptr, bytes);
}

absl::StatusOr<PinnedMemory> AllocatePinnedMemory(size_t bytes) {
  void* ptr = nullptr;
  KT_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr, bytes));
  return PinnedMemory(ptr, bytes);
}

absl::StatusOr<Stream> CreateStream() {
  cudaStream_t stream = nullptr;
  KT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream(stream);
}

absl::StatusOr<Event> CreateEvent() {
  cudaEvent_t event = nullptr;
  KT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return Event(event);
}

absl::StatusOr<CublasHandle> CreateCublasHandle(cudaStream_t stream, bool tf32,
                                                const DeviceMemory* workspace) {
  cublasHandle_t raw = nullptr;
  KT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&raw));
  CublasHandle handle(raw);
  KT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(raw, stream));
  if (tf32) KT_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(raw, CUBLAS_TF32_TENSOR_OP_MATH));
  // After cublasSetStream, which resets the workspace to the library's own.
  if (workspace != nullptr) {
    KT_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(raw, workspace->get(), workspace->bytes()));
  }
  return handle;
}

absl::StatusOr<GraphExec> InstantiateGraph(cudaGraph_t graph) {
  cudaGraphExec_t raw = nullptr;
  KT_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&raw, graph, 0));
  return GraphExec(raw);
}

absl::StatusOr<CudnnHandle> CreateCudnnHandle(cudaStream_t stream) {
  cudnnHandle_t raw = nullptr;
  KT_CUDNN_RETURN_IF_ERROR(cudnnCreate(&raw));
  CudnnHandle handle(raw);
  KT_CUDNN_RETURN_IF_ERROR(cudnnSetStream(raw, stream));
  return handle;
}

}  // namespace kubetrain::worker::cuda
