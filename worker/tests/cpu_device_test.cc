// Every CPU kernel against a naive double-precision reference written independently here.
#include "worker/core/cpu/cpu_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/bfloat16.h"
#include "worker/core/random.h"
#include "worker/tests/random_images.h"

namespace kubetrain::worker {
namespace {

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << "at " << i;
  }
}

class CpuDeviceTest : public testing::Test {
 protected:
  CpuDevice device_;
};

TEST_F(CpuDeviceTest, PinsOpenBlasToOneThreadByDefault) { EXPECT_EQ(GetBlasThreads(), 1); }

TEST(BlasKernels, OldKernelsOnAVectorCpuGetAdviceNamingTheCoreType) {
  // What Debian 12's OpenBLAS picks on a Xeon it does not know: SSE3 kernels.
  const std::string on_avx512 = BlasKernelAdvice("Prescott", true, true, false);
  EXPECT_NE(on_avx512.find("OpenBLAS runs its Prescott kernels"), std::string::npos) << on_avx512;
  EXPECT_NE(on_avx512.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << on_avx512;
  const std::string on_avx2 = BlasKernelAdvice("Sandybridge", true, false, false);
  EXPECT_NE(on_avx2.find("OPENBLAS_CORETYPE=Haswell"), std::string::npos) << on_avx2;
}

TEST(BlasKernels, NoAdviceWhereTheKernelsFitOrTheUserChose) {
  EXPECT_EQ(BlasKernelAdvice("SkylakeX", true, true, false), "");
  EXPECT_EQ(BlasKernelAdvice("Haswell", true, true, false), "");  // AVX2 kernels: a fair choice
  EXPECT_EQ(BlasKernelAdvice("Zen", true, false, false), "");
  EXPECT_EQ(BlasKernelAdvice("Prescott", false, false, false), "");  // nothing better to run
  EXPECT_EQ(BlasKernelAdvice("Prescott", true, true, true), "");     // OPENBLAS_CORETYPE is set
  EXPECT_FALSE(BlasCoreName().empty());
}

TEST_F(CpuDeviceTest, BufferIsAlignedAndMovable) {
  Tensor a(device_, {3, 5});
  EXPECT_EQ(a.size(), 15);
  EXPECT_EQ(a.bytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  float* raw = a.data();
  Tensor b = std::move(a);
  EXPECT_EQ(b.data(), raw);
  EXPECT_EQ(b.shape(), (Shape{3, 5}));
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
}

TEST_F(CpuDeviceTest, CopiesAndFill) {
  const std::vector<float> host = RandomVector(10, 1);
  Tensor a(device_, {10}), b(device_, {10});
  device_.Upload(host.data(), a, 10);
  device_.CopyDeviceToDevice(a.data(), b.data(), a.bytes());
  std::vector<float> back(10);
  device_.Download(b, back.data(), 10);
  EXPECT_EQ(back, host);
  device_.Fill(10, 2.5f, b.data());
  device_.Download(b, back.data(), 10);
  EXPECT_EQ(back, std::vector<float>(10, 2.5f));
}

struct GemmCase {
  bool trans_a;
  bool trans_b;
};

class GemmTest : public CpuDeviceTest, public testing::WithParamInterface<GemmCase> {};

TEST_P(GemmTest, MatchesNaiveProduct) {
  const auto [ta, tb] = GetParam();
  const int m = 7, n = 5, k = 9;
  const float alpha = 1.5f, beta = -0.5f;
  const std::vector<float> a = RandomVector(m * k, 2), b = RandomVector(k * n, 3);
  std::vector<float> c = RandomVector(m * n, 4);
  std::vector<double> want(m * n);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        sum += av * bv;
      }
      want[i * n + j] = alpha * sum + beta * c[i * n + j];
    }
  }
  device_.Gemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, c.data());
  ExpectNear(c, want, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTest,
                         testing::Values(GemmCase{false, false}, GemmCase{true, false},
                                         GemmCase{false, true}, GemmCase{true, true}));

