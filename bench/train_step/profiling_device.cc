#include "bench/train_step/profiling_device.h"

#include <utility>

namespace kubetrain::bench {

absl::string_view KernelName(Kernel kernel) {
  switch (kernel) {
    case Kernel::kGemm:
      return "gemm";
    case Kernel::kCopy:
      return "copy";
    case Kernel::kFill:
      return "fill";
    case Kernel::kAxpy:
      return "axpy";
    case Kernel::kScale:
      return "scale";
    case Kernel::kAddBias:
      return "add_bias";
    case Kernel::kBiasGrad:
      return "bias_grad";
    case Kernel::kAddBiasRelu:
      return "add_bias_relu";
    case Kernel::kReluBiasGrad:
      return "relu_bias_grad";
    case Kernel::kRelu:
      return "relu";
    case Kernel::kReluGrad:
      return "relu_grad";
    case Kernel::kSoftmaxCrossEntropy:
      return "softmax_xent";
    case Kernel::kArgMax:
      return "argmax";
    case Kernel::kIm2Col:
      return "im2col";
    case Kernel::kCol2Im:
      return "col2im";
    case Kernel::kMaxPool:
      return "maxpool";
    case Kernel::kMaxPoolGrad:
      return "maxpool_grad";
    case Kernel::kUpdate:
      return "update";
    case Kernel::kConvForward:
      return "conv_forward";
    case Kernel::kConvBackwardFilter:
      return "conv_backward_filter";
    case Kernel::kConvBackwardData:
      return "conv_backward_data";
    case Kernel::kNumKernels:
      break;
  }
  return "?";
}

void ProfilingDevice::Reset() {
  gemm_calls_.clear();
  stats_ = {};
  for (ConvolutionLayer& layer : convolution_layers_) layer.directions = {};
}

int64_t ProfilingDevice::total_kernel_nanos() const {
  int64_t total = 0;
  for (const KernelStats& s : stats_) total += s.nanos;
  return total;
}

template <typename Call>
int64_t ProfilingDevice::Timed(Kernel kernel, Call&& call) {
  const Clock::time_point start = Clock::now();
  std::forward<Call>(call)();
  if (synchronize_each_kernel_) {
    absl::Status status = inner_.Synchronize();
    if (first_error_.ok()) first_error_ = std::move(status);
  }
  const int64_t nanos =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  KernelStats& s = stats_[static_cast<int>(kernel)];
  ++s.calls;
  s.nanos += nanos;
  return nanos;
}

void ProfilingDevice::ApplyUpdates(const ps::UpdateRule* rule,
                                   absl::Span<const worker::UpdateSlice> slices) {
  Timed(Kernel::kUpdate, [&] { inner_.ApplyUpdates(rule, slices); });
}

std::unique_ptr<worker::ConvolutionKernels> ProfilingDevice::MakeConvolution(
    const worker::Conv2DShape& shape) {
  std::unique_ptr<worker::ConvolutionKernels> inner = inner_.MakeConvolution(shape);
  if (inner == nullptr) return nullptr;
  const size_t layer = convolution_layers_.size();
  convolution_layers_.push_back({shape, {}});
  return std::make_unique<worker::ObservedConvolution>(
      std::move(inner),
      [this, layer](worker::ConvolutionDirection direction, const std::function<void()>& call) {
        static constexpr Kernel kKernels[] = {Kernel::kConvForward, Kernel::kConvBackwardFilter,
                                              Kernel::kConvBackwardData};
        const int d = static_cast<int>(direction);
        KernelStats& s = convolution_layers_[layer].directions[d];
        ++s.calls;
        s.nanos += Timed(kKernels[d], call);
      });
}

absl::Status ProfilingDevice::Synchronize() {
  absl::Status status = inner_.Synchronize();
  if (!first_error_.ok()) status = std::exchange(first_error_, absl::OkStatus());
  return status;
}

void ProfilingDevice::CopyHostToDevice(const void* host, void* device, size_t bytes) {
  Timed(Kernel::kCopy, [&] { inner_.CopyHostToDevice(host, device, bytes); });
}

void ProfilingDevice::CopyDeviceToHost(const void* device, void* host, size_t bytes) {
  Timed(Kernel::kCopy, [&] { inner_.CopyDeviceToHost(device, host, bytes); });
}

void ProfilingDevice::CopyDeviceToDevice(const void* src, void* dst, size_t bytes) {
  Timed(Kernel::kCopy, [&] { inner_.CopyDeviceToDevice(src, dst, bytes); });
}

void ProfilingDevice::Fill(int64_t n, float value, float* x) {
  Timed(Kernel::kFill, [&] { inner_.Fill(n, value, x); });
}

void ProfilingDevice::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const float* a, const float* b, float beta, float* c) {
  const int64_t nanos =
      Timed(Kernel::kGemm, [&] { inner_.Gemm(trans_a, trans_b, m, n, k, alpha, a, b, beta, c); });
  gemm_calls_.push_back({trans_a, trans_b, m, n, k, alpha, beta, nanos});
}

