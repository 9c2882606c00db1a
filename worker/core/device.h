// The compute backend interface of the worker: memory plus the kernels the models need.
//
// Kernels take raw device pointers and explicit sizes (cuBLAS/cuDNN style) so callers can address
// slices of a buffer; memory itself is owned by RAII `Buffer`s that a Device allocates. One
// implementation per backend: `worker/core/cpu/cpu_device.h` (OpenBLAS) and
// `worker/cuda/cuda_device.h`. Kernels may run asynchronously in issue order; `Synchronize` waits
// for them and reports backend errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "ps/update_rule.h"
#include "worker/core/convolution.h"
#include "worker/core/kernels_math.h"

namespace kubetrain::worker {

using Shape = std::vector<int64_t>;
using math::ConvGeometry;
using math::PoolGeometry;

// One variable's part of an update that Device::ApplyUpdates applies with others.
struct UpdateSlice {
  int64_t n = 0;
  const float* grad = nullptr;
  float* value = nullptr;
  float* slot0 = nullptr;  // null where the rule keeps no such slot
  float* slot1 = nullptr;
};

// Number of elements of `shape` (1 for a scalar, 0 if any dimension is 0).
int64_t NumElements(const Shape& shape);

class Device;

// Device work recorded once and replayed as a whole (a CUDA graph on a GPU): Device::EndCapture
// makes one, Device::LaunchGraph replays it. It holds the device pointers and the host staging
// addresses its work was issued with, so those must stay allocated while it lives. Destroy it
// before the Device that made it.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
};

// A typed, shaped block of device memory. Owns its allocation and frees it through the Device
// that made it, so the Device must outlive every Buffer. Move-only; not thread-safe.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device& device, Shape shape);
  ~Buffer() { Release(); }
  // A buffer over `data`, memory that something else owns and frees (a slice of a larger
  // buffer, such as the all-reduce fusion buffer a variable's gradient lives in).
  static Buffer View(T* data, Shape shape) {
    Buffer view;
    view.shape_ = std::move(shape);
    view.size_ = NumElements(view.shape_);
    view.data_ = data;
    return view;
  }

  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return size_; }
  size_t bytes() const { return static_cast<size_t>(size_) * sizeof(T); }
  bool empty() const { return size_ == 0; }

 private:
  void Release();

  Device* device_ = nullptr;  // null for a view: nothing to free
  T* data_ = nullptr;
  Shape shape_;
  int64_t size_ = 0;
};

using Tensor = Buffer<float>;
using IntTensor = Buffer<int32_t>;

// Matrices are row-major and dense; pointers are device pointers. Implementations are
// thread-compatible: one thread issues work to a Device at a time.
class Device {
 public:
  virtual ~Device() = default;

  virtual absl::string_view name() const = 0;

  // Memory. Allocation failure is fatal (as with `new`): a training step cannot proceed without it.
  virtual void* AllocateBytes(size_t bytes) = 0;
  virtual void FreeBytes(void* ptr) = 0;
  virtual void CopyHostToDevice(const void* host, void* device, size_t bytes) = 0;
  virtual void CopyDeviceToHost(const void* device, void* host, size_t bytes) = 0;
  virtual void CopyDeviceToDevice(const void* src, void* dst, size_t bytes) = 0;
  virtual void Fill(int64_t n, float value, float* x) = 0;
  // Waits for queued work; returns the first backend error since the last call.
  virtual absl::Status Synchronize() = 0;

  // Host memory for staging uploads: page-locked on a GPU, so that a captured upload from it can
  // be replayed (and runs as an asynchronous DMA). Plain heap memory by default. Allocation
  // failure is fatal, as with AllocateBytes.
  virtual void* AllocateHostBytes(size_t bytes);
  virtual void FreeHostBytes(void* ptr);
  // Queues a download into `staging` (memory from AllocateHostBytes) behind the work issued so
  // far, as a kernel is queued: it does not wait, and the bytes are there once the next
  // Synchronize returns. A capture records it (each replay downloads again). The default is
  // CopyDeviceToHost, which waits, as a device that runs its work as issued does anyway.
  virtual void QueueDownload(const void* device, void* staging, size_t bytes);

  // Graph capture (docs/decisions/0010-one-graph-per-step.md). Between BeginCapture and
  // EndCapture the device records the work issued to it instead of running it; EndCapture
  // returns the recording, which LaunchGraph then runs, in issue order with other work, as often
  // as the caller likes. A capture refuses what cannot be replayed (a host wait, a download, an
  // allocation, an upload from host memory not made by AllocateHostBytes): EndCapture then
  // fails, naming it, and nothing of the captured work has run; a QueueDownload is captured. By
  // default no capture is supported (the CPU backend runs every step as issued).
  virtual bool SupportsGraphs() const { return false; }
  virtual absl::Status BeginCapture();
  virtual absl::StatusOr<std::unique_ptr<DeviceGraph>> EndCapture();
  // Errors of the graph's work surface at the next Synchronize, as for any kernel.
  virtual absl::Status LaunchGraph(DeviceGraph& graph);
  // Blocks until every graph launched so far has finished, so that host memory their uploads
  // read may be rewritten; errors are those of waiting (the graphs' own surface at Synchronize).
  // At once where graphs run as they are launched.
  virtual absl::Status WaitForGraphs() { return absl::OkStatus(); }

  // Bytes of im2col columns a convolution builds at once (worker/core/layers/conv2d.h). The default
  // suits a CPU core: one chunk's columns stay in its L2 cache (1 MiB) between im2col and GEMM.
  // A GPU overrides it: what a small chunk costs there is launches, not cache misses.
  virtual int64_t ColumnBudgetBytes() const { return int64_t{1} << 20; }

