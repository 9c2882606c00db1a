// A Device decorator that forwards every call to a real backend and records what the training
// step asked of it: every GEMM's shape, FLOPs and time, and the time spent in each other kernel.
//
// The bench uses it to measure achieved GEMM throughput inside a real training step and then to
// replay exactly the same GEMM list on the bare BLAS for comparison.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/core/device.h"

namespace kubetrain::bench {

using worker::ConvGeometry;
using worker::Device;
using worker::PoolGeometry;

// One GEMM as issued by the model (row-major, Device::Gemm's conventions).
struct GemmCall {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0;
  int n = 0;
  int k = 0;
  float alpha = 1.0f;
  float beta = 0.0f;
  int64_t nanos = 0;  // wall time of the call, 0 for calls not timed

  // 2mnk: one multiply and one add per term (beta's scaling is not counted).
  double flops() const { return 2.0 * m * n * k; }
};

// Every timed kernel of the Device interface; memory management is forwarded but not timed.
enum class Kernel {
  kGemm,
  kCopy,
  kFill,
  kAxpy,
  kScale,
  kAddBias,
  kBiasGrad,
  kAddBiasRelu,
  kReluBiasGrad,
  kRelu,
  kReluGrad,
  kSoftmaxCrossEntropy,
  kArgMax,
  kIm2Col,
  kCol2Im,
  kMaxPool,
  kMaxPoolGrad,
  kUpdate,
  kConvForward,  // a backend's own convolution kernels (cuDNN), by direction
  kConvBackwardFilter,
  kConvBackwardData,
  kNumKernels,
};
constexpr int kNumKernels = static_cast<int>(Kernel::kNumKernels);
absl::string_view KernelName(Kernel kernel);

struct KernelStats {
  int64_t calls = 0;
  int64_t nanos = 0;
};

// One convolution layer run by the backend's own kernels (cuDNN): its shape and, per direction
// (worker::ConvolutionDirection: forward, backward filter, backward data), its calls and time.
struct ConvolutionLayer {
  worker::Conv2DShape shape;
  std::array<KernelStats, 3> directions{};
};

// Borrows `inner`, which must outlive this object and every Buffer made through it. Buffers
// allocated through the decorator are the inner device's memory, so kernels can be mixed freely.
//
// With `synchronize_each_kernel` the decorator waits for the inner device after every kernel, so
// times are exact on asynchronous backends (CUDA); on the CPU, Synchronize is free. Backend errors
// seen by those waits are kept and returned by the next Synchronize call.
// Thread-compatible, like every Device.
class ProfilingDevice final : public Device {
 public:
  explicit ProfilingDevice(Device& inner, bool synchronize_each_kernel = true)
      : inner_(inner), synchronize_each_kernel_(synchronize_each_kernel) {}

  // Drops everything recorded so far (e.g. after warm-up).
  void Reset();
  const std::vector<GemmCall>& gemm_calls() const { return gemm_calls_; }
  const KernelStats& stats(Kernel kernel) const { return stats_[static_cast<int>(kernel)]; }
  // Every layer MakeConvolution gave the backend's own kernels (kept by Reset, which zeroes
  // their counts).
  const std::vector<ConvolutionLayer>& convolution_layers() const { return convolution_layers_; }
  // Sum of every kernel's time since the last Reset.
  int64_t total_kernel_nanos() const;

  absl::string_view name() const override { return inner_.name(); }
  // The backend's, so that the model is built as it would be on the backend itself.
  int64_t ColumnBudgetBytes() const override { return inner_.ColumnBudgetBytes(); }

  void* AllocateBytes(size_t bytes) override { return inner_.AllocateBytes(bytes); }
  void FreeBytes(void* ptr) override { inner_.FreeBytes(ptr); }
  void CopyHostToDevice(const void* host, void* device, size_t bytes) override;
  void CopyDeviceToHost(const void* device, void* host, size_t bytes) override;
  void CopyDeviceToDevice(const void* src, void* dst, size_t bytes) override;
  void Fill(int64_t n, float value, float* x) override;
  absl::Status Synchronize() override;

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
  void ApplyUpdates(const ps::UpdateRule* rule,
                    absl::Span<const worker::UpdateSlice> slices) override;
  // The backend's convolutions, each call timed under its direction's kernel.
  std::unique_ptr<worker::ConvolutionKernels> MakeConvolution(
      const worker::Conv2DShape& shape) override;

 private:
  using Clock = std::chrono::steady_clock;

  // Runs `call` on the inner device, timed into `kernel`'s stats; returns the nanoseconds.
  template <typename Call>
  int64_t Timed(Kernel kernel, Call&& call);

  Device& inner_;
  bool synchronize_each_kernel_;
  absl::Status first_error_;  // from per-kernel waits, reported by the next Synchronize
  std::vector<GemmCall> gemm_calls_;
  std::array<KernelStats, kNumKernels> stats_{};
  std::vector<ConvolutionLayer> convolution_layers_;
};

}  // namespace kubetrain::bench
