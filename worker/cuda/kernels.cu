// The CUDA backend's kernels: thin grid-stride loops over the element math shared with the CPU
// backend (worker/core/kernels_math.h, ps/update_rule.h). Kept free of heavy headers so that nvcc,
// which compiles this file once per architecture, stays quick.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/bfloat16.h"
#include "worker/cuda/kernels.h"

namespace kubetrain::worker::cuda {
namespace {

using math::ColumnSumPlan;
using math::ConvGeometry;
using math::PoolGeometry;
using math::UpdateSlices;

constexpr int kBlock = 256;
// Grid-stride loops cover sizes beyond this many blocks, which already fill any GPU.
constexpr int64_t kMaxBlocks = int64_t{1} << 16;
// Columns per block of the column-sum kernel: one warp's worth, so a row's reads coalesce.
constexpr int kColumnsPerBlock = 32;

unsigned Blocks(int64_t n, int block = kBlock) {
  return static_cast<unsigned>(std::min<int64_t>((n + block - 1) / block, kMaxBlocks));
}

__device__ int64_t FirstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void FillKernel(int64_t n, float value, float* x) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) x[i] = value;
}

__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) y[i] = math::Axpy(alpha, x[i], y[i]);
}

__global__ void ScaleKernel(int64_t n, float alpha, float* x) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) x[i] *= alpha;
}

template <bool kRelu>
__global__ void AddBiasKernel(int64_t n, int cols, const float* __restrict__ bias,
                              float* __restrict__ x) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const float v = x[i] + bias[i % cols];
    x[i] = kRelu ? math::Relu(v) : v;
  }
}

// One block per (chunk, 32 columns), kLanes threads per column; writes each column's chunk sum
// to out[chunk * cols + c]. With kRelu it sums dx = ReluGrad(y, dy) and also stores dx.
template <bool kRelu>
__global__ void ChunkColumnSumsKernel(ColumnSumPlan plan, const float* x, const float* dy,
                                      float* dx, float* out) {
  __shared__ float lane_sums[ColumnSumPlan::kLanes][kColumnsPerBlock];
  const int chunk = static_cast<int>(blockIdx.x);
  const int c = static_cast<int>(blockIdx.y) * kColumnsPerBlock + static_cast<int>(threadIdx.x);
  const int lane = static_cast<int>(threadIdx.y);
  float sum = 0.0f;
  if (c < plan.cols) {
    if constexpr (kRelu) {
      const int end = plan.chunk_end(chunk);
      for (int r = plan.lane_begin(chunk, lane); r < end; r += ColumnSumPlan::kLanes) {
        const int64_t i = static_cast<int64_t>(r) * plan.cols + c;
        const float g = math::ReluGrad(x[i], dy[i]);
        dx[i] = g;
        sum += g;
      }
    } else {
      sum = plan.LaneSum(x, chunk, lane, c);
    }
  }
  lane_sums[lane][threadIdx.x] = sum;
  __syncthreads();
  if (lane == 0 && c < plan.cols) {
    out[static_cast<int64_t>(chunk) * plan.cols + c] = ColumnSumPlan::AddInOrder(
        &lane_sums[0][threadIdx.x], ColumnSumPlan::kLanes, kColumnsPerBlock);
  }
}

// sums[c] = the chunk sums of column c added in chunk order.
__global__ void AddChunkSumsKernel(ColumnSumPlan plan, const float* chunk_sums, float* sums) {
  for (int64_t c = FirstIndex(); c < plan.cols; c += GridStride()) {
    sums[c] = ColumnSumPlan::AddInOrder(chunk_sums + c, plan.chunks(), plan.cols);
  }
}

__global__ void ReluKernel(int64_t n, const float* x, float* y) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) y[i] = math::Relu(x[i]);
}

__global__ void ReluGradKernel(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) dx[i] = math::ReluGrad(y[i], dy[i]);
}

__global__ void SoftmaxCrossEntropyKernel(int rows, int cols, const float* __restrict__ logits,
                                          const int32_t* __restrict__ labels, float grad_scale,
                                          float* __restrict__ loss, float* __restrict__ dlogits) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    const int64_t offset = r * cols;
    loss[r] = math::SoftmaxCrossEntropyRow(logits + offset, cols, labels[r], grad_scale,
                                           dlogits == nullptr ? nullptr : dlogits + offset);
  }
}

__global__ void ArgMaxKernel(int rows, int cols, const float* __restrict__ x,
                             int32_t* __restrict__ out) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    out[r] = math::ArgMaxRow(x + r * cols, cols);
  }
}

__global__ void Im2ColKernel(ConvGeometry g, const float* __restrict__ input,
                             float* __restrict__ col) {
  const int64_t cols = g.col_cols();
  const int64_t n = g.col_rows() * cols;
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    col[i] = g.Im2ColElement(input, i / cols, i % cols);
  }
}

__global__ void Col2ImKernel(ConvGeometry g, const float* __restrict__ col,
                             float* __restrict__ input_grad) {
  const int64_t n = g.input_size();
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    input_grad[i] = g.Col2ImElement(col, i);
  }
}

