#include "worker/cuda/cudnn_convolution.h"

#include <array>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cudnn_descriptors.h"
#include "worker/cuda/kernels.h"

// cuDNN 9 marks its per-operation convolution API deprecated in favour of the graph API; it is
// still shipped and supported through cuDNN 9, and it is the whole of what this layer needs
// (docs/decisions/0009-cudnn-per-operation-convolutions.md).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace kubetrain::worker::cuda {

absl::Status CudnnStatus(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(call, " failed at ", file, ":", line, ": ", cudnnGetErrorString(status));
  return status == CUDNN_STATUS_ALLOC_FAILED ? absl::ResourceExhaustedError(message)
                                             : absl::InternalError(message);
}

namespace {

// One batch size's descriptors and the algorithm of each direction, found at its first use.
struct Plan {
  ConvolutionDims dims;
  TensorDescriptor x;
  TensorDescriptor y;
  std::optional<cudnnConvolutionFwdAlgo_t> forward;
  std::optional<cudnnConvolutionBwdFilterAlgo_t> backward_filter;
  std::optional<cudnnConvolutionBwdDataAlgo_t> backward_data;
};

// Plans kept per layer: the batch, the epoch's last short batch, an evaluation batch.
constexpr size_t kPlansKept = 4;

class CudnnConvolution final : public ConvolutionKernels {
 public:
  CudnnConvolution(CudaDevice& device, const Conv2DShape& shape)
      : device_(device),
        shape_(shape),
        type_(device.precision() == Precision::kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT) {
  }

  void Forward(int batch, const float* x_float, const float* w, float* y_float) override {
    Plan* plan = PlanFor(batch);
    const float* filter_float = Transposed(w);
    if (plan == nullptr || filter_float == nullptr) return;
    Operands op;
    if (!Stage(x_float, plan->dims.input_elements(), filter_float, filter_elements(), y_float,
               plan->dims.output_elements(), op)) {
      return;
    }
    const void* x = op.first;
    const void* filter = op.second;
    void* y = op.out;
    const float one = 1.0f, zero = 0.0f;
    if (!plan->forward) {
      absl::StatusOr<std::optional<cudnnConvolutionFwdAlgo_t>> best =
          FastestForward(Setting(*plan), x, filter, y);
      if (!Check(best.status()) || !Found(best->has_value(), "forward")) return;
      plan->forward = **best;
    }
    if (Check(KT_CUDNN_STATUS(cudnnConvolutionForward(
            handle(), &one, plan->x.get(), x, filter_.get(), filter, conv_.get(), *plan->forward,
            workspace(), workspace_bytes(), &zero, plan->y.get(), y)))) {
      Unstage(op, plan->dims.output_elements(), y_float);
    }
  }

  void BackwardFilter(int batch, const float* x_float, const float* dy_float, float* dw) override {
    Plan* plan = PlanFor(batch);
    if (plan == nullptr || !EnsureFilterBuffers()) return;
    float* grad_float = filter_grad_.as<float>();
    Operands op;
    if (!Stage(x_float, plan->dims.input_elements(), dy_float, plan->dims.output_elements(),
               grad_float, filter_elements(), op)) {
      return;
    }
    const void* x = op.first;
    const void* dy = op.second;
    void* grad = op.out;
    const float one = 1.0f, zero = 0.0f;
    if (!plan->backward_filter) {
      absl::StatusOr<std::optional<cudnnConvolutionBwdFilterAlgo_t>> best =
          FastestBackwardFilter(Setting(*plan), x, dy, grad);
      if (!Check(best.status()) || !Found(best->has_value(), "backward filter")) return;
      plan->backward_filter = **best;
    }
    if (!Check(KT_CUDNN_STATUS(cudnnConvolutionBackwardFilter(
            handle(), &one, plan->x.get(), x, plan->y.get(), dy, conv_.get(),
            *plan->backward_filter, workspace(), workspace_bytes(), &zero, filter_.get(), grad))) ||
        !Unstage(op, filter_elements(), grad_float)) {
      return;
    }
    // OHWI [filters, k*k*in] back to the variable's HWIO [k*k*in, filters].
    Check(
        KT_CUDA_STATUS(LaunchTranspose(device_.stream(), shape_.filters, patch(), grad_float, dw)));
  }

