// The CPU backend: host memory, GEMM through OpenBLAS, every other kernel as a plain loop over
// the shared element math in `worker/core/kernels_math.h`.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "worker/core/device.h"
#include "worker/core/precision.h"

namespace kubetrain::worker {

struct CpuDeviceOptions {
  // OpenBLAS threads for this process. ps and workers share two cores locally, so one thread per
  // process avoids oversubscription (docs/architecture.md §8); 0 leaves OpenBLAS's own setting
  // alone.
  int blas_threads = 1;
  // kBFloat16: every Gemm (and so every convolution, im2col + GEMM here) rounds its operands to
  // bf16 and sums in float32, as a GPU's bf16 GEMM does: the numbers of --precision=bf16, to check
  // a model's accuracy in it, at no gain in speed (Debian's OpenBLAS has no sbgemm kernels).
  Precision precision = Precision::kFloat32;
};

// Sets OpenBLAS's process-wide thread count (OpenBLAS keeps it in a global of its own).
void SetBlasThreads(int threads);
int GetBlasThreads();

// OpenBLAS's kernel set in this process ("SkylakeX", "Haswell", "Prescott"...).
std::string BlasCoreName();

// What to do when OpenBLAS runs kernels older than the CPU's vector units, "" when they fit.
// Debian 12's OpenBLAS (0.3.21) falls back to its SSE3 "Prescott" kernels on x86 CPUs it does
// not know, such as Xeons newer than Sapphire Rapids (family 6 model 207), where "SkylakeX" runs
// the same GEMMs about 4x faster (train_step --model=cnn: 30 against 121 GFLOP/s on one core).
// `avx2`/`avx512`: what the CPU has (AVX2 with FMA; AVX-512 F, BW, DQ and VL); `chosen`: whether
// OPENBLAS_CORETYPE is set, a choice this leaves alone.
std::string BlasKernelAdvice(absl::string_view core, bool avx2, bool avx512, bool chosen);

// BlasKernelAdvice for this process and CPU.
std::string BlasKernelAdviceHere();

// Owns nothing but the allocations it hands out through Buffers. Kernels run synchronously on
// the calling thread (plus OpenBLAS's threads inside Gemm). Thread-compatible: concurrent calls
// from different threads are safe only on disjoint buffers, and the OpenBLAS thread count is
// process-wide. Not final: a test adds convolution kernels of its own to check the layer's path
// for them (worker/tests/convolution_test.cc).
class CpuDevice : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options = {});

  Precision precision() const { return precision_; }

  bool HostAddressable() const override { return true; }
  absl::string_view name() const override { return "cpu"; }

  void* AllocateBytes(size_t bytes) override;
  void FreeBytes(void* ptr) override;
  void CopyHostToDevice(const void* host, void* device, size_t bytes) override;
  void CopyDeviceToHost(const void* device, void* host, size_t bytes) override;
  void CopyDeviceToDevice(const void* src, void* dst, size_t bytes) override;
  void Fill(int64_t n, float value, float* x) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

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

 private:
  Precision precision_;
};

}  // namespace kubetrain::worker