  // The backend's own kernels for convolutions of `shape` (cuDNN on a GPU), or null: the layer
  // then builds im2col columns and multiplies them with Gemm (worker/core/layers/conv2d.h), as
  // on the CPU. The kernels may keep a pointer to this device.
  virtual std::unique_ptr<ConvolutionKernels> MakeConvolution(const Conv2DShape& /*shape*/) {
    return nullptr;
  }

  // Whether this device's buffers are host memory that host code may read and write in place
  // (the CPU backend), so a caller can use them where it would copy through Upload/Download:
  // the ps exchange pushes gradients from them and pulls values into them
  // (worker/runtime/exchange_ps.cc).
  virtual bool HostAddressable() const { return false; }

  // C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C. A is stored [k,m] when trans_a, B [n,k]
  // when trans_b; all leading dimensions are the stored row lengths.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    const float* b, float beta, float* c) = 0;
  // y = alpha * x + y.
  virtual void Axpy(int64_t n, float alpha, const float* x, float* y) = 0;
  // x = alpha * x.
  virtual void Scale(int64_t n, float alpha, float* x) = 0;

  // x[r, c] += bias[c].
  virtual void AddBias(int rows, int cols, const float* bias, float* x) = 0;
  // db[c] = sum_r dy[r, c] (overwrites db).
  virtual void BiasGrad(int rows, int cols, const float* dy, float* db) = 0;

  // x[r, c] = max(x[r, c] + bias[c], 0): AddBias then Relu in one pass over x. The default
  // composes the two kernels; backends override it to save a pass over memory.
  virtual void AddBiasRelu(int rows, int cols, const float* bias, float* x);
  // dx = ReluGrad(y, dy) and db[c] = sum_r dx[r, c] (overwrites db) in one pass; dy and dx may
  // alias. The default composes ReluGrad and BiasGrad.
  virtual void ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                            float* db);

  // y = max(x, 0); x and y may alias.
  virtual void Relu(int64_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0 else 0, with y the forward output; dy and dx may alias.
  virtual void ReluGrad(int64_t n, const float* y, const float* dy, float* dx) = 0;

  // Per-row loss[r] = -log softmax(logits[r])[labels[r]]; when dlogits is non-null also
  // dlogits = (softmax - onehot) * grad_scale.
  virtual void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                   float grad_scale, float* loss, float* dlogits) = 0;
  // out[r] = index of the largest logit of row r.
  virtual void ArgMax(int rows, int cols, const float* x, int32_t* out) = 0;

  // NHWC image -> column matrix [g.col_rows(), g.col_cols()] (see ConvGeometry).
  virtual void Im2Col(const ConvGeometry& g, const float* input, float* col) = 0;
  // Adjoint of Im2Col: overwrites `input_grad` with the sum of every column entry it fed.
  virtual void Col2Im(const ConvGeometry& g, const float* col, float* input_grad) = 0;

  // 2x2 stride-2 max pool; `argmax` receives the flat input index of each output's winner.
  virtual void MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                          int32_t* argmax) = 0;
  // Overwrites `input_grad` with dout routed to each window's winner (zero elsewhere).
  virtual void MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad,
                              const int32_t* argmax, float* input_grad) = 0;

  // One optimizer update of n elements: value -= rule(grad × rule.grad_scale), keeping the rule's
  // slots (ps/update_rule.h: momentum 1, Adam 2, Adagrad 1); unused slot pointers may be null.
  // All-reduce training applies its updates on the device with this.
  virtual void ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad, float* value,
                           float* slot0, float* slot1) = 0;

  // ApplyUpdate of every slice under one rule: the whole model's update after an all-reduce.
  // `rule` is in device memory (one ps::UpdateRule) and is read when the update runs, so that a
  // captured update replays with the rule of the step it is replayed for (a learning-rate
  // schedule, Adam's bias correction; docs/decisions/0010-one-graph-per-step.md). A GPU runs it
  // as one kernel per math::UpdateSlices::kMax slices, not one per variable
  // (FusedUpdateLaunches); the default downloads the rule and applies the slices one by one.
  virtual void ApplyUpdates(const ps::UpdateRule* rule, absl::Span<const UpdateSlice> slices);

  // Typed conveniences over the byte copies.
  template <typename T>
  void Upload(const T* host, Buffer<T>& dst, int64_t count) {
    CopyHostToDevice(host, dst.data(), static_cast<size_t>(count) * sizeof(T));
  }
  template <typename T>
  void Download(const Buffer<T>& src, T* host, int64_t count) {
    CopyDeviceToHost(src.data(), host, static_cast<size_t>(count) * sizeof(T));
  }
};

// Kernels a GPU launches for ApplyUpdates of `slices` slices.
inline int64_t FusedUpdateLaunches(size_t slices) {
  return static_cast<int64_t>((slices + math::UpdateSlices::kMax - 1) / math::UpdateSlices::kMax);
}

template <typename T>
Buffer<T>::Buffer(Device& device, Shape shape)
    : device_(&device), shape_(std::move(shape)), size_(NumElements(shape_)) {
  if (size_ > 0) data_ = static_cast<T*>(device.AllocateBytes(bytes()));
}

template <typename T>
Buffer<T>& Buffer<T>::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    Release();
    device_ = std::exchange(other.device_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    shape_ = std::move(other.shape_);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

template <typename T>
void Buffer<T>::Release() {
  if (data_ != nullptr && device_ != nullptr) device_->FreeBytes(data_);
  data_ = nullptr;
  size_ = 0;
  shape_.clear();
}

}  // namespace kubetrain::worker