  void BackwardData(int batch, const float* dy_float, const float* w, float* dx_float) override {
    Plan* plan = PlanFor(batch);
    const float* filter_float = Transposed(w);
    if (plan == nullptr || filter_float == nullptr) return;
    Operands op;
    if (!Stage(filter_float, filter_elements(), dy_float, plan->dims.output_elements(), dx_float,
               plan->dims.input_elements(), op)) {
      return;
    }
    const void* filter = op.first;
    const void* dy = op.second;
    void* dx = op.out;
    const float one = 1.0f, zero = 0.0f;
    if (!plan->backward_data) {
      absl::StatusOr<std::optional<cudnnConvolutionBwdDataAlgo_t>> best =
          FastestBackwardData(Setting(*plan), filter, dy, dx);
      if (!Check(best.status()) || !Found(best->has_value(), "backward data")) return;
      plan->backward_data = **best;
    }
    if (Check(KT_CUDNN_STATUS(cudnnConvolutionBackwardData(
            handle(), &one, filter_.get(), filter, plan->y.get(), dy, conv_.get(),
            *plan->backward_data, workspace(), workspace_bytes(), &zero, plan->x.get(), dx)))) {
      Unstage(op, plan->dims.input_elements(), dx_float);
    }
  }

 private:
  // One call's two inputs and its output in the convolution's data type.
  struct Operands {
    const void* first = nullptr;
    const void* second = nullptr;
    void* out = nullptr;
  };

  // In float32, the layer's own buffers. In bf16 (docs/decisions/0011-bf16-mixed-precision.md),
  // the two inputs rounded to bf16 in the device's scratch memory and room there for the output,
  // which Unstage writes back to `out` in float32. False on an error (recorded).
  bool Stage(const float* first, int64_t first_size, const float* second, int64_t second_size,
             float* out, int64_t out_size, Operands& op) {
    if (type_ == CUDNN_DATA_FLOAT) {
      op = {first, second, out};
      return true;
    }
    std::array<uint16_t*, 3> bf16{};
    if (!device_.Bf16Scratch({first_size, second_size, out_size}, bf16.data()) ||
        !Check(KT_CUDA_STATUS(LaunchToBf16(device_.stream(), first_size, first, bf16[0]))) ||
        !Check(KT_CUDA_STATUS(LaunchToBf16(device_.stream(), second_size, second, bf16[1])))) {
      return false;
    }
    op = {bf16[0], bf16[1], bf16[2]};
    return true;
  }
  // The staged output back in float32 (nothing to do in float32); false on an error (recorded).
  bool Unstage(const Operands& op, int64_t out_size, float* out) {
    if (op.out == out) return true;
    return Check(KT_CUDA_STATUS(
        LaunchFromBf16(device_.stream(), out_size, static_cast<const uint16_t*>(op.out), out)));
  }

  int64_t patch() const { return int64_t{shape_.kernel} * shape_.kernel * shape_.in_channels; }
  int64_t filter_elements() const { return patch() * shape_.filters; }
  cudnnHandle_t handle() const { return device_.cudnn(); }
  void* workspace() const { return device_.convolution_workspace(); }
  size_t workspace_bytes() const { return device_.convolution_workspace_bytes(); }
  bool Check(absl::Status status) { return device_.Check(std::move(status)); }

  // The descriptors and workspace of `plan`'s convolution, as cuDNN's find calls take them.
  ConvolutionSetting Setting(const Plan& plan) {
    return {handle(),     plan.x.get(), filter_.get(),    conv_.get(),
            plan.y.get(), workspace(),  workspace_bytes()};
  }

  bool Found(bool found, const char* direction) {
    if (found) return true;
    return Check(absl::InternalError(
        absl::StrCat("cuDNN has no ", direction, " convolution algorithm for ", shape_.height, "x",
                     shape_.width, "x", shape_.in_channels, " -> ", shape_.filters, " (kernel ",
                     shape_.kernel, ") within a workspace of ", workspace_bytes(), " bytes")));
  }