// --precision=bf16: a GEMM's operands are rounded to bf16 and the products summed in float32, so
// the result is the float32 GEMM of the rounded operands, bit for bit, and within bf16's
// rounding (2^-8 relative per operand) of the float32 product; alpha and beta stay float32.
TEST_P(GemmTest, Bf16RoundsTheOperandsAndSumsInFloat32) {
  const auto [ta, tb] = GetParam();
  const int m = 33, n = 17, k = 129;
  const float alpha = 1.5f, beta = -0.5f;
  const std::vector<float> a = RandomVector(m * k, 5), b = RandomVector(k * n, 6);
  const std::vector<float> c = RandomVector(m * n, 7);
  std::vector<float> a16 = a, b16 = b;
  for (float& x : a16) x = RoundToBf16(x);
  for (float& x : b16) x = RoundToBf16(x);
  ASSERT_NE(a16, a) << "the operands must hold values bf16 cannot";

  CpuDevice bf16({.precision = Precision::kBFloat16});
  std::vector<float> got = c, rounded_first = c, exact = c;
  bf16.Gemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, got.data());
  device_.Gemm(ta, tb, m, n, k, alpha, a16.data(), b16.data(), beta, rounded_first.data());
  device_.Gemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, exact.data());
  EXPECT_EQ(got, rounded_first);
  EXPECT_NE(got, exact);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double magnitude = 0.0;  // sum of |a||b|: what the rounding error scales with
      for (int p = 0; p < k; ++p) {
        magnitude += std::fabs((ta ? a[p * m + i] : a[i * k + p]) *
                               static_cast<double>(tb ? b[j * k + p] : b[p * n + j]));
      }
      ASSERT_NEAR(got[i * n + j], exact[i * n + j], alpha * magnitude * 2.0 * std::ldexp(1.0, -8))
          << "at " << i << "," << j;
    }
  }
}

TEST_F(CpuDeviceTest, AxpyAndScale) {
  std::vector<float> x = RandomVector(33, 5), y = RandomVector(33, 6);
  std::vector<double> want(33);
  for (int i = 0; i < 33; ++i) want[i] = 0.5 * (-2.0 * x[i] + y[i]);
  device_.Axpy(33, -2.0f, x.data(), y.data());
  device_.Scale(33, 0.5f, y.data());
  ExpectNear(y, want, 1e-6);
}

TEST_F(CpuDeviceTest, AddBiasAndBiasGrad) {
  const int rows = 4, cols = 6;
  std::vector<float> x = RandomVector(rows * cols, 7);
  const std::vector<float> bias = RandomVector(cols, 8);
  std::vector<double> want(rows * cols), want_db(cols, 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      want[r * cols + c] = x[r * cols + c] + bias[c];
      want_db[c] += x[r * cols + c];
    }
  }
  std::vector<float> db(cols, 123.0f);  // overwritten, not accumulated
  device_.BiasGrad(rows, cols, x.data(), db.data());
  ExpectNear(db, want_db, 1e-6);
  device_.AddBias(rows, cols, bias.data(), x.data());
  ExpectNear(x, want, 1e-6);
}

// The fused kernels against the naive reference, for the CPU override and for the Device
// defaults that compose AddBias/Relu and ReluGrad/BiasGrad (what a backend without an override
// runs).
TEST_F(CpuDeviceTest, FusedBiasReluForwardAndBackward) {
  const int rows = 5, cols = 7;
  const std::vector<float> x = RandomVector(rows * cols, 18), bias = RandomVector(cols, 19);
  const std::vector<float> dy = RandomVector(rows * cols, 20);
  std::vector<double> want_y(rows * cols), want_dx(rows * cols), want_db(cols, 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int i = r * cols + c;
      const float z = x[i] + bias[c];
      want_y[i] = z > 0 ? z : 0.0;
      want_dx[i] = z > 0 ? dy[i] : 0.0;
      want_db[c] += want_dx[i];
    }
  }
  for (const bool use_default : {false, true}) {
    SCOPED_TRACE(use_default ? "Device defaults" : "CpuDevice");
    Device& device = device_;
    std::vector<float> y = x, dx(rows * cols), db(cols, 123.0f);  // db is overwritten
    if (use_default) {
      device.Device::AddBiasRelu(rows, cols, bias.data(), y.data());
      device.Device::ReluBiasGrad(rows, cols, y.data(), dy.data(), dx.data(), db.data());
    } else {
      device.AddBiasRelu(rows, cols, bias.data(), y.data());
      device.ReluBiasGrad(rows, cols, y.data(), dy.data(), dx.data(), db.data());
    }
    ExpectNear(y, want_y, 0);
    ExpectNear(dx, want_dx, 0);
    ExpectNear(db, want_db, 1e-6);
    std::vector<float> in_place = dy;  // dy and dx may alias
    device.ReluBiasGrad(rows, cols, y.data(), in_place.data(), in_place.data(), db.data());
    ExpectNear(in_place, want_dx, 0);
  }
}

