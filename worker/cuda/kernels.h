// Launchers of the CUDA backend's kernels (kernels.cu), callable from host C++ code.
//
// Each enqueues one kernel (two for multi-chunk column sums) on `stream` and returns the launch's
// cudaError_t (from cudaGetLastError), so the caller records it; a fault while the kernel runs
// surfaces at the next stream synchronisation instead. Empty sizes enqueue nothing. Pointers are
// device pointers; every kernel computes its elements with the shared math of
// worker/core/kernels_math.h and ps/update_rule.h, as CpuDevice does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "ps/update_rule.h"
#include "worker/core/kernels_math.h"

namespace kubetrain::worker::cuda {

cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* x);
cudaError_t LaunchAxpy(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y);
cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* x);

// x[r, c] += bias[c], then ReLU when `relu`.
cudaError_t LaunchAddBias(cudaStream_t stream, int rows, int cols, const float* bias, bool relu,
                          float* x);

// Floats of scratch the column sums of a [rows, cols] matrix need (math::ColumnSumPlan: one
// partial sum per chunk and column); 0 when one chunk covers every row.
int64_t ColumnSumScratch(int rows, int cols);
// sums[c] = sum_r x[r, c] in ColumnSumPlan's order; `scratch` holds ColumnSumScratch floats.
cudaError_t LaunchColumnSums(cudaStream_t stream, int rows, int cols, const float* x,
                             float* scratch, float* sums);
// dx = ReluGrad(y, dy) and db[c] = sum_r dx[r, c] in the same pass and order; dy and dx may
// alias.
cudaError_t LaunchReluColumnSums(cudaStream_t stream, int rows, int cols, const float* y,
                                 const float* dy, float* dx, float* scratch, float* db);

cudaError_t LaunchRelu(cudaStream_t stream, int64_t n, const float* x, float* y);
cudaError_t LaunchReluGrad(cudaStream_t stream, int64_t n, const float* y, const float* dy,
                           float* dx);

// One thread per row; `dlogits` may be null.
cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, int rows, int cols, const float* logits,
                                      const int32_t* labels, float grad_scale, float* loss,
                                      float* dlogits);
cudaError_t LaunchArgMax(cudaStream_t stream, int rows, int cols, const float* x, int32_t* out);

// One thread per column element / per input element (gather form: no atomics).
cudaError_t LaunchIm2Col(cudaStream_t stream, const math::ConvGeometry& g, const float* input,
                         float* col);
cudaError_t LaunchCol2Im(cudaStream_t stream, const math::ConvGeometry& g, const float* col,
                         float* input_grad);

// One thread per output element / per input element (gather form).
cudaError_t LaunchMaxPool(cudaStream_t stream, const math::PoolGeometry& g, const float* input,
                          float* output, int32_t* argmax);
cudaError_t LaunchMaxPoolGrad(cudaStream_t stream, const math::PoolGeometry& g,
                              const float* output_grad, const int32_t* argmax, float* input_grad);

// out[cols, rows] = the transpose of in[rows, cols] (math::TransposedIndex); one thread per
// output element. in and out must not overlap.
cudaError_t LaunchTranspose(cudaStream_t stream, int64_t rows, int64_t cols, const float* in,
                            float* out);

// out[i] = in[i] rounded to bf16 (common/bfloat16.h, as the CPU rounds), as the 16 bits that
// cuBLAS and cuDNN read as a bf16 value; LaunchFromBf16 converts back (exactly). in and out must
// not overlap.
cudaError_t LaunchToBf16(cudaStream_t stream, int64_t n, const float* in, uint16_t* out);
cudaError_t LaunchFromBf16(cudaStream_t stream, int64_t n, const uint16_t* in, float* out);

// Every slice of `slices` (at most math::UpdateSlices::kMax) under `rule` (device memory, read
// when the kernel runs) in one kernel: one thread per element of their concatenation.
cudaError_t LaunchApplyUpdates(cudaStream_t stream, const ps::UpdateRule* rule,
                               const math::UpdateSlices& slices);

// One thread per element; slot pointers the rule does not use may be null.
cudaError_t LaunchApplyUpdate(cudaStream_t stream, const ps::UpdateRule& rule, int64_t n,
                              const float* grad, float* value, float* slot0, float* slot1);

// Checks that this binary carries code the current device can run (the build's
// CMAKE_CUDA_ARCHITECTURES), so a mismatch is reported when the device is made, not at the
// first kernel.
cudaError_t CheckKernelImage();

}  // namespace kubetrain::worker::cuda
