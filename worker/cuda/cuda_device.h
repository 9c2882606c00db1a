// The CUDA backend: device memory, GEMM through cuBLAS, every other kernel in kernels.cu over the
// shared element math of worker/core/kernels_math.h, so that it computes what CpuDevice computes.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/core/device.h"
#include "worker/core/device_choice.h"
#include "worker/core/host_blocks.h"
#include "worker/core/precision.h"
#include "worker/cuda/cuda_resources.h"

namespace kubetrain::worker {

// What this process can see of CUDA. Never crashes and never aborts, also on machines without a
// driver: there device_count is 0 and status says why, with the driver's and the runtime's
// CUDA versions (FAILED_PRECONDITION "no CUDA device/driver: ...", "CUDA driver too old: ...";
// worker::ExplainCudaProbe, worker/core/device_choice.h, words it). status is OK exactly when
// device_count > 0.
struct CudaProbe {
  int device_count = 0;
  absl::Status status;
  CudaAvailability availability;  // the reason label and message behind status
};
CudaProbe ProbeCudaDevices();

// The marketing name of device `ordinal` (e.g. "NVIDIA H100 80GB HBM3"), for logs and labels.
absl::StatusOr<std::string> CudaDeviceName(int ordinal);

struct CudaDeviceOptions {
  int ordinal = 0;
  // Host<->device copies pass through two pinned staging buffers of this size: while one
  // chunk's DMA runs, the next chunk is copied to or from pageable memory on the CPU. 1 MiB
  // splits a ~4 MiB ps partition (docs/architecture.md §5.4) into four overlapping steps.
  size_t staging_chunk_bytes = size_t{1} << 20;
  // GEMMs on tensor cores in TF32 (10-bit mantissa inputs, FP32 accumulation): several times
  // the FP32 rate on Ampere and later, at about 1e-3 relative error per product. Off by default:
  // results then match the CPU backend to FP32 rounding.
  bool tf32 = false;
  // Convolutions (cuDNN) in TF32 where the GPU has tensor cores for it (Ampere and later): on
  // by default, as PyTorch's torch.backends.cudnn.allow_tf32; off keeps them in FP32.
  bool tf32_convolutions = true;
  // kBFloat16 (--precision=bf16; docs/decisions/0011-bf16-mixed-precision.md): GEMMs and cuDNN's
  // convolutions on bf16 operands, rounded from the float32 buffers into the scratch memory
  // (cuda::LaunchToBf16), with float32 sums; a GPU before compute capability 8.0 is refused.
  Precision precision = Precision::kFloat32;
};

// Owns, on one GPU: a compute stream on which every kernel, cuBLAS call and device-to-device
// copy runs in issue order; a copy stream for host transfers; the pinned staging buffers; the
// cuBLAS handle; scratch memory for multi-pass kernels. Buffers it allocates must be freed
// before it goes.
//
// Kernels are asynchronous: a void method records the first error it meets (a launch error,
// a failed cuBLAS call) and Synchronize returns it after waiting for both streams. Host copies
// return once the host buffer may be reused (to the device) or holds the data (to the host);
// kernels issued later see the uploaded data.
//
// Graphs (cuda_graphs.cc): a capture records the work issued on the compute stream
// (cudaStreamBeginCapture in thread-local mode) into a graph that LaunchGraph replays there.
// During it the device refuses, as a recorded error that fails EndCapture, what cannot be
// replayed: host waits, downloads other than QueueDownload's, allocations, growing its scratch,
// and uploads from host memory other than AllocateHostBytes' pinned blocks (which are captured as
// one DMA each, as QueueDownload's into them are). GEMMs
// capture because cuBLAS has a fixed workspace; cuDNN's algorithm search does not, so a
// convolution's first step at a batch size must run uncaptured (docs/decisions/0010).
//
// Thread-compatible, as every Device: one thread at a time. Every method first makes this
// device the calling thread's current one, so the issuing thread may change between calls.
class CudaDevice final : public Device {
 public:
  // FAILED_PRECONDITION without a usable device (see ProbeCudaDevices) or with an ordinal
  // beyond the visible ones; INVALID_ARGUMENT on bad options.
  static absl::StatusOr<std::unique_ptr<CudaDevice>> Create(const CudaDeviceOptions& options = {});

  // Waits for queued work; logs any error not yet reported by Synchronize.
  ~CudaDevice() override;

  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  absl::string_view name() const override { return "cuda"; }
  int ordinal() const { return options_.ordinal; }
  // "cuda:<ordinal> <device name>", e.g. "cuda:0 NVIDIA H100 80GB HBM3".
  const std::string& description() const { return description_; }
  // The compute stream. Work others enqueue on it (NCCL collectives) is ordered with the kernels.
  cudaStream_t stream() const { return compute_.get(); }
  // Makes this device current on the calling thread.
  absl::Status MakeCurrent() const;

  // Throws std::bad_alloc (after logging the CUDA error) when cudaMalloc fails.
  void* AllocateBytes(size_t bytes) override;
  void FreeBytes(void* ptr) override;
  void CopyHostToDevice(const void* host, void* device, size_t bytes) override;
  void CopyDeviceToHost(const void* device, void* host, size_t bytes) override;
  // Overlapping ranges are allowed (memmove semantics), as on the CPU.
  void CopyDeviceToDevice(const void* src, void* dst, size_t bytes) override;
  void Fill(int64_t n, float value, float* x) override;
  absl::Status Synchronize() override;
  // Pinned (cudaMallocHost); throws std::bad_alloc (after logging) when that fails.
  void* AllocateHostBytes(size_t bytes) override;
  void FreeHostBytes(void* ptr) override;
  // One cudaMemcpyAsync on the compute stream into pinned memory; other memory is an error.
  void QueueDownload(const void* device, void* staging, size_t bytes) override;

