// Element-wise math of the worker's kernels, written once for every backend.
//
// The CPU device calls these from plain loops; a CUDA device calls the same functions from
// `__global__` kernels (one thread per element or per row), so both backends compute the same
// numbers by construction. Everything here is header-only, allocation-free and branch-light.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace kubetrain::worker::math {

KT_HOST_DEVICE inline float Relu(float x) { return x > 0.0f ? x : 0.0f; }

// Gradient through ReLU given its output `y`: y > 0 exactly where the input was > 0.
KT_HOST_DEVICE inline float ReluGrad(float y, float dy) { return y > 0.0f ? dy : 0.0f; }

KT_HOST_DEVICE inline float Axpy(float alpha, float x, float y) { return alpha * x + y; }

// Index of the largest of `cols` values; the first one wins ties.
KT_HOST_DEVICE inline int ArgMaxRow(const float* x, int cols) {
  int best = 0;
  for (int c = 1; c < cols; ++c) {
    if (x[c] > x[best]) best = c;
  }
  return best;
}

// Softmax cross-entropy of one row of logits against `label`, computed stably (max subtracted).
// Returns the loss -log p[label]. When `dlogits` is non-null writes (p - onehot) * grad_scale.
// Uses `expf`/`logf`, which exist on host and device.
KT_HOST_DEVICE inline float SoftmaxCrossEntropyRow(const float* logits, int cols, int label,
                                                   float grad_scale, float* dlogits) {
  float max_logit = logits[ArgMaxRow(logits, cols)];
  float sum = 0.0f;
  for (int c = 0; c < cols; ++c) sum += expf(logits[c] - max_logit);
  const float log_sum = logf(sum);
  if (dlogits != nullptr) {
    const float inv_sum = 1.0f / sum;
    for (int c = 0; c < cols; ++c) {
      const float p = expf(logits[c] - max_logit) * inv_sum;
      dlogits[c] = (p - (c == label ? 1.0f : 0.0f)) * grad_scale;
    }
  }
  return log_sum - (logits[label] - max_logit);
}

// Where element `index` (= r * cols + c) of a row-major [rows, cols] matrix lands in its
// [cols, rows] transpose. An HWIO kernel [k, k, in, filters] is the matrix [k*k*in, filters];
// its transpose is the OHWI layout [filters, k, k, in] (cuDNN's NHWC filter format, "KRSC").
KT_HOST_DEVICE inline int64_t TransposedIndex(int64_t index, int64_t rows, int64_t cols) {
  return (index % cols) * rows + index / cols;
}

// Up to kMax arrays of one optimizer update that a GPU runs as one kernel (Device::ApplyUpdates):
// element i of their concatenation is element i - begin[s] of slice s, the one with
// begin[s] <= i < begin[s + 1]. Passed to the kernel by value (about 1.3 KB of parameters).
struct UpdateSlices {
  static constexpr int kMax = 32;
  int count = 0;
  int64_t begin[kMax + 1] = {};
  const float* grad[kMax] = {};
  float* value[kMax] = {};
  float* slot0[kMax] = {};  // null where the rule keeps no such slot
  float* slot1[kMax] = {};

  KT_HOST_DEVICE int64_t total() const { return begin[count]; }
  // The slice holding element i (0 <= i < total()): the last s with begin[s] <= i, which skips
  // empty slices.
  KT_HOST_DEVICE int SliceOf(int64_t i) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (begin[mid] <= i) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }
};

// Shape of a 2-D convolution over NHWC images, shared by im2col and col2im.
//
// The column matrix has one row per output pixel (batch * out_h * out_w rows) and
// kernel * kernel * channels columns ordered (ky, kx, c), so a convolution is one GEMM of the
// column matrix with an HWIO kernel [kernel, kernel, channels, filters] and its output is NHWC.
struct ConvGeometry {
  int batch = 0;
  int height = 0;
  int width = 0;
  int channels = 0;
  int kernel = 0;
  int pad = 0;
  int stride = 1;

  KT_HOST_DEVICE int out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  KT_HOST_DEVICE int out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
  KT_HOST_DEVICE int64_t col_rows() const {
    return static_cast<int64_t>(batch) * out_height() * out_width();
  }
  KT_HOST_DEVICE int64_t col_cols() const {
    return static_cast<int64_t>(kernel) * kernel * channels;
  }
  KT_HOST_DEVICE int64_t input_size() const {
    return static_cast<int64_t>(batch) * height * width * channels;
  }