void ProfilingDevice::Axpy(int64_t n, float alpha, const float* x, float* y) {
  Timed(Kernel::kAxpy, [&] { inner_.Axpy(n, alpha, x, y); });
}

void ProfilingDevice::Scale(int64_t n, float alpha, float* x) {
  Timed(Kernel::kScale, [&] { inner_.Scale(n, alpha, x); });
}

void ProfilingDevice::AddBias(int rows, int cols, const float* bias, float* x) {
  Timed(Kernel::kAddBias, [&] { inner_.AddBias(rows, cols, bias, x); });
}

void ProfilingDevice::BiasGrad(int rows, int cols, const float* dy, float* db) {
  Timed(Kernel::kBiasGrad, [&] { inner_.BiasGrad(rows, cols, dy, db); });
}

void ProfilingDevice::AddBiasRelu(int rows, int cols, const float* bias, float* x) {
  Timed(Kernel::kAddBiasRelu, [&] { inner_.AddBiasRelu(rows, cols, bias, x); });
}

void ProfilingDevice::ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                                   float* db) {
  Timed(Kernel::kReluBiasGrad, [&] { inner_.ReluBiasGrad(rows, cols, y, dy, dx, db); });
}

void ProfilingDevice::Relu(int64_t n, const float* x, float* y) {
  Timed(Kernel::kRelu, [&] { inner_.Relu(n, x, y); });
}

void ProfilingDevice::ReluGrad(int64_t n, const float* y, const float* dy, float* dx) {
  Timed(Kernel::kReluGrad, [&] { inner_.ReluGrad(n, y, dy, dx); });
}

void ProfilingDevice::SoftmaxCrossEntropy(int rows, int cols, const float* logits,
                                          const int32_t* labels, float grad_scale, float* loss,
                                          float* dlogits) {
  Timed(Kernel::kSoftmaxCrossEntropy,
        [&] { inner_.SoftmaxCrossEntropy(rows, cols, logits, labels, grad_scale, loss, dlogits); });
}

void ProfilingDevice::ArgMax(int rows, int cols, const float* x, int32_t* out) {
  Timed(Kernel::kArgMax, [&] { inner_.ArgMax(rows, cols, x, out); });
}

void ProfilingDevice::Im2Col(const ConvGeometry& g, const float* input, float* col) {
  Timed(Kernel::kIm2Col, [&] { inner_.Im2Col(g, input, col); });
}

void ProfilingDevice::Col2Im(const ConvGeometry& g, const float* col, float* input_grad) {
  Timed(Kernel::kCol2Im, [&] { inner_.Col2Im(g, col, input_grad); });
}

void ProfilingDevice::MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                                 int32_t* argmax) {
  Timed(Kernel::kMaxPool, [&] { inner_.MaxPool2x2(g, input, output, argmax); });
}

void ProfilingDevice::MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad,
                                     const int32_t* argmax, float* input_grad) {
  Timed(Kernel::kMaxPoolGrad, [&] { inner_.MaxPool2x2Grad(g, output_grad, argmax, input_grad); });
}

void ProfilingDevice::ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad,
                                  float* value, float* slot0, float* slot1) {
  Timed(Kernel::kUpdate, [&] { inner_.ApplyUpdate(rule, n, grad, value, slot0, slot1); });
}

}  // namespace kubetrain::bench
