#include "worker/cpu/cpu_device.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace kubetrain::worker {
namespace {

// Cache-line alignment keeps OpenBLAS and the vectorised loops on their fast paths.
constexpr size_t kAlignment = 64;

CBLAS_TRANSPOSE Trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

}  // namespace

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }
int GetBlasThreads() { return openblas_get_num_threads(); }

CpuDevice::CpuDevice(const CpuDeviceOptions& options) {
  if (options.blas_threads > 0) SetBlasThreads(options.blas_threads);
}

void* CpuDevice::AllocateBytes(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* ptr = std::aligned_alloc(kAlignment, std::max(rounded, kAlignment));
  if (ptr == nullptr) throw std::bad_alloc();
  return ptr;
}

void CpuDevice::FreeBytes(void* ptr) { std::free(ptr); }

void CpuDevice::CopyHostToDevice(const void* host, void* device, size_t bytes) {
  std::memcpy(device, host, bytes);
}

void CpuDevice::CopyDeviceToHost(const void* device, void* host, size_t bytes) {
  std::memcpy(host, device, bytes);
}

void CpuDevice::CopyDeviceToDevice(const void* src, void* dst, size_t bytes) {
  std::memmove(dst, src, bytes);
}

void CpuDevice::Fill(int64_t n, float value, float* x) { std::fill(x, x + n, value); }

void CpuDevice::Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                     const float* b, float beta, float* c) {
  const int lda = trans_a ? m : k;
  const int ldb = trans_b ? k : n;
  cblas_sgemm(CblasRowMajor, Trans(trans_a), Trans(trans_b), m, n, k, alpha, a, lda, b, ldb, beta,
              c, n);
}

void CpuDevice::Axpy(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = math::Axpy(alpha, x[i], y[i]);
}

void CpuDevice::Scale(int64_t n, float alpha, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] *= alpha;
}

void CpuDevice::AddBias(int rows, int cols, const float* bias, float* x) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] += bias[c];
  }
}

void CpuDevice::BiasGrad(int rows, int cols, const float* dy, float* db) {
  std::fill(db, db + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const float* row = dy + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) db[c] += row[c];
  }
}

void CpuDevice::Relu(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = math::Relu(x[i]);
}

void CpuDevice::ReluGrad(int64_t n, const float* y, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = math::ReluGrad(y[i], dy[i]);
}

void CpuDevice::SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                    float grad_scale, float* loss, float* dlogits) {
  for (int r = 0; r < rows; ++r) {
    const int64_t offset = static_cast<int64_t>(r) * cols;
    loss[r] = math::SoftmaxCrossEntropyRow(logits + offset, cols, labels[r], grad_scale,
                                           dlogits == nullptr ? nullptr : dlogits + offset);
  }
}

void CpuDevice::ArgMax(int rows, int cols, const float* x, int32_t* out) {
  for (int r = 0; r < rows; ++r) out[r] = math::ArgMaxRow(x + static_cast<int64_t>(r) * cols, cols);
}

// Same mapping as ConvGeometry::Im2ColElement, restructured for the CPU: for a fixed output
// pixel and kernel row, the in-bounds taps read one contiguous run of (taps * channels) floats,
// so each kernel row is one copy plus zero padding at either end.
void CpuDevice::Im2Col(const ConvGeometry& g, const float* input, float* col) {
  const int oh = g.out_height(), ow = g.out_width(), c = g.channels, k = g.kernel;
  const int64_t row_floats = static_cast<int64_t>(k) * c;
  float* out = col;
  for (int b = 0; b < g.batch; ++b) {
    const float* image = input + static_cast<int64_t>(b) * g.height * g.width * c;
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        const int x0 = ox * g.stride - g.pad;
        const int first = std::max(0, -x0), last = std::min(k, g.width - x0);  // valid kx range
        for (int ky = 0; ky < k; ++ky, out += row_floats) {
          const int iy = oy * g.stride + ky - g.pad;
          if (iy < 0 || iy >= g.height || first >= last) {
            std::fill(out, out + row_floats, 0.0f);
            continue;
          }
          std::fill(out, out + first * c, 0.0f);
          const float* src = image + (static_cast<int64_t>(iy) * g.width + x0 + first) * c;
          std::copy(src, src + (last - first) * c, out + first * c);
          std::fill(out + last * c, out + row_floats, 0.0f);
        }
      }
    }
  }
}

void CpuDevice::Col2Im(const ConvGeometry& g, const float* col, float* input_grad) {
  std::fill(input_grad, input_grad + g.input_size(), 0.0f);
  const int64_t rows = g.col_rows();
  for (int64_t row = 0; row < rows; ++row) {
    const float* in = col + row * g.col_cols();
    for (int ky = 0; ky < g.kernel; ++ky) {
      for (int kx = 0; kx < g.kernel; ++kx, in += g.channels) {
        const int64_t pixel = g.SourcePixel(row, ky, kx);
        if (pixel < 0) continue;
        float* dst = input_grad + pixel * g.channels;
        for (int c = 0; c < g.channels; ++c) dst[c] += in[c];
      }
    }
  }
}

void CpuDevice::MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                           int32_t* argmax) {
  int64_t o = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int oy = 0; oy < g.out_height(); ++oy) {
      for (int ox = 0; ox < g.out_width(); ++ox) {
        const int64_t origin = g.WindowOrigin(b, oy, ox, 0);
        for (int c = 0; c < g.channels; ++c, ++o) {
          output[o] = g.PoolWindow(input, origin + c, argmax + o);
        }
      }
    }
  }
}

void CpuDevice::MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad,
                               const int32_t* argmax, float* input_grad) {
  std::fill(input_grad, input_grad + g.input_size(), 0.0f);
  const int64_t n = g.output_size();
  for (int64_t i = 0; i < n; ++i) input_grad[argmax[i]] += output_grad[i];
}

}  // namespace kubetrain::worker