__global__ void MaxPoolKernel(PoolGeometry g, const float* __restrict__ input,
                              float* __restrict__ output, int32_t* __restrict__ argmax) {
  const int64_t n = g.output_size();
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    output[i] = g.PoolElement(input, i, argmax + i);
  }
}

__global__ void MaxPoolGradKernel(PoolGeometry g, const float* __restrict__ output_grad,
                                  const int32_t* __restrict__ argmax,
                                  float* __restrict__ input_grad) {
  const int64_t n = g.input_size();
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    input_grad[i] = g.PoolGradElement(output_grad, argmax, i);
  }
}

// Gather form: output element i of the [cols, rows] transpose reads in[TransposedIndex(i)].
__global__ void TransposeKernel(int64_t rows, int64_t cols, const float* __restrict__ in,
                                float* __restrict__ out) {
  const int64_t n = rows * cols;
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    out[i] = in[math::TransposedIndex(i, cols, rows)];
  }
}

__global__ void ToBf16Kernel(int64_t n, const float* __restrict__ in, uint16_t* __restrict__ out) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = FloatToBf16Bits(in[i]);
}

__global__ void FromBf16Kernel(int64_t n, const uint16_t* __restrict__ in,
                               float* __restrict__ out) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = Bf16BitsToFloat(in[i]);
}

__global__ void ApplyUpdateKernel(ps::UpdateRule rule, int64_t n, const float* __restrict__ grad,
                                  float* __restrict__ value, float* __restrict__ slot0,
                                  float* __restrict__ slot1) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    ps::update::ApplyElement(rule, grad[i], value[i], slot0 == nullptr ? nullptr : slot0 + i,
                             slot1 == nullptr ? nullptr : slot1 + i);
  }
}

// The rule is read from device memory at run time: a captured update replays with the rule
// its step staged (Device::ApplyUpdates).
__global__ void ApplyUpdatesKernel(const ps::UpdateRule* __restrict__ rule_on_device,
                                   UpdateSlices s) {
  const ps::UpdateRule rule = *rule_on_device;
  const int64_t n = s.total();
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int k = s.SliceOf(i);
    const int64_t j = i - s.begin[k];
    ps::update::ApplyElement(rule, s.grad[k][j], s.value[k][j],
                             s.slot0[k] == nullptr ? nullptr : s.slot0[k] + j,
                             s.slot1[k] == nullptr ? nullptr : s.slot1[k] + j);
  }
}

