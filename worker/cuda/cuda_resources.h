// RAII owners of the CUDA resources the backend holds: device memory, pinned host memory, streams,
// events, graphs and their executable instances, and the cuBLAS and cuDNN handles. Each is made by
// a factory returning StatusOr (creation can fail on any machine) and released in its destructor,
// which logs a failure it cannot return.
//
// Move-only values; not thread-safe. Each must be destroyed while its device is still usable
// (before the process tears down the CUDA runtime).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kubetrain::worker::cuda {

// One owned handle of a kind described by `Traits`: `Handle` (the raw type) and `Release(Handle)`
// returning the library's verdict as a Status (logged when the destructor releases it).
template <typename Traits>
class Owned {
 public:
  using Handle = typename Traits::Handle;

  Owned() = default;
  explicit Owned(Handle handle) : handle_(handle) {}
  ~Owned() { Reset(); }

  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      Reset();
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }

  // Releases the handle now, returning the library's verdict instead of logging it.
  absl::Status Release() {
    if (handle_ == Handle{}) return absl::OkStatus();
    return Traits::Release(std::exchange(handle_, Handle{}));
  }

 private:
  void Reset();

  Handle handle_{};
};

struct DeviceMemoryTraits {
  using Handle = void*;
  static absl::Status Release(void* ptr);
};
struct PinnedMemoryTraits {
  using Handle = void*;
  static absl::Status Release(void* ptr);
};
struct StreamTraits {
  using Handle = cudaStream_t;
  static absl::Status Release(cudaStream_t stream);
};
struct EventTraits {
  using Handle = cudaEvent_t;
  static absl::Status Release(cudaEvent_t event);
};
struct GraphTraits {
  using Handle = cudaGraph_t;
  static absl::Status Release(cudaGraph_t graph);
};
struct GraphExecTraits {
  using Handle = cudaGraphExec_t;
  static absl::Status Release(cudaGraphExec_t exec);
};
struct CublasTraits {
  using Handle = cublasHandle_t;
  static absl::Status Release(cublasHandle_t handle);
};
struct CudnnTraits {
  using Handle = cudnnHandle_t;
  static absl::Status Release(cudnnHandle_t handle);
};

extern template class Owned<DeviceMemoryTraits>;
extern template class Owned<PinnedMemoryTraits>;
extern template class Owned<StreamTraits>;
extern template class Owned<EventTraits>;
extern template class Owned<GraphTraits>;
extern template class Owned<GraphExecTraits>;
extern template class Owned<CublasTraits>;
extern template class Owned<CudnnTraits>;

using Stream = Owned<StreamTraits>;
using Event = Owned<EventTraits>;
using Graph = Owned<GraphTraits>;
using GraphExec = Owned<GraphExecTraits>;
using CublasHandle = Owned<CublasTraits>;
using CudnnHandle = Owned<CudnnTraits>;

// A byte block of device or pinned host memory with its size.
template <typename Traits>
class Memory {
 public:
  Memory() = default;
  Memory(void* ptr, size_t bytes) : owned_(ptr), bytes_(bytes) {}
  Memory(Memory&& other) noexcept = default;
  Memory& operator=(Memory&& other) noexcept = default;

  void* get() const { return owned_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(owned_.get());
  }
  size_t bytes() const { return bytes_; }

 private:
  Owned<Traits> owned_;
  size_t bytes_ = 0;
};

using DeviceMemory = Memory<DeviceMemoryTraits>;
using PinnedMemory = Memory<PinnedMemoryTraits>;

// cuBLAS's workspace (cublasSetWorkspace): NVIDIA's recommendation for Hopper, enough for others.
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// While it lives (when made `active`), the calling thread may make the calls a stream capture in
// thread-local mode prohibits (cudaMalloc, cudaFree); the mode is restored when it goes.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(bool active) : active_(active) {
    if (active_) static_cast<void>(cudaThreadExchangeStreamCaptureMode(&mode_));
  }
  ~RelaxedCapture() {
    if (active_) static_cast<void>(cudaThreadExchangeStreamCaptureMode(&mode_));
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  bool active_;
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// cudaMalloc on the current device.
absl::StatusOr<DeviceMemory> AllocateDeviceMemory(size_t bytes);
// Page-locked host memory (cudaMallocHost): DMA reads and writes it directly and asynchronously.
absl::StatusOr<PinnedMemory> AllocatePinnedMemory(size_t bytes);
// A stream that does not synchronise with the legacy default stream.
absl::StatusOr<Stream> CreateStream();
// An event without timing, the cheapest kind, for ordering and waiting only.
absl::StatusOr<Event> CreateEvent();
// A cuBLAS handle issuing on `stream`; with `tf32`, FP32 GEMMs run on tensor cores in TF32. With a
// `workspace` it uses that fixed block instead of allocating its own, so that its GEMMs can be
// captured in a graph; the block must outlive the handle.
absl::StatusOr<CublasHandle> CreateCublasHandle(cudaStream_t stream, bool tf32 = false,
                                                const DeviceMemory* workspace = nullptr);
// The executable instance of a captured graph.
absl::StatusOr<GraphExec> InstantiateGraph(cudaGraph_t graph);
// A cuDNN handle issuing on `stream`.
absl::StatusOr<CudnnHandle> CreateCudnnHandle(cudaStream_t stream);

}  // namespace kubetrain::worker::cuda
