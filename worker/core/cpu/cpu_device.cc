#include "worker/core/cpu/cpu_device.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bfloat16.h"

namespace kubetrain::worker {
namespace {

// Cache-line alignment keeps OpenBLAS and the vectorised loops on their fast paths.
constexpr size_t kAlignment = 64;

CBLAS_TRANSPOSE Trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

// `n` values of `x` rounded to bf16, in `out` (grown as needed and kept for the next call).
const float* RoundedToBf16(const float* x, int64_t n, std::vector<float>& out) {
  if (out.size() < static_cast<size_t>(n)) out.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToBf16(x[i]);
  return out.data();
}

}  // namespace

// The hottest loops (the *Loop functions below) get an AVX2 clone beside the baseline x86-64 one,
// chosen once at load time from the CPU's features (function multiversioning): the committed
// build stays portable to any x86-64 and still uses 256-bit vectors where they exist, which makes
// col2im 40% and the fused bias/ReLU kernels 15-30% faster. AVX2 only, not FMA: both clones
// round identically. (Im2Col gains nothing: it is bound by its stores.)
// Not under ThreadSanitizer: the clones' resolvers run while the program is being loaded, before
// TSan's runtime is up, and its instrumentation of them crashes.
#if defined(__SANITIZE_THREAD__)
#define KT_CPU_CLONES
#endif
#if defined(__x86_64__) && defined(__has_attribute) && !defined(KT_CPU_CLONES)
#if __has_attribute(target_clones)
#define KT_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef KT_CPU_CLONES
#define KT_CPU_CLONES
#endif

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }
int GetBlasThreads() { return openblas_get_num_threads(); }

std::string BlasCoreName() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "unknown";
}

std::string BlasKernelAdvice(absl::string_view core, bool avx2, bool avx512, bool chosen) {
  if (chosen || !avx2) return "";
  // The kernel sets of this OpenBLAS that use 256-bit FMA or wider.
  for (absl::string_view fit : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == fit) return "";
  }
  const char* better = avx512 ? "SkylakeX" : "Haswell";
  return absl::StrCat("OpenBLAS runs its ", core, " kernels, which use none of this CPU's ",
                      avx512 ? "AVX-512" : "AVX2", " units; set OPENBLAS_CORETYPE=", better,
                      " in the task's environment for several times faster matrix products");
}

std::string BlasKernelAdviceHere() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return BlasKernelAdvice(BlasCoreName(), avx2, avx512,
                          std::getenv("OPENBLAS_CORETYPE") != nullptr);
#else
  return "";
#endif
}

CpuDevice::CpuDevice(const CpuDeviceOptions& options) : precision_(options.precision) {
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
  if (precision_ == Precision::kBFloat16) {
    // Each product of two bf16 values is exact in float32, so float32 GEMM over the rounded
    // operands is a bf16 GEMM with float32 sums (docs/decisions/0011-bf16-mixed-precision.md).
    // Per thread: threads may issue GEMMs on disjoint buffers at once.
    thread_local std::vector<float> a16, b16;
    a = RoundedToBf16(a, int64_t{m} * k, a16);
    b = RoundedToBf16(b, int64_t{k} * n, b16);
  }
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

namespace {

KT_CPU_CLONES void AddBiasReluLoop(int rows, int cols, const float* bias, float* x) {
  for (int r = 0; r < rows; ++r) {
    float* row = x + static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) row[c] = math::Relu(row[c] + bias[c]);
  }
}

}  // namespace

void CpuDevice::AddBiasRelu(int rows, int cols, const float* bias, float* x) {
  AddBiasReluLoop(rows, cols, bias, x);
}

