#include "bench/train_step/backends.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/random.h"

#if KUBETRAIN_HAVE_CUDA
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/cuda_resources.h"
#include "worker/cuda/cudnn_descriptors.h"
#include "worker/cuda/kernels.h"
#include "worker/cuda/row_major_gemm.h"
#endif

namespace kubetrain::bench {
namespace {

using worker::Tensor;

// Elements of the largest A, B and C among `calls`: one set of operands serves every call.
struct OperandSizes {
  int64_t a = 0, b = 0, c = 0;
};

OperandSizes LargestOperands(absl::Span<const GemmCall> calls) {
  OperandSizes s;
  for (const GemmCall& g : calls) {
    s.a = std::max<int64_t>(s.a, int64_t{g.m} * g.k);
    s.b = std::max<int64_t>(s.b, int64_t{g.k} * g.n);
    s.c = std::max<int64_t>(s.c, int64_t{g.m} * g.n);
  }
  return s;
}

// Bare cblas_sgemm over operands sized for the largest call. Every call reads and writes the
// same three buffers, which is what the model does with its reused activation/column buffers.
class CblasReference final : public GemmReference {
 public:
  explicit CblasReference(worker::Device& device) : device_(device) {}

  absl::StatusOr<std::vector<int64_t>> Run(absl::Span<const GemmCall> calls) override {
    Reserve(calls);
    std::vector<int64_t> nanos;
    nanos.reserve(calls.size());
    for (const GemmCall& g : calls) {
      const auto start = std::chrono::steady_clock::now();
      cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                  g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, g.alpha, a_.data(),
                  g.trans_a ? g.m : g.k, b_.data(), g.trans_b ? g.k : g.n, g.beta, c_.data(), g.n);
      nanos.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count());
    }
    return nanos;
  }

 private:
  // Grows the operands to the largest call and fills them with values in [-1, 1): no denormals
  // or NaNs, which could slow the arithmetic down.
  void Reserve(absl::Span<const GemmCall> calls) {
    const OperandSizes sizes = LargestOperands(calls);
    Grow(a_, sizes.a, 1);
    Grow(b_, sizes.b, 2);
    Grow(c_, sizes.c, 3);
  }

  void Grow(Tensor& t, int64_t size, uint64_t seed) {
    if (t.size() >= size) return;
    t = Tensor(device_, {size});
    worker::Rng rng(seed);
    for (int64_t i = 0; i < size; ++i) t.data()[i] = 2.0f * rng.Uniform() - 1.0f;
  }

  worker::Device& device_;
  Tensor a_, b_, c_;
};

absl::StatusOr<Backend> MakeCpu(const BackendOptions& options) {
  if (options.threads < 1) return absl::InvalidArgumentError("--threads must be at least 1");
  if (options.tf32 == true) {
    return absl::FailedPreconditionError(
        "--tf32: TF32 is a tensor-core mode of NVIDIA GPUs; drop --tf32 or use --device=cuda");
  }
  Backend backend;
  backend.device = std::make_unique<worker::CpuDevice>(
      worker::CpuDeviceOptions{.blas_threads = options.threads, .precision = options.precision});
  backend.reference = std::make_unique<CblasReference>(*backend.device);
  return backend;
}

#if KUBETRAIN_HAVE_CUDA

// cuDNN 9 marks its per-operation convolution API deprecated; it is what the device's own
// convolutions call (docs/decisions/0009-cudnn-per-operation-convolutions.md).
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

// Bare cublasSgemm, or under bf16 cublasGemmEx on bf16 operands (through the same row-major
// mapping the device uses), on its own handle and stream, operands sized for the largest call. Each
// call is timed to its completion, as the profiling device times the step's GEMMs (it synchronises
// after every kernel).
class CublasReference final : public GemmReference {
 public:
  static absl::StatusOr<std::unique_ptr<CublasReference>> Create(worker::CudaDevice& device,
                                                                 bool tf32) {
    RETURN_IF_ERROR(device.MakeCurrent());
    auto reference = std::unique_ptr<CublasReference>(
        new CublasReference(device, device.precision() == worker::Precision::kBFloat16));
    ASSIGN_OR_RETURN(reference->stream_, worker::cuda::CreateStream());
    ASSIGN_OR_RETURN(reference->handle_,
                     worker::cuda::CreateCublasHandle(reference->stream_.get(), tf32));
    return reference;
  }

