#include "worker/cuda/cuda_device.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/core/device_choice.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cudnn_convolution.h"
#include "worker/cuda/kernels.h"
#include "worker/cuda/row_major_gemm.h"

namespace kubetrain::worker {

static_assert(cuda_error::kSuccess == cudaSuccess);
static_assert(cuda_error::kStubLibrary == cudaErrorStubLibrary);
static_assert(cuda_error::kInsufficientDriver == cudaErrorInsufficientDriver);
static_assert(cuda_error::kNoDevice == cudaErrorNoDevice);
static_assert(cuda_error::kSystemDriverMismatch == cudaErrorSystemDriverMismatch);
static_assert(cuda_error::kCompatNotSupportedOnDevice == cudaErrorCompatNotSupportedOnDevice);

CudaProbe ProbeCudaDevices() {
  CudaProbeReport report;
  const cudaError_t error = cudaGetDeviceCount(&report.device_count);
  report.error = error;
  if (error != cudaSuccess) {
    report.device_count = 0;
    report.error_text = absl::StrCat(cudaGetErrorName(error), ": ", cudaGetErrorString(error));
  }
  // Both answer without a device; the driver's is 0 when no driver is loaded.
  if (cudaDriverGetVersion(&report.driver_version) != cudaSuccess) report.driver_version = 0;
  if (cudaRuntimeGetVersion(&report.runtime_version) != cudaSuccess) report.runtime_version = 0;
  // The probe's errors belong to no later call: do not leave one for a launch check to find.
  static_cast<void>(cudaGetLastError());

  CudaProbe probe;
  probe.availability = ExplainCudaProbe(report);
  if (probe.availability.available) {
    probe.device_count = report.device_count;
    return probe;
  }
  // Machines without a usable GPU or driver are a precondition; anything else keeps the code
  // the CUDA error maps to (cuda_check.h).
  const absl::Status mapped = KT_CUDA_STATUS(error);
  probe.status = probe.availability.reason == "cuda-error" && !mapped.ok()
                     ? absl::Status(mapped.code(), probe.availability.message)
                     : absl::FailedPreconditionError(probe.availability.message);
  return probe;
}

absl::StatusOr<std::string> CudaDeviceName(int ordinal) {
  cudaDeviceProp properties;
  KT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&properties, ordinal));
  return std::string(properties.name);
}

absl::StatusOr<std::unique_ptr<CudaDevice>> CudaDevice::Create(const CudaDeviceOptions& options) {
  if (options.ordinal < 0 || options.staging_chunk_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("CudaDeviceOptions: ordinal (", options.ordinal,
                                                   ") must be >= 0 and staging_chunk_bytes (",
                                                   options.staging_chunk_bytes, ") positive"));
  }
  const CudaProbe probe = ProbeCudaDevices();
  if (!probe.status.ok()) return probe.status;
  if (options.ordinal >= probe.device_count) {
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", options.ordinal,
                                                      " requested, but only ", probe.device_count,
                                                      " device(s) are visible"));
  }
  std::unique_ptr<CudaDevice> device(new CudaDevice(options));
  RETURN_IF_ERROR(device->Init(), "setting up CUDA device ", options.ordinal);
  return device;
}