TEST_F(CpuDeviceTest, ReluForwardAndBackward) {
  const std::vector<float> x = RandomVector(50, 9), dy = RandomVector(50, 10);
  std::vector<float> y(50), dx(50);
  device_.Relu(50, x.data(), y.data());
  device_.ReluGrad(50, y.data(), dy.data(), dx.data());
  std::vector<double> want_y(50), want_dx(50);
  for (int i = 0; i < 50; ++i) {
    want_y[i] = x[i] > 0 ? x[i] : 0.0;
    want_dx[i] = x[i] > 0 ? dy[i] : 0.0;
  }
  ExpectNear(y, want_y, 0);
  ExpectNear(dx, want_dx, 0);
}

TEST_F(CpuDeviceTest, SoftmaxCrossEntropyMatchesReference) {
  const int rows = 5, cols = 4;
  std::vector<float> logits = RandomVector(rows * cols, 11);
  logits[0] = 80.0f;  // large logits must not overflow
  const std::vector<int32_t> labels = {0, 3, 1, 2, 3};
  std::vector<float> loss(rows), grad(rows * cols);
  device_.SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(), 0.2f, loss.data(),
                              grad.data());
  std::vector<double> want_loss(rows), want_grad(rows * cols);
  for (int r = 0; r < rows; ++r) {
    double max = -1e300, sum = 0.0;
    for (int c = 0; c < cols; ++c) max = std::max<double>(max, logits[r * cols + c]);
    for (int c = 0; c < cols; ++c) sum += std::exp(logits[r * cols + c] - max);
    want_loss[r] = std::log(sum) - (logits[r * cols + labels[r]] - max);
    for (int c = 0; c < cols; ++c) {
      const double p = std::exp(logits[r * cols + c] - max) / sum;
      want_grad[r * cols + c] = 0.2 * (p - (c == labels[r] ? 1.0 : 0.0));
    }
  }
  ExpectNear(loss, want_loss, 1e-5);
  ExpectNear(grad, want_grad, 1e-6);
  // Loss only: the gradient pointer may be null.
  std::vector<float> loss_only(rows);
  device_.SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(), 1.0f, loss_only.data(),
                              nullptr);
  EXPECT_EQ(loss_only, loss);
}

TEST_F(CpuDeviceTest, ArgMaxPicksLargestFirstOnTies) {
  const std::vector<float> x = {1, 3, 2, /**/ 5, 5, 0, /**/ -1, -2, -0.5};
  std::vector<int32_t> out(3);
  device_.ArgMax(3, 3, x.data(), out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 0, 2}));
}

// Direct NHWC convolution with an HWIO kernel, the definition im2col + GEMM must reproduce.
std::vector<double> NaiveConv(const ConvGeometry& g, const std::vector<float>& in,
                              const std::vector<float>& w, int filters) {
  const int oh = g.out_height(), ow = g.out_width();
  std::vector<double> out(static_cast<size_t>(g.batch) * oh * ow * filters, 0.0);
  for (int b = 0; b < g.batch; ++b)
    for (int oy = 0; oy < oh; ++oy)
      for (int ox = 0; ox < ow; ++ox)
        for (int f = 0; f < filters; ++f) {
          double sum = 0.0;
          for (int ky = 0; ky < g.kernel; ++ky)
            for (int kx = 0; kx < g.kernel; ++kx)
              for (int c = 0; c < g.channels; ++c) {
                const int iy = oy * g.stride + ky - g.pad, ix = ox * g.stride + kx - g.pad;
                if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width) continue;
                sum +=
                    static_cast<double>(in[((b * g.height + iy) * g.width + ix) * g.channels + c]) *
                    w[((ky * g.kernel + kx) * g.channels + c) * filters + f];
              }
          out[((b * oh + oy) * ow + ox) * filters + f] = sum;
        }
  return out;
}

TEST_F(CpuDeviceTest, Im2ColTimesKernelIsDirectConvolution) {
  for (const ConvGeometry g : {ConvGeometry{2, 6, 5, 3, 5, 2, 1}, ConvGeometry{1, 7, 7, 2, 3, 0, 2},
                               ConvGeometry{3, 4, 4, 1, 3, 1, 1}}) {
    const int filters = 4;
    const std::vector<float> in = RandomVector(g.input_size(), 12);
    const std::vector<float> w = RandomVector(g.col_cols() * filters, 13);
    std::vector<float> col(g.col_rows() * g.col_cols(), 99.0f);
    device_.Im2Col(g, in.data(), col.data());
    std::vector<float> out(g.col_rows() * filters);
    device_.Gemm(false, false, static_cast<int>(g.col_rows()), filters,
                 static_cast<int>(g.col_cols()), 1.0f, col.data(), w.data(), 0.0f, out.data());
    ExpectNear(out, NaiveConv(g, in, w, filters), 1e-5);
    // The per-element form (what a GPU thread computes) agrees with the CPU's run copies.
    for (int64_t r = 0; r < g.col_rows(); ++r)
      for (int64_t c = 0; c < g.col_cols(); ++c)
        ASSERT_EQ(col[r * g.col_cols() + c], g.Im2ColElement(in.data(), r, c));
  }
}