  absl::StatusOr<std::vector<int64_t>> Run(absl::Span<const GemmCall> calls) override {
    RETURN_IF_ERROR(Reserve(calls));
    RETURN_IF_ERROR(device_.MakeCurrent());
    std::vector<int64_t> nanos;
    nanos.reserve(calls.size());
    for (const GemmCall& g : calls) {
      const auto start = std::chrono::steady_clock::now();
      KT_CUBLAS_RETURN_IF_ERROR(
          bf16_ ? worker::cuda::RowMajorGemmBf16(handle_.get(), g.trans_a, g.trans_b, g.m, g.n, g.k,
                                                 g.alpha, a16_.get(), b16_.get(), g.beta, c_.data())
                : worker::cuda::RowMajorSgemm(handle_.get(), g.trans_a, g.trans_b, g.m, g.n, g.k,
                                              g.alpha, a_.data(), b_.data(), g.beta, c_.data()));
      KT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_.get()));
      nanos.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count());
    }
    return nanos;
  }

  absl::StatusOr<std::array<int64_t, 3>> TimeConvolution(const worker::Conv2DShape& shape,
                                                         int batch) override;

 private:
  CublasReference(worker::CudaDevice& device, bool bf16) : device_(device), bf16_(bf16) {}

  // Grows the operands to the largest call, filled with values in [-1, 1) as on the CPU; under
  // bf16, A and B also as bf16, rounded once here and not in the timed calls.
  absl::Status Reserve(absl::Span<const GemmCall> calls) {
    const OperandSizes sizes = LargestOperands(calls);
    Grow(a_, sizes.a, 1);
    Grow(b_, sizes.b, 2);
    Grow(c_, sizes.c, 3);
    if (bf16_) {
      RETURN_IF_ERROR(Rounded(a_, a16_));
      RETURN_IF_ERROR(Rounded(b_, b16_));
    }
    return device_.Synchronize();
  }

  absl::Status Rounded(const Tensor& from, worker::cuda::DeviceMemory& to) {
    const size_t bytes = static_cast<size_t>(from.size()) * sizeof(uint16_t);
    if (to.bytes() < bytes) {
      ASSIGN_OR_RETURN(to, worker::cuda::AllocateDeviceMemory(bytes));
    }
    KT_CUDA_RETURN_IF_ERROR(
        worker::cuda::LaunchToBf16(device_.stream(), from.size(), from.data(), to.as<uint16_t>()));
    return absl::OkStatus();
  }

  void Grow(Tensor& t, int64_t size, uint64_t seed) {
    if (t.size() >= size) return;
    t = Tensor(device_, {size});
    std::vector<float> host(static_cast<size_t>(size));
    worker::Rng rng(seed);
    for (float& x : host) x = 2.0f * rng.Uniform() - 1.0f;
    device_.Upload(host.data(), t, size);
  }

  worker::CudaDevice& device_;
  bool bf16_;
  // Declared before the operands: the tensors are freed through the device, the stream and
  // handle are released last.
  worker::cuda::Stream stream_;
  worker::cuda::CublasHandle handle_;
  Tensor a_, b_, c_;
  worker::cuda::DeviceMemory a16_, b16_;
};

// Each call once untimed, then `kRepeats` times, each timed to the stream's completion, as the
// profiling device times the step's kernels: the mean nanoseconds.
template <typename Call>
absl::StatusOr<int64_t> TimedCalls(cudaStream_t stream, Call&& call) {
  constexpr int kRepeats = 5;
  RETURN_IF_ERROR(call());
  KT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  int64_t total = 0;
  for (int i = 0; i < kRepeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(call());
    KT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    total += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                  start)
                 .count();
  }
  return total / kRepeats;
}

// The algorithm of one direction that the device would choose (cudnn_descriptors.h), or an
// error when none fits the workspace.
template <typename Algo>
absl::StatusOr<Algo> Best(absl::StatusOr<std::optional<Algo>> best, const char* direction) {
  RETURN_IF_ERROR(best.status());
  if (!best->has_value()) {
    return absl::InternalError(absl::StrCat("cuDNN has no ", direction, " algorithm"));
  }
  return **best;
}