absl::Status CudaDevice::Init() {
  RETURN_IF_ERROR(MakeCurrent());
  ASSIGN_OR_RETURN(const std::string device_name, CudaDeviceName(ordinal()));
  description_ = absl::StrCat("cuda:", ordinal(), " ", device_name);
  if (options_.precision == Precision::kBFloat16) {
    int major = 0, minor = 0;
    KT_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal()));
    KT_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, ordinal()));
    if (major < 8) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--precision=bf16: bf16 GEMMs and convolutions need compute capability 8.0 (Ampere) or "
          "later, and ",
          description_, " has ", major, ".", minor, "; use --precision=fp32"));
    }
  }
  KT_CUDA_RETURN_IF_ERROR(cuda::CheckKernelImage());
  ASSIGN_OR_RETURN(compute_, cuda::CreateStream());
  ASSIGN_OR_RETURN(copy_, cuda::CreateStream());
  ASSIGN_OR_RETURN(compute_done_, cuda::CreateEvent());
  ASSIGN_OR_RETURN(copy_done_, cuda::CreateEvent());
  ASSIGN_OR_RETURN(graph_done_, cuda::CreateEvent());
  for (size_t i = 0; i < staging_.size(); ++i) {
    ASSIGN_OR_RETURN(staging_[i], cuda::AllocatePinnedMemory(options_.staging_chunk_bytes));
    ASSIGN_OR_RETURN(staging_free_[i], cuda::CreateEvent());
  }
  ASSIGN_OR_RETURN(cublas_workspace_, cuda::AllocateDeviceMemory(cuda::kCublasWorkspaceBytes));
  ASSIGN_OR_RETURN(cublas_,
                   cuda::CreateCublasHandle(compute_.get(), options_.tf32, &cublas_workspace_));
  return absl::OkStatus();
}

CudaDevice::~CudaDevice() {
  // The members are released after this body: first let queued work that uses them finish.
  absl::Status status = MakeCurrent();
  if (status.ok() && copy_) status = KT_CUDA_STATUS(cudaStreamSynchronize(copy_.get()));
  if (status.ok() && compute_) status = KT_CUDA_STATUS(cudaStreamSynchronize(compute_.get()));
  cuda::LogIfError(status, "Failed to wait for CUDA work before releasing the device");
  cuda::LogIfError(first_error_, "Dropped a CUDA error that no Synchronize reported");
}

absl::Status CudaDevice::MakeCurrent() const {
  int current = -1;
  KT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  if (current == options_.ordinal) return absl::OkStatus();
  return KT_CUDA_STATUS(cudaSetDevice(options_.ordinal));
}

void CudaDevice::Record(absl::Status status) {
  absl::Status& first = capturing_ ? capture_error_ : first_error_;
  if (!status.ok() && first.ok()) first = std::move(status);
}

bool CudaDevice::Check(absl::Status status) {
  const bool ok = status.ok();
  Record(std::move(status));
  return ok;
}

bool CudaDevice::Activate() { return Check(MakeCurrent()); }

float* CudaDevice::Scratch(int64_t floats) {
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  if (scratch_.bytes() < bytes) {
    if (RefuseDuringCapture("growing the scratch memory")) return nullptr;
    // Kernels already issued may still read the old block.
    if (!Check(KT_CUDA_STATUS(cudaStreamSynchronize(compute_.get())))) return nullptr;
    absl::StatusOr<cuda::DeviceMemory> grown =
        cuda::AllocateDeviceMemory(std::max(bytes, 2 * scratch_.bytes()));
    if (!Check(grown.status())) return nullptr;
    if (captured_) retired_scratch_.push_back(std::move(scratch_));
    scratch_ = *std::move(grown);
  }
  return scratch_.as<float>();
}

bool CudaDevice::Bf16Scratch(std::initializer_list<int64_t> sizes, uint16_t** out) {
  constexpr int64_t kAlign = 128;  // values: 256 bytes
  int64_t total = 0;
  for (const int64_t size : sizes) total += (size + kAlign - 1) / kAlign * kAlign;
  auto* base = reinterpret_cast<uint16_t*>(Scratch((total + 1) / 2));
  if (base == nullptr) return false;
  for (const int64_t size : sizes) {
    *out++ = base;
    base += (size + kAlign - 1) / kAlign * kAlign;
  }
  return true;
}

bool CudaDevice::EnsureCudnn() {
  if (cudnn_) return true;
  absl::StatusOr<cuda::CudnnHandle> handle = cuda::CreateCudnnHandle(compute_.get());
  if (!Check(handle.status())) return false;
  size_t free_bytes = 0, total_bytes = 0;
  if (!Check(KT_CUDA_STATUS(cudaMemGetInfo(&free_bytes, &total_bytes)))) return false;
  const size_t bytes = ConvolutionWorkspaceLimit(free_bytes);
  if (bytes > 0) {
    absl::StatusOr<cuda::DeviceMemory> workspace = cuda::AllocateDeviceMemory(bytes);
    if (!Check(workspace.status())) return false;
    convolution_workspace_ = *std::move(workspace);
  }
  cudnn_ = *std::move(handle);
  return true;
}