  // Input pixel (b, iy, ix) flattened to b*H*W + iy*W + ix that feeds column row `row` at
  // kernel offset (ky, kx), or -1 when that tap falls in the zero padding.
  KT_HOST_DEVICE int64_t SourcePixel(int64_t row, int ky, int kx) const {
    const int ow = out_width();
    const int oh = out_height();
    const int ox = static_cast<int>(row % ow);
    const int oy = static_cast<int>((row / ow) % oh);
    const int64_t b = row / (static_cast<int64_t>(ow) * oh);
    const int iy = oy * stride + ky - pad;
    const int ix = ox * stride + kx - pad;
    if (iy < 0 || iy >= height || ix < 0 || ix >= width) return -1;
    return (b * height + iy) * width + ix;
  }

  // Value of column element (row, col) read from NHWC `input`: the per-element form a GPU
  // thread uses for im2col.
  KT_HOST_DEVICE float Im2ColElement(const float* input, int64_t row, int64_t col) const {
    const int c = static_cast<int>(col % channels);
    const int kx = static_cast<int>((col / channels) % kernel);
    const int ky = static_cast<int>(col / (static_cast<int64_t>(channels) * kernel));
    const int64_t pixel = SourcePixel(row, ky, kx);
    return pixel < 0 ? 0.0f : input[pixel * channels + c];
  }

  // First output position (row or column) whose window covers input position `i`: the smallest
  // o >= 0 with o * stride + kernel - 1 - pad >= i.
  KT_HOST_DEVICE int FirstWindowOver(int i) const {
    const int lowest = i + pad - kernel + 1;
    return lowest <= 0 ? 0 : (lowest + stride - 1) / stride;
  }
  // Last output position whose window covers input position `i`: the largest o < `out` with
  // o * stride - pad <= i (i + pad is never negative).
  KT_HOST_DEVICE int LastWindowOver(int i, int out) const {
    const int highest = (i + pad) / stride;
    return highest < out - 1 ? highest : out - 1;
  }

  // Gradient of NHWC input element `index` under Im2Col: the sum of every column entry that read
  // it. The per-element (gather) form a GPU thread uses for col2im, so no two threads write one
  // element and no atomics are needed. The entries are added in increasing column-row order, the
  // order in which the CPU's row-by-row col2im accumulates them, so both round alike.
  KT_HOST_DEVICE float Col2ImElement(const float* col, int64_t index) const {
    const int c = static_cast<int>(index % channels);
    const int64_t pixel = index / channels;
    const int ix = static_cast<int>(pixel % width);
    const int iy = static_cast<int>((pixel / width) % height);
    const int64_t b = pixel / (static_cast<int64_t>(width) * height);
    const int oh = out_height(), ow = out_width();
    const int oy_last = LastWindowOver(iy, oh), ox_last = LastWindowOver(ix, ow);
    const int ox_first = FirstWindowOver(ix);
    float sum = 0.0f;
    for (int oy = FirstWindowOver(iy); oy <= oy_last; ++oy) {
      const int ky = iy + pad - oy * stride;
      for (int ox = ox_first; ox <= ox_last; ++ox) {
        const int kx = ix + pad - ox * stride;
        const int64_t row = (b * oh + oy) * ow + ox;
        sum += col[row * col_cols() + (static_cast<int64_t>(ky) * kernel + kx) * channels + c];
      }
    }
    return sum;
  }
};

// Shape of a 2x2, stride-2 max pool over NHWC images (odd trailing rows/columns are dropped).
struct PoolGeometry {
  int batch = 0;
  int height = 0;
  int width = 0;
  int channels = 0;

  KT_HOST_DEVICE int out_height() const { return height / 2; }
  KT_HOST_DEVICE int out_width() const { return width / 2; }
  KT_HOST_DEVICE int64_t input_size() const {
    return static_cast<int64_t>(batch) * height * width * channels;
  }
  KT_HOST_DEVICE int64_t output_size() const {
    return static_cast<int64_t>(batch) * out_height() * out_width() * channels;
  }

  // Flat NHWC index of the top-left input element of output element (b, oy, ox, c).
  KT_HOST_DEVICE int64_t WindowOrigin(int64_t b, int oy, int ox, int c) const {
    return ((b * height + 2 * oy) * width + 2 * ox) * channels + c;
  }

