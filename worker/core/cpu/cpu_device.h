// The CPU backend: host memory, GEMM through OpenBLAS, every other kernel as a plain loop over
// the shared element math in `worker/core/kernels_math.h`.
#pragma once

#include "worker/core/device.h"

namespace kubetrain::worker {

struct CpuDeviceOptions {
  // OpenBLAS threads for this process. ps and workers share two cores locally, so one thread per
  // process avoids oversubscription (docs/architecture.md §8); 0 leaves OpenBLAS's own setting
  // alone.
  int blas_threads = 1;
};

// Sets OpenBLAS's process-wide thread count (OpenBLAS keeps it in a global of its own).
void SetBlasThreads(int threads);
int GetBlasThreads();

// Owns nothing but the allocations it hands out through Buffers. Kernels run synchronously on
// the calling thread (plus OpenBLAS's threads inside Gemm). Thread-compatible: concurrent calls
// from different threads are safe only on disjoint buffers, and the OpenBLAS thread count is
// process-wide.
class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const CpuDeviceOptions& options = {});

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
};

}  // namespace kubetrain::worker