std::unique_ptr<ConvolutionKernels> CudaDevice::MakeConvolution(const Conv2DShape& shape) {
  return cuda::MakeCudnnConvolution(*this, shape);
}

bool CudaDevice::CopyAfterCompute() {
  return Check(KT_CUDA_STATUS(cudaEventRecord(compute_done_.get(), compute_.get()))) &&
         Check(KT_CUDA_STATUS(cudaStreamWaitEvent(copy_.get(), compute_done_.get(), 0)));
}

void* CudaDevice::Allocate(absl::string_view call, cudaError_t (*allocate)(void**, size_t),
                           size_t bytes) {
  RefuseDuringCapture(call);
  const cuda::RelaxedCapture relaxed(capturing_);  // the allocation must not end the capture
  void* ptr = nullptr;
  absl::Status status = MakeCurrent();
  if (status.ok()) status = KT_CUDA_STATUS(allocate(&ptr, bytes));
  if (!status.ok()) {
    log::Error("Failed to allocate memory",
               {{"device", description_}, {"call", call}, {"bytes", bytes}, {"error", status}});
    throw std::bad_alloc();
  }
  return ptr;
}

void* CudaDevice::AllocateBytes(size_t bytes) {
  return Allocate(
      "AllocateBytes", [](void** ptr, size_t n) { return cudaMalloc(ptr, n); }, bytes);
}

void CudaDevice::FreeBytes(void* ptr) {
  RefuseDuringCapture("FreeBytes");
  const cuda::RelaxedCapture relaxed(capturing_);
  if (Activate()) Record(KT_CUDA_STATUS(cudaFree(ptr)));
}

// Consecutive chunks alternate between the two staging buffers: the CPU copies one chunk into
// one buffer while the DMA of the previous chunk reads the other. The alternation carries over
// from one call to the next, so back-to-back small uploads overlap too. Returns once the last
// chunk is staged; its DMA may still run, and the compute stream waits for it before any later
// kernel.
void CudaDevice::CopyHostToDevice(const void* host, void* device, size_t bytes) {
  if (capturing_) {
    CaptureUpload(host, device, bytes);
    return;
  }
  // The copy stream must not overwrite memory that queued kernels still read.
  if (bytes == 0 || !Activate() || !CopyAfterCompute()) return;
  const size_t chunk = options_.staging_chunk_bytes;
  const auto* src = static_cast<const char*>(host);
  auto* dst = static_cast<char*>(device);
  for (size_t offset = 0; offset < bytes; offset += chunk) {
    const size_t n = std::min(chunk, bytes - offset);
    const size_t i = std::exchange(next_staging_, next_staging_ ^ 1);
    // The previous DMA out of this buffer must be done before the CPU overwrites it.
    if (!Check(KT_CUDA_STATUS(cudaEventSynchronize(staging_free_[i].get())))) return;
    std::memcpy(staging_[i].get(), src + offset, n);
    if (!Check(KT_CUDA_STATUS(cudaMemcpyAsync(dst + offset, staging_[i].get(), n,
                                              cudaMemcpyHostToDevice, copy_.get()))) ||
        !Check(KT_CUDA_STATUS(cudaEventRecord(staging_free_[i].get(), copy_.get())))) {
      return;
    }
  }
  if (Check(KT_CUDA_STATUS(cudaEventRecord(copy_done_.get(), copy_.get())))) {
    Record(KT_CUDA_STATUS(cudaStreamWaitEvent(compute_.get(), copy_done_.get(), 0)));
  }
}