  bool SupportsGraphs() const override { return true; }
  absl::Status BeginCapture() override;
  absl::StatusOr<std::unique_ptr<DeviceGraph>> EndCapture() override;
  absl::Status LaunchGraph(DeviceGraph& graph) override;
  absl::Status WaitForGraphs() override;

  // The whole batch in one im2col and GEMM per convolution (Fashion-MNIST's CNN at batch 64
  // needs 40 MiB), capped so that memory stays bounded for any batch size.
  int64_t ColumnBudgetBytes() const override { return int64_t{256} << 20; }

  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
            const float* b, float beta, float* c) override;
  void Axpy(int64_t n, float alpha, const float* x, float* y) override;
  void Scale(int64_t n, float alpha, float* x) override;

  void AddBias(int rows, int cols, const float* bias, float* x) override;
  void BiasGrad(int rows, int cols, const float* dy, float* db) override;
  void AddBiasRelu(int rows, int cols, const float* bias, float* x) override;
  void ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                    float* db) override;

  void Relu(int64_t n, const float* x, float* y) override;
  void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) override;

  void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                           float grad_scale, float* loss, float* dlogits) override;
  void ArgMax(int rows, int cols, const float* x, int32_t* out) override;

  void Im2Col(const ConvGeometry& g, const float* input, float* col) override;
  void Col2Im(const ConvGeometry& g, const float* col, float* input_grad) override;

  void MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                  int32_t* argmax) override;
  void MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad, const int32_t* argmax,
                      float* input_grad) override;

  void ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad, float* value,
                   float* slot0, float* slot1) override;

  // One kernel per math::UpdateSlices::kMax slices.
  void ApplyUpdates(const ps::UpdateRule* rule, absl::Span<const UpdateSlice> slices) override;

  // cuDNN's convolutions (cuda/cudnn_convolution.h).
  std::unique_ptr<ConvolutionKernels> MakeConvolution(const Conv2DShape& shape) override;

  // For the backend's kernel objects (cuda/cudnn_convolution.h), which issue on this device:
  // MakeCurrent, recording a failure; false when the caller must not issue work.
  bool Activate();
  // Keeps `status` if it is the first error since the last Synchronize; whether it was OK.
  bool Check(absl::Status status);
  // Makes the cuDNN handle (on the compute stream) and the convolution workspace that every
  // convolution of this device shares (ConvolutionWorkspaceLimit of the free memory), at the
  // first call; false, with the error recorded, when they cannot be had.
  bool EnsureCudnn();
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  void* convolution_workspace() const { return convolution_workspace_.get(); }
  size_t convolution_workspace_bytes() const { return convolution_workspace_.bytes(); }
  bool tf32_convolutions() const { return options_.tf32_convolutions; }
  Precision precision() const { return options_.precision; }
  // Room in the scratch memory for bf16 operands: out[i] gets sizes[i] values, each 256-byte
  // aligned as cuBLAS and cuDNN prefer; false, with the error recorded, when it cannot be had.
  // Valid until the next use of the scratch memory (any later kernel call).
  bool Bf16Scratch(std::initializer_list<int64_t> sizes, uint16_t** out);

 private:
  explicit CudaDevice(const CudaDeviceOptions& options) : options_(options) {}
  absl::Status Init();

  // Keeps `status` if it is the first error since the last Synchronize (during a capture: the
  // first of the capture, which EndCapture reports).
  void Record(absl::Status status);
  // `bytes` from `allocate` (cudaMalloc, cudaMallocHost), refused during a capture as `call`;
  // throws std::bad_alloc (after logging) when it fails.
  void* Allocate(absl::string_view call, cudaError_t (*allocate)(void**, size_t), size_t bytes);
  // During a capture, records that `call` cannot be captured and returns true.
  bool RefuseDuringCapture(absl::string_view call);
  // At least `floats` floats of scratch, ordered on the compute stream; null (with the error
  // recorded) when it cannot be had.
  float* Scratch(int64_t floats);
  // During a capture: the upload as one DMA on the compute stream, from pinned memory only.
  void CaptureUpload(const void* host, void* device, size_t bytes);
  // Makes the copy stream wait for everything issued on the compute stream so far.
  bool CopyAfterCompute();

  CudaDeviceOptions options_;
  std::string description_;
  absl::Status first_error_;
  bool capturing_ = false;
  absl::Status capture_error_;  // the first error during the capture under way
  bool captured_ = false;       // a graph was made: memory it may use is never freed early
  HostBlocks pinned_;           // AllocateHostBytes' blocks

  // Declaration order is destruction order reversed: the handle and buffers go before the
  // streams they are used on.
  cuda::Stream compute_;
  cuda::Stream copy_;
  cuda::Event compute_done_;  // recorded on compute_ so copy_ can wait for it
  cuda::Event copy_done_;     // recorded on copy_ so compute_ can wait for an upload
  cuda::Event graph_done_;    // recorded on compute_ after each graph launch
  std::array<cuda::PinnedMemory, 2> staging_;
  std::array<cuda::Event, 2> staging_free_;  // recorded after each DMA through staging_[i]
  size_t next_staging_ = 0;                  // the buffer the next upload chunk goes through
  cuda::DeviceMemory cublas_workspace_;      // cuBLAS's fixed workspace, freed after its handle
  cuda::CublasHandle cublas_;
  cuda::CudnnHandle cudnn_;  // made by EnsureCudnn, at the first convolution
  cuda::DeviceMemory convolution_workspace_;
  cuda::DeviceMemory scratch_;
  std::vector<cuda::DeviceMemory> retired_scratch_;  // outgrown scratch a graph may still use
};

}  // namespace kubetrain::worker