  // The descriptors every batch size shares, and the filter buffers, made once.
  bool EnsureFilterBuffers() {
    if (filter_) return true;
    if (!device_.Activate() || !device_.EnsureCudnn()) return false;
    absl::StatusOr<DeviceMemory> value =
        AllocateDeviceMemory(static_cast<size_t>(patch()) * shape_.filters * sizeof(float));
    absl::StatusOr<DeviceMemory> grad =
        AllocateDeviceMemory(static_cast<size_t>(patch()) * shape_.filters * sizeof(float));
    if (!Check(value.status()) || !Check(grad.status())) return false;
    filter_value_ = std::move(*value);
    filter_grad_ = std::move(*grad);
    absl::StatusOr<LayerDescriptors> layer =
        DescribeLayer(shape_, type_, device_.tf32_convolutions());
    if (!Check(layer.status())) return false;
    filter_ = std::move(layer->filter);
    conv_ = std::move(layer->conv);
    return true;
  }

  // `w` (HWIO) in cuDNN's OHWI layout, in filter_value_; null on an error (recorded).
  const float* Transposed(const float* w) {
    if (!EnsureFilterBuffers()) return nullptr;
    float* out = filter_value_.as<float>();
    if (!Check(
            KT_CUDA_STATUS(LaunchTranspose(device_.stream(), patch(), shape_.filters, w, out)))) {
      return nullptr;
    }
    return out;
  }

  // The plan for `batch`, made at its first use; null on an error (recorded).
  Plan* PlanFor(int batch) {
    if (!device_.Activate() || !EnsureFilterBuffers()) return nullptr;
    if (Plan* plan = plans_.Find(batch)) return plan;
    absl::StatusOr<ConvolutionDims> dims = DescribeConvolution(shape_, batch);
    if (!Check(dims.status())) return nullptr;
    absl::StatusOr<TensorDescriptor> x = NhwcTensor(type_, dims->n, dims->c, dims->h, dims->w);
    if (!Check(x.status())) return nullptr;
    absl::StatusOr<TensorDescriptor> y = NhwcTensor(type_, dims->n, dims->k, dims->p, dims->q);
    if (!Check(y.status())) return nullptr;
    std::array<int, 4> out{};
    if (!Check(KT_CUDNN_STATUS(cudnnGetConvolution2dForwardOutputDim(
            conv_.get(), x->get(), filter_.get(), &out[0], &out[1], &out[2], &out[3])))) {
      return nullptr;
    }
    if (out != std::array<int, 4>{dims->n, dims->k, dims->p, dims->q}) {
      Check(absl::InternalError(absl::StrCat("cuDNN computes a ", out[0], "x", out[1], "x", out[2],
                                             "x", out[3],
                                             " (NCHW) convolution output where the layer expects ",
                                             dims->n, "x", dims->k, "x", dims->p, "x", dims->q)));
      return nullptr;
    }
    Plan plan;
    plan.dims = *dims;
    plan.x = std::move(*x);
    plan.y = std::move(*y);
    return &plans_.Put(batch, std::move(plan));
  }

  CudaDevice& device_;
  Conv2DShape shape_;
  cudnnDataType_t type_;  // of x, y and the filter: float32, or bf16 under --precision=bf16
  FilterDescriptor filter_;
  ConvDescriptor conv_;
  DeviceMemory filter_value_;  // the kernel in OHWI, as the last Forward/BackwardData took it
  DeviceMemory filter_grad_;   // the kernel's gradient in OHWI, before it is transposed back
  BoundedCache<int, Plan> plans_{kPlansKept};
};

}  // namespace

std::unique_ptr<ConvolutionKernels> MakeCudnnConvolution(CudaDevice& device,
                                                         const Conv2DShape& shape) {
  return std::make_unique<CudnnConvolution>(device, shape);
}

}  // namespace kubetrain::worker::cuda