// Bare cuDNN on the device's handle, workspace, data type and math type, on tensors already in
// cuDNN's layouts (no transposes, no bf16 rounding passes), zero-filled: the convolutions alone.
absl::StatusOr<std::array<int64_t, 3>> CublasReference::TimeConvolution(
    const worker::Conv2DShape& shape, int batch) {
  namespace cuda = worker::cuda;
  RETURN_IF_ERROR(device_.MakeCurrent());
  if (!device_.EnsureCudnn()) return device_.Synchronize();
  const cudnnDataType_t type =
      device_.precision() == worker::Precision::kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  const size_t element = type == CUDNN_DATA_FLOAT ? sizeof(float) : sizeof(uint16_t);
  ASSIGN_OR_RETURN(const worker::ConvolutionDims dims, worker::DescribeConvolution(shape, batch));
  ASSIGN_OR_RETURN(cuda::LayerDescriptors layer,
                   cuda::DescribeLayer(shape, type, device_.tf32_convolutions()));
  ASSIGN_OR_RETURN(cuda::TensorDescriptor xd,
                   cuda::NhwcTensor(type, dims.n, dims.c, dims.h, dims.w));
  ASSIGN_OR_RETURN(cuda::TensorDescriptor yd,
                   cuda::NhwcTensor(type, dims.n, dims.k, dims.p, dims.q));
  std::array<cuda::DeviceMemory, 5> memory;  // x, w, y (and dy), dx, dw
  const std::array<int64_t, 5> elements = {dims.input_elements(), dims.filter_elements(),
                                           dims.output_elements(), dims.input_elements(),
                                           dims.filter_elements()};
  for (size_t i = 0; i < memory.size(); ++i) {
    ASSIGN_OR_RETURN(memory[i], cuda::AllocateDeviceMemory(elements[i] * element));
    KT_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(memory[i].get(), 0, memory[i].bytes(), device_.stream()));
  }
  void* x = memory[0].get();
  void* w = memory[1].get();
  void* y = memory[2].get();
  void* dx = memory[3].get();
  void* dw = memory[4].get();
  cudnnHandle_t h = device_.cudnn();
  void* ws = device_.convolution_workspace();
  const size_t ws_bytes = device_.convolution_workspace_bytes();
  const float one = 1.0f, zero = 0.0f;
  const cuda::ConvolutionSetting setting{
      h, xd.get(), layer.filter.get(), layer.conv.get(), yd.get(), ws, ws_bytes};
  std::array<int64_t, 3> nanos{};

  ASSIGN_OR_RETURN(const cudnnConvolutionFwdAlgo_t fwd_algo,
                   Best(cuda::FastestForward(setting, x, w, y), "forward"));
  ASSIGN_OR_RETURN(nanos[0], TimedCalls(device_.stream(), [&] {
                     return KT_CUDNN_STATUS(cudnnConvolutionForward(
                         h, &one, xd.get(), x, layer.filter.get(), w, layer.conv.get(), fwd_algo,
                         ws, ws_bytes, &zero, yd.get(), y));
                   }));

  ASSIGN_OR_RETURN(const cudnnConvolutionBwdFilterAlgo_t bwf_algo,
                   Best(cuda::FastestBackwardFilter(setting, x, y, dw), "backward filter"));
  ASSIGN_OR_RETURN(nanos[1], TimedCalls(device_.stream(), [&] {
                     return KT_CUDNN_STATUS(cudnnConvolutionBackwardFilter(
                         h, &one, xd.get(), x, yd.get(), y, layer.conv.get(), bwf_algo, ws,
                         ws_bytes, &zero, layer.filter.get(), dw));
                   }));

  ASSIGN_OR_RETURN(const cudnnConvolutionBwdDataAlgo_t bwd_algo,
                   Best(cuda::FastestBackwardData(setting, w, y, dx), "backward data"));
  ASSIGN_OR_RETURN(nanos[2], TimedCalls(device_.stream(), [&] {
                     return KT_CUDNN_STATUS(cudnnConvolutionBackwardData(
                         h, &one, layer.filter.get(), w, yd.get(), y, layer.conv.get(), bwd_algo,
                         ws, ws_bytes, &zero, xd.get(), dx));
                   }));
  return nanos;
}

absl::StatusOr<Backend> MakeCuda(const BackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<worker::CudaDevice> device,
                   worker::CudaDevice::Create({.tf32 = options.tf32.value_or(false),
                                               .tf32_convolutions = options.tf32.value_or(true),
                                               .precision = options.precision}),
                   "--device=cuda");
  ASSIGN_OR_RETURN(std::unique_ptr<CublasReference> reference,
                   CublasReference::Create(*device, options.tf32.value_or(false)),
                   "--device=cuda: bare cuBLAS reference");
  Backend backend;
  backend.device = std::move(device);
  backend.reference = std::move(reference);
  return backend;
}

#else

// "cuda" stays a known name with a clear answer in builds without the backend.
absl::StatusOr<Backend> MakeCuda(const BackendOptions& /*options*/) {
  return absl::FailedPreconditionError(
      "--device=cuda: this build has no CUDA backend (configured without nvcc); use --device=cpu");
}

#endif

struct BackendEntry {
  absl::string_view name;
  std::function<absl::StatusOr<Backend>(const BackendOptions&)> make;
};

const std::vector<BackendEntry>& Backends() {
  static const auto* backends = new std::vector<BackendEntry>{
      {"cpu", MakeCpu},
      {"cuda", MakeCuda},
  };
  return *backends;
}

}  // namespace

absl::StatusOr<Backend> MakeBackend(absl::string_view name, const BackendOptions& options) {
  std::vector<absl::string_view> names;
  for (const BackendEntry& entry : Backends()) {
    if (entry.name == name) return entry.make(options);
    names.push_back(entry.name);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--device: unknown backend \"", name, "\"; expected one of: ", absl::StrJoin(names, ", ")));
}

}  // namespace kubetrain::bench