TEST_F(CpuDeviceTest, Col2ImIsTheAdjointOfIm2Col) {
  const ConvGeometry g{2, 5, 6, 3, 3, 1, 1};
  const std::vector<float> x = RandomVector(g.input_size(), 14);
  const std::vector<float> y = RandomVector(g.col_rows() * g.col_cols(), 15);
  std::vector<float> col(y.size()), back(x.size(), 42.0f);  // back is overwritten
  device_.Im2Col(g, x.data(), col.data());
  device_.Col2Im(g, y.data(), back.data());
  double lhs = 0.0, rhs = 0.0;  // <Im2Col x, y> == <x, Col2Im y>
  for (size_t i = 0; i < y.size(); ++i) lhs += static_cast<double>(col[i]) * y[i];
  for (size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * back[i];
  EXPECT_NEAR(lhs, rhs, 1e-4 * (1.0 + std::fabs(lhs)));
  // And element by element against a scatter written from the definition.
  std::vector<double> want(x.size(), 0.0);
  for (int64_t r = 0; r < g.col_rows(); ++r)
    for (int ky = 0; ky < g.kernel; ++ky)
      for (int kx = 0; kx < g.kernel; ++kx)
        for (int c = 0; c < g.channels; ++c) {
          const int64_t p = g.SourcePixel(r, ky, kx);
          if (p >= 0)
            want[p * g.channels + c] += y[r * g.col_cols() + (ky * g.kernel + kx) * g.channels + c];
        }
  ExpectNear(back, want, 1e-5);
}

TEST_F(CpuDeviceTest, MaxPoolForwardAndBackward) {
  const PoolGeometry g{2, 5, 4, 3};  // odd height: the last row is dropped
  const std::vector<float> in = RandomVector(g.input_size(), 16);
  const std::vector<float> dout = RandomVector(g.output_size(), 17);
  std::vector<float> out(g.output_size()), din(g.input_size(), 7.0f);
  std::vector<int32_t> argmax(g.output_size());
  device_.MaxPool2x2(g, in.data(), out.data(), argmax.data());
  device_.MaxPool2x2Grad(g, dout.data(), argmax.data(), din.data());
  std::vector<double> want_out(out.size()), want_din(in.size(), 0.0);
  for (int b = 0; b < g.batch; ++b)
    for (int oy = 0; oy < g.out_height(); ++oy)
      for (int ox = 0; ox < g.out_width(); ++ox)
        for (int c = 0; c < g.channels; ++c) {
          int best = -1;
          for (int dy = 0; dy < 2; ++dy)
            for (int dx = 0; dx < 2; ++dx) {
              const int i = ((b * g.height + 2 * oy + dy) * g.width + 2 * ox + dx) * g.channels + c;
              if (best < 0 || in[i] > in[best]) best = i;
            }
          const int o = ((b * g.out_height() + oy) * g.out_width() + ox) * g.channels + c;
          want_out[o] = in[best];
          want_din[best] += dout[o];
        }
  ExpectNear(out, want_out, 0);
  ExpectNear(din, want_din, 0);
}

// Even sizes (no dropped rows: the backward writes every input element itself) and ties, which
// the first tap in row-major window order must win in both passes.
TEST_F(CpuDeviceTest, MaxPoolTiesGoToTheFirstTap) {
  const PoolGeometry g{1, 2, 4, 2};
  const std::vector<float> in = {1, 5, 1, 6, 3, 3, 2, 2,   // row 0: (x, c) pairs
                                 1, 5, 1, 7, 3, 3, 2, 2};  // row 1
  const std::vector<float> dout = {10, 20, 30, 40};
  std::vector<float> out(g.output_size()), din(g.input_size(), 7.0f);
  std::vector<int32_t> argmax(g.output_size());
  device_.MaxPool2x2(g, in.data(), out.data(), argmax.data());
  EXPECT_EQ(out, (std::vector<float>{1, 7, 3, 3}));
  EXPECT_EQ(argmax, (std::vector<int32_t>{0, 11, 4, 5}));
  device_.MaxPool2x2Grad(g, dout.data(), argmax.data(), din.data());
  EXPECT_EQ(din, (std::vector<float>{10, 0, 0, 0, 30, 40, 0, 0, 0, 0, 0, 20, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace kubetrain::worker