namespace {

KT_CPU_CLONES void ReluBiasGradLoop(int rows, int cols, const float* y, const float* dy, float* dx,
                                    float* db) {
  std::fill(db, db + cols, 0.0f);
  for (int r = 0; r < rows; ++r) {
    const int64_t offset = static_cast<int64_t>(r) * cols;
    for (int c = 0; c < cols; ++c) {
      const float g = math::ReluGrad(y[offset + c], dy[offset + c]);
      dx[offset + c] = g;
      db[c] += g;
    }
  }
}

}  // namespace

void CpuDevice::ReluBiasGrad(int rows, int cols, const float* y, const float* dy, float* dx,
                             float* db) {
  ReluBiasGradLoop(rows, cols, y, dy, dx, db);
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

namespace {

// One kernel row of one column row: `first * c` zeros, the (last - first) in-bounds taps copied
// from `src` (already offset to tap `first`), zeros up to `k * c`. Plain loops rather than
// memset/memcpy calls: with few channels the runs are a handful of floats (5 for a 5x5 kernel
// over one channel), where the call overhead would dominate.
inline void Im2ColRun(const float* __restrict src, int first, int last, int k, int c,
                      float* __restrict out) {
  const int lo = first * c, hi = last * c, end = k * c;
  for (int i = 0; i < lo; ++i) out[i] = 0.0f;
  for (int i = lo; i < hi; ++i) out[i] = src[i - lo];
  for (int i = hi; i < end; ++i) out[i] = 0.0f;
}

}  // namespace

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
            Im2ColRun(nullptr, 0, 0, k, c, out);
            continue;
          }
          const float* src = image + (static_cast<int64_t>(iy) * g.width + x0 + first) * c;
          Im2ColRun(src, first, last, k, c, out);
        }
      }
    }
  }
}

namespace {

// The adjoint of Im2Col walked in the same order: each kernel row of a column row adds one
// contiguous run of (taps * channels) floats onto the image. Every input element receives its
// contributions in column-row order, as in the per-element definition.
KT_CPU_CLONES void Col2ImLoop(const ConvGeometry& g, const float* col, float* input_grad) {
  std::fill(input_grad, input_grad + g.input_size(), 0.0f);
  const int oh = g.out_height(), ow = g.out_width(), c = g.channels, k = g.kernel;
  const int64_t row_floats = static_cast<int64_t>(k) * c;
  const float* in = col;
  for (int b = 0; b < g.batch; ++b) {
    float* image = input_grad + static_cast<int64_t>(b) * g.height * g.width * c;
    for (int oy = 0; oy < oh; ++oy) {
      for (int ox = 0; ox < ow; ++ox) {
        const int x0 = ox * g.stride - g.pad;
        const int first = std::max(0, -x0), last = std::min(k, g.width - x0);  // valid kx range
        for (int ky = 0; ky < k; ++ky, in += row_floats) {
          const int iy = oy * g.stride + ky - g.pad;
          if (iy < 0 || iy >= g.height || first >= last) continue;
          float* dst = image + (static_cast<int64_t>(iy) * g.width + x0 + first) * c;
          const float* src = in + first * c;
          const int64_t n = static_cast<int64_t>(last - first) * c;
          for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
        }
      }
    }
  }
}

}  // namespace

void CpuDevice::Col2Im(const ConvGeometry& g, const float* col, float* input_grad) {
  Col2ImLoop(g, col, input_grad);
}