// The mirror image: the DMA of chunk i + 1 into one staging buffer runs while the CPU copies
// chunk i out of the other. Returns when `host` holds every byte.
void CudaDevice::CopyDeviceToHost(const void* device, void* host, size_t bytes) {
  // The copy must see everything the queued kernels write.
  if (RefuseDuringCapture("CopyDeviceToHost") || bytes == 0 || !Activate() || !CopyAfterCompute())
    return;
  const size_t chunk = options_.staging_chunk_bytes;
  const size_t chunks = (bytes + chunk - 1) / chunk;
  const auto* src = static_cast<const char*>(device);
  auto* dst = static_cast<char*>(host);
  const auto size_of = [&](size_t j) { return std::min(chunk, bytes - j * chunk); };
  const auto issue = [&](size_t j) {
    const size_t i = j % 2;
    return Check(KT_CUDA_STATUS(cudaMemcpyAsync(staging_[i].get(), src + j * chunk, size_of(j),
                                                cudaMemcpyDeviceToHost, copy_.get()))) &&
           Check(KT_CUDA_STATUS(cudaEventRecord(staging_free_[i].get(), copy_.get())));
  };
  if (!issue(0)) return;
  for (size_t j = 0; j < chunks; ++j) {
    // Staging buffer (j + 1) % 2 was emptied by the previous iteration.
    if (j + 1 < chunks && !issue(j + 1)) return;
    if (!Check(KT_CUDA_STATUS(cudaEventSynchronize(staging_free_[j % 2].get())))) return;
    std::memcpy(dst + j * chunk, staging_[j % 2].get(), size_of(j));
  }
}

void CudaDevice::CopyDeviceToDevice(const void* src, void* dst, size_t bytes) {
  if (bytes == 0 || src == dst || !Activate()) return;
  const auto* s = static_cast<const char*>(src);
  auto* d = static_cast<char*>(dst);
  if (s + bytes <= d || d + bytes <= s) {
    Record(
        KT_CUDA_STATUS(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_.get())));
    return;
  }
  // cudaMemcpy leaves overlapping ranges undefined; go through scratch instead.
  float* tmp = Scratch(static_cast<int64_t>((bytes + sizeof(float) - 1) / sizeof(float)));
  if (tmp == nullptr) return;
  if (Check(KT_CUDA_STATUS(
          cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, compute_.get())))) {
    Record(
        KT_CUDA_STATUS(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, compute_.get())));
  }
}

void CudaDevice::Fill(int64_t n, float value, float* x) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchFill(stream(), n, value, x)));
}

absl::Status CudaDevice::Synchronize() {
  if (RefuseDuringCapture("Synchronize")) {
    return absl::FailedPreconditionError("Synchronize during graph capture");
  }
  if (Activate()) {
    Record(KT_CUDA_STATUS(cudaStreamSynchronize(copy_.get())));
    Record(KT_CUDA_STATUS(cudaStreamSynchronize(compute_.get())));
  }
  return std::exchange(first_error_, absl::OkStatus());
}

void CudaDevice::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      const float* b, float beta, float* c) {
  if (!Activate()) return;
  if (options_.precision == Precision::kBFloat16) {
    const int64_t a_size = int64_t{m} * k, b_size = int64_t{k} * n;
    std::array<uint16_t*, 2> bf16{};
    if (!Bf16Scratch({a_size, b_size}, bf16.data()) ||
        !Check(KT_CUDA_STATUS(cuda::LaunchToBf16(stream(), a_size, a, bf16[0]))) ||
        !Check(KT_CUDA_STATUS(cuda::LaunchToBf16(stream(), b_size, b, bf16[1])))) {
      return;
    }
    Record(KT_CUBLAS_STATUS(cuda::RowMajorGemmBf16(cublas_.get(), trans_a, trans_b, m, n, k, alpha,
                                                   bf16[0], bf16[1], beta, c)));
    return;
  }
  Record(KT_CUBLAS_STATUS(
      cuda::RowMajorSgemm(cublas_.get(), trans_a, trans_b, m, n, k, alpha, a, b, beta, c)));
}

void CudaDevice::Axpy(int64_t n, float alpha, const float* x, float* y) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchAxpy(stream(), n, alpha, x, y)));
}

void CudaDevice::Scale(int64_t n, float alpha, float* x) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchScale(stream(), n, alpha, x)));
}

void CudaDevice::AddBias(int rows, int cols, const float* bias, float* x) {
  if (Activate()) {
    Record(KT_CUDA_STATUS(cuda::LaunchAddBias(stream(), rows, cols, bias, /*relu=*/false, x)));
  }
}