  // Max of the 2x2 window starting at `origin`; stores the flat input index of the winner (the
  // first in row-major window order on ties) so the backward pass can route dout to it.
  KT_HOST_DEVICE float PoolWindow(const float* input, int64_t origin, int32_t* argmax) const {
    const int64_t row = static_cast<int64_t>(width) * channels;
    const int64_t taps[4] = {origin, origin + channels, origin + row, origin + row + channels};
    int64_t best = taps[0];
    for (int t = 1; t < 4; ++t) {
      if (input[taps[t]] > input[best]) best = taps[t];
    }
    *argmax = static_cast<int32_t>(best);
    return input[best];
  }

  // PoolWindow for output element `out_index` (NHWC): the per-element form a GPU thread uses.
  KT_HOST_DEVICE float PoolElement(const float* input, int64_t out_index, int32_t* argmax) const {
    const int c = static_cast<int>(out_index % channels);
    const int64_t pixel = out_index / channels;
    const int ox = static_cast<int>(pixel % out_width());
    const int oy = static_cast<int>((pixel / out_width()) % out_height());
    const int64_t b = pixel / (static_cast<int64_t>(out_width()) * out_height());
    return PoolWindow(input, WindowOrigin(b, oy, ox, c), argmax);
  }

  // Gradient of NHWC input element `index`: the output gradient of the window it won, else 0 (as
  // for odd trailing rows and columns, which no window covers). The per-element (gather) form a
  // GPU thread uses for the backward pass: each thread writes only its own element.
  KT_HOST_DEVICE float PoolGradElement(const float* output_grad, const int32_t* argmax,
                                       int64_t index) const {
    const int c = static_cast<int>(index % channels);
    const int64_t pixel = index / channels;
    const int ix = static_cast<int>(pixel % width);
    const int iy = static_cast<int>((pixel / width) % height);
    const int64_t b = pixel / (static_cast<int64_t>(width) * height);
    const int oy = iy / 2, ox = ix / 2;
    if (oy >= out_height() || ox >= out_width()) return 0.0f;
    const int64_t out = ((b * out_height() + oy) * out_width() + ox) * channels + c;
    return argmax[out] == index ? output_grad[out] : 0.0f;
  }
};

// How column sums of a row-major [rows, cols] matrix (bias gradients) are split for a GPU, so
// that thousands of rows reduce in parallel yet always in the same order (no atomics: results
// are reproducible run to run). Rows are cut into chunks of kChunkRows; within a chunk, lane l of
// kLanes sums rows begin + l, begin + l + kLanes, ... in order; a chunk's sum adds its lane sums
// in lane order, and a column's sum adds its chunk sums in chunk order.
struct ColumnSumPlan {
  static constexpr int kChunkRows = 256;
  static constexpr int kLanes = 8;

  int rows = 0;
  int cols = 0;

  KT_HOST_DEVICE int chunks() const { return (rows + kChunkRows - 1) / kChunkRows; }
  // Row range [chunk_begin, chunk_end) of `chunk`.
  KT_HOST_DEVICE int chunk_begin(int chunk) const { return chunk * kChunkRows; }
  KT_HOST_DEVICE int chunk_end(int chunk) const {
    const int end = (chunk + 1) * kChunkRows;
    return end < rows ? end : rows;
  }
  // First row lane `lane` of `chunk` sums; it then steps by kLanes up to chunk_end.
  KT_HOST_DEVICE int lane_begin(int chunk, int lane) const { return chunk_begin(chunk) + lane; }

  // values[0] + values[stride] + ... (`count` terms) from left to right: how lane sums make a
  // chunk sum and chunk sums a column sum.
  KT_HOST_DEVICE static float AddInOrder(const float* values, int count, int64_t stride) {
    float sum = 0.0f;
    for (int i = 0; i < count; ++i) sum += values[i * stride];
    return sum;
  }

  // Sum of column `c` over the rows of lane `lane` in `chunk`.
  KT_HOST_DEVICE float LaneSum(const float* x, int chunk, int lane, int c) const {
    float sum = 0.0f;
    const int end = chunk_end(chunk);
    for (int r = lane_begin(chunk, lane); r < end; r += kLanes) {
      sum += x[static_cast<int64_t>(r) * cols + c];
    }
    return sum;
  }
};

}  // namespace kubetrain::worker::math
