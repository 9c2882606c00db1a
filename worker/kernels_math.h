// Element-wise math of the worker's kernels, written once for every backend.
//
// The CPU device calls these from plain loops; a CUDA device calls the same functions from
// `__global__` kernels (one thread per element or per row), so both backends compute the same
// numbers by construction. Everything here is header-only, allocation-free and branch-light.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define KT_HOST_DEVICE __host__ __device__
#else
#define KT_HOST_DEVICE
#endif

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
};

}  // namespace kubetrain::worker::math