void CudaDevice::AddBiasRelu(int rows, int cols, const float* bias, float* x) {
  if (Activate()) {
    Record(KT_CUDA_STATUS(cuda::LaunchAddBias(stream(), rows, cols, bias, /*relu=*/true, x)));
  }
}

void CudaDevice::BiasGrad(int rows, int cols, const float* dy, float* db) {
  if (!Activate()) return;
  const int64_t scratch = cuda::ColumnSumScratch(rows, cols);
  float* chunk_sums = scratch > 0 ? Scratch(scratch) : nullptr;
  if (scratch > 0 && chunk_sums == nullptr) return;
  Record(KT_CUDA_STATUS(cuda::LaunchColumnSums(stream(), rows, cols, dy, chunk_sums, db)));
}

void CudaDevice::ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                              float* db) {
  if (!Activate()) return;
  const int64_t scratch = cuda::ColumnSumScratch(rows, cols);
  float* chunk_sums = scratch > 0 ? Scratch(scratch) : nullptr;
  if (scratch > 0 && chunk_sums == nullptr) return;
  Record(
      KT_CUDA_STATUS(cuda::LaunchReluColumnSums(stream(), rows, cols, y, dy, dx, chunk_sums, db)));
}

void CudaDevice::Relu(int64_t n, const float* x, float* y) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchRelu(stream(), n, x, y)));
}

void CudaDevice::ReluGrad(int64_t n, const float* y, const float* dy, float* dx) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchReluGrad(stream(), n, y, dy, dx)));
}

void CudaDevice::SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                     float grad_scale, float* loss, float* dlogits) {
  if (!Activate()) return;
  Record(KT_CUDA_STATUS(cuda::LaunchSoftmaxCrossEntropy(stream(), rows, cols, logits, labels,
                                                        grad_scale, loss, dlogits)));
}

void CudaDevice::ArgMax(int rows, int cols, const float* x, int32_t* out) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchArgMax(stream(), rows, cols, x, out)));
}

void CudaDevice::Im2Col(const ConvGeometry& g, const float* input, float* col) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchIm2Col(stream(), g, input, col)));
}

void CudaDevice::Col2Im(const ConvGeometry& g, const float* col, float* input_grad) {
  if (Activate()) Record(KT_CUDA_STATUS(cuda::LaunchCol2Im(stream(), g, col, input_grad)));
}

void CudaDevice::MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                            int32_t* argmax) {
  if (Activate()) {
    Record(KT_CUDA_STATUS(cuda::LaunchMaxPool(stream(), g, input, output, argmax)));
  }
}

void CudaDevice::MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad,
                                const int32_t* argmax, float* input_grad) {
  if (!Activate()) return;
  Record(KT_CUDA_STATUS(cuda::LaunchMaxPoolGrad(stream(), g, output_grad, argmax, input_grad)));
}

void CudaDevice::ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad, float* value,
                             float* slot0, float* slot1) {
  if (!Activate()) return;
  Record(KT_CUDA_STATUS(cuda::LaunchApplyUpdate(stream(), rule, n, grad, value, slot0, slot1)));
}

void CudaDevice::ApplyUpdates(const ps::UpdateRule* rule, absl::Span<const UpdateSlice> slices) {
  if (!Activate()) return;
  for (size_t start = 0; start < slices.size(); start += math::UpdateSlices::kMax) {
    math::UpdateSlices batch;
    for (size_t i = start; i < slices.size() && batch.count < math::UpdateSlices::kMax; ++i) {
      const UpdateSlice& s = slices[i];
      const int k = batch.count++;
      batch.begin[k + 1] = batch.begin[k] + s.n;
      batch.grad[k] = s.grad;
      batch.value[k] = s.value;
      batch.slot0[k] = s.slot0;
      batch.slot1[k] = s.slot1;
    }
    if (!Check(KT_CUDA_STATUS(cuda::LaunchApplyUpdates(stream(), rule, batch)))) return;
  }
}

}  // namespace kubetrain::worker