namespace {

// One 2x2 window across `c` channels: the taps are compared in PoolWindow's order with the same
// strict '>' (the first tap wins ties). Restrict-qualified and branch-free so it vectorises.
inline void PoolWindowChannels(const float* __restrict t0, const float* __restrict t1,
                               const float* __restrict t2, const float* __restrict t3, int32_t i0,
                               int32_t i1, int32_t i2, int32_t i3, int c, float* __restrict out,
                               int32_t* __restrict winner) {
  for (int ch = 0; ch < c; ++ch) {
    float best = t0[ch];
    int32_t w = i0 + ch;
    w = t1[ch] > best ? i1 + ch : w;
    best = t1[ch] > best ? t1[ch] : best;
    w = t2[ch] > best ? i2 + ch : w;
    best = t2[ch] > best ? t2[ch] : best;
    w = t3[ch] > best ? i3 + ch : w;
    best = t3[ch] > best ? t3[ch] : best;
    out[ch] = best;
    winner[ch] = w;
  }
}

// Calls visit(o, taps) for every 2x2 window, in output order: `o` is the window's offset in the
// output, channels innermost, and `taps` the offsets of its four inputs (top-left, top-right,
// bottom-left, bottom-right) at channel 0. Inlined into each clone of its callers.
template <typename Visit>
[[gnu::always_inline]] inline void ForEachPoolWindow(const PoolGeometry& g, Visit&& visit) {
  const int c = g.channels;
  const int64_t row = static_cast<int64_t>(g.width) * c;
  int64_t o = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int oy = 0; oy < g.out_height(); ++oy) {
      for (int ox = 0; ox < g.out_width(); ++ox, o += c) {
        const int64_t origin = g.WindowOrigin(b, oy, ox, 0);
        const int64_t taps[4] = {origin, origin + c, origin + row, origin + row + c};
        visit(o, taps);
      }
    }
  }
}

// Window by window with the channels innermost, so the compares vectorise across channels.
KT_CPU_CLONES void MaxPoolLoop(const PoolGeometry& g, const float* input, float* output,
                               int32_t* argmax) {
  ForEachPoolWindow(
      g, [&](int64_t o, const int64_t(&t)[4]) __attribute__((always_inline)) {
        PoolWindowChannels(input + t[0], input + t[1], input + t[2], input + t[3],
                           static_cast<int32_t>(t[0]), static_cast<int32_t>(t[1]),
                           static_cast<int32_t>(t[2]), static_cast<int32_t>(t[3]), g.channels,
                           output + o, argmax + o);
      });
}

}  // namespace

void CpuDevice::MaxPool2x2(const PoolGeometry& g, const float* input, float* output,
                           int32_t* argmax) {
  MaxPoolLoop(g, input, output, argmax);
}

namespace {

// dst[ch] = dout[ch] where tap `index + ch` won its window, else 0.
inline void RouteToWinner(const float* __restrict dout, const int32_t* __restrict winner,
                          int32_t index, int c, float* __restrict dst) {
  for (int ch = 0; ch < c; ++ch) {
    const float d = dout[ch];  // loaded unconditionally so the select is branch-free
    dst[ch] = winner[ch] == index + ch ? d : 0.0f;
  }
}

// Writes every window's four taps directly (dout on the winner, zero elsewhere) instead of
// zero-filling the input gradient and scattering: one pass over memory. Only odd trailing rows
// or columns, which no window covers, need a fill first.
KT_CPU_CLONES void MaxPoolGradLoop(const PoolGeometry& g, const float* output_grad,
                                   const int32_t* argmax, float* input_grad) {
  if (g.height % 2 != 0 || g.width % 2 != 0) {
    std::fill(input_grad, input_grad + g.input_size(), 0.0f);
  }
  ForEachPoolWindow(
      g, [&](int64_t o, const int64_t(&taps)[4]) __attribute__((always_inline)) {
        for (int64_t tap : taps) {
          RouteToWinner(output_grad + o, argmax + o, static_cast<int32_t>(tap), g.channels,
                        input_grad + tap);
        }
      });
}

}  // namespace

void CpuDevice::MaxPool2x2Grad(const PoolGeometry& g, const float* output_grad,
                               const int32_t* argmax, float* input_grad) {
  MaxPoolGradLoop(g, output_grad, argmax, input_grad);
}

void CpuDevice::ApplyUpdate(const ps::UpdateRule& rule, int64_t n, const float* grad, float* value,
                            float* slot0, float* slot1) {
  ps::update::ApplyLoop(rule, n, grad, value, slot0, slot1);
}

}  // namespace kubetrain::worker