template <bool kRelu>
cudaError_t LaunchColumnSumsImpl(cudaStream_t stream, int rows, int cols, const float* x,
                                 const float* dy, float* dx, float* scratch, float* sums) {
  if (cols <= 0) return cudaSuccess;
  const ColumnSumPlan plan{rows, cols};
  const int chunks = plan.chunks();
  if (chunks == 0) return LaunchFill(stream, cols, 0.0f, sums);  // no rows: every sum is 0
  const dim3 grid(static_cast<unsigned>(chunks),
                  static_cast<unsigned>((cols + kColumnsPerBlock - 1) / kColumnsPerBlock));
  const dim3 block(kColumnsPerBlock, ColumnSumPlan::kLanes);
  ChunkColumnSumsKernel<kRelu>
      <<<grid, block, 0, stream>>>(plan, x, dy, dx, chunks == 1 ? sums : scratch);
  if (chunks > 1) {
    AddChunkSumsKernel<<<Blocks(cols), kBlock, 0, stream>>>(plan, scratch, sums);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFill(cudaStream_t stream, int64_t n, float value, float* x) {
  if (n <= 0) return cudaSuccess;
  FillKernel<<<Blocks(n), kBlock, 0, stream>>>(n, value, x);
  return cudaGetLastError();
}

cudaError_t LaunchAxpy(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y) {
  if (n <= 0) return cudaSuccess;
  AxpyKernel<<<Blocks(n), kBlock, 0, stream>>>(n, alpha, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchScale(cudaStream_t stream, int64_t n, float alpha, float* x) {
  if (n <= 0) return cudaSuccess;
  ScaleKernel<<<Blocks(n), kBlock, 0, stream>>>(n, alpha, x);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(cudaStream_t stream, int rows, int cols, const float* bias, bool relu,
                          float* x) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n <= 0) return cudaSuccess;
  if (relu) {
    AddBiasKernel<true><<<Blocks(n), kBlock, 0, stream>>>(n, cols, bias, x);
  } else {
    AddBiasKernel<false><<<Blocks(n), kBlock, 0, stream>>>(n, cols, bias, x);
  }
  return cudaGetLastError();
}

int64_t ColumnSumScratch(int rows, int cols) {
  const ColumnSumPlan plan{rows, cols};
  return plan.chunks() > 1 ? static_cast<int64_t>(plan.chunks()) * cols : 0;
}

cudaError_t LaunchColumnSums(cudaStream_t stream, int rows, int cols, const float* x,
                             float* scratch, float* sums) {
  return LaunchColumnSumsImpl<false>(stream, rows, cols, x, nullptr, nullptr, scratch, sums);
}

cudaError_t LaunchReluColumnSums(cudaStream_t stream, int rows, int cols, const float* y,
                                 const float* dy, float* dx, float* scratch, float* db) {
  return LaunchColumnSumsImpl<true>(stream, rows, cols, y, dy, dx, scratch, db);
}

cudaError_t LaunchRelu(cudaStream_t stream, int64_t n, const float* x, float* y) {
  if (n <= 0) return cudaSuccess;
  ReluKernel<<<Blocks(n), kBlock, 0, stream>>>(n, x, y);
  return cudaGetLastError();
}

cudaError_t LaunchReluGrad(cudaStream_t stream, int64_t n, const float* y, const float* dy,
                           float* dx) {
  if (n <= 0) return cudaSuccess;
  ReluGradKernel<<<Blocks(n), kBlock, 0, stream>>>(n, y, dy, dx);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropy(cudaStream_t stream, int rows, int cols, const float* logits,
                                      const int32_t* labels, float grad_scale, float* loss,
                                      float* dlogits) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kRowBlock = 128;
  SoftmaxCrossEntropyKernel<<<Blocks(rows, kRowBlock), kRowBlock, 0, stream>>>(
      rows, cols, logits, labels, grad_scale, loss, dlogits);
  return cudaGetLastError();
}

cudaError_t LaunchArgMax(cudaStream_t stream, int rows, int cols, const float* x, int32_t* out) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kRowBlock = 128;
  ArgMaxKernel<<<Blocks(rows, kRowBlock), kRowBlock, 0, stream>>>(rows, cols, x, out);
  return cudaGetLastError();
}

cudaError_t LaunchIm2Col(cudaStream_t stream, const ConvGeometry& g, const float* input,
                         float* col) {
  const int64_t n = g.col_rows() * g.col_cols();
  if (n <= 0) return cudaSuccess;
  Im2ColKernel<<<Blocks(n), kBlock, 0, stream>>>(g, input, col);
  return cudaGetLastError();
}

cudaError_t LaunchCol2Im(cudaStream_t stream, const ConvGeometry& g, const float* col,
                         float* input_grad) {
  const int64_t n = g.input_size();
  if (n <= 0) return cudaSuccess;
  Col2ImKernel<<<Blocks(n), kBlock, 0, stream>>>(g, col, input_grad);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPool(cudaStream_t stream, const PoolGeometry& g, const float* input,
                          float* output, int32_t* argmax) {
  const int64_t n = g.output_size();
  if (n <= 0) return cudaSuccess;
  MaxPoolKernel<<<Blocks(n), kBlock, 0, stream>>>(g, input, output, argmax);
  return cudaGetLastError();
}

cudaError_t LaunchMaxPoolGrad(cudaStream_t stream, const PoolGeometry& g, const float* output_grad,
                              const int32_t* argmax, float* input_grad) {
  const int64_t n = g.input_size();
  if (n <= 0) return cudaSuccess;
  MaxPoolGradKernel<<<Blocks(n), kBlock, 0, stream>>>(g, output_grad, argmax, input_grad);
  return cudaGetLastError();
}

cudaError_t LaunchApplyUpdate(cudaStream_t stream, const ps::UpdateRule& rule, int64_t n,
                              const float* grad, float* value, float* slot0, float* slot1) {
  if (n <= 0) return cudaSuccess;
  ApplyUpdateKernel<<<Blocks(n), kBlock, 0, stream>>>(rule, n, grad, value, slot0, slot1);
  return cudaGetLastError();
}

cudaError_t LaunchApplyUpdates(cudaStream_t stream, const ps::UpdateRule* rule,
                               const UpdateSlices& slices) {
  const int64_t n = slices.total();
  if (n <= 0) return cudaSuccess;
  ApplyUpdatesKernel<<<Blocks(n), kBlock, 0, stream>>>(rule, slices);
  return cudaGetLastError();
}

cudaError_t LaunchTranspose(cudaStream_t stream, int64_t rows, int64_t cols, const float* in,
                            float* out) {
  const int64_t n = rows * cols;
  if (n <= 0) return cudaSuccess;
  TransposeKernel<<<Blocks(n), kBlock, 0, stream>>>(rows, cols, in, out);
  return cudaGetLastError();
}

cudaError_t LaunchToBf16(cudaStream_t stream, int64_t n, const float* in, uint16_t* out) {
  if (n <= 0) return cudaSuccess;
  ToBf16Kernel<<<Blocks(n), kBlock, 0, stream>>>(n, in, out);
  return cudaGetLastError();
}

cudaError_t LaunchFromBf16(cudaStream_t stream, int64_t n, const uint16_t* in, float* out) {
  if (n <= 0) return cudaSuccess;
  FromBf16Kernel<<<Blocks(n), kBlock, 0, stream>>>(n, in, out);
  return cudaGetLastError();
}

cudaError_t CheckKernelImage() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, FillKernel);
}

}  // namespace kubetrain::worker::cuda
