// CudaDevice and NcclCommunicator against the CPU reference. The device tests need a GPU and
// skip without one; the checked-call conversions and the probe run everywhere.
#include "worker/cuda/cuda_device.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/model.h"
#include "worker/core/models.h"
#include "worker/core/random.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/nccl_communicator.h"
#include "worker/tests/model_reads.h"
#include "worker/tests/random_images.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---------------------------------------------------------------------------------------------
// Checked calls: pure conversions, no device needed.

cudaError_t Returns(cudaError_t error) { return error; }
cublasStatus_t Returns(cublasStatus_t status) { return status; }
ncclResult_t Returns(ncclResult_t result) { return result; }

TEST(CudaCheck, SuccessIsOk) {
  EXPECT_THAT(KT_CUDA_STATUS(Returns(cudaSuccess)), IsOk());
  EXPECT_THAT(KT_CUBLAS_STATUS(Returns(CUBLAS_STATUS_SUCCESS)), IsOk());
  EXPECT_THAT(KT_NCCL_STATUS(Returns(ncclSuccess)), IsOk());
}

TEST(CudaCheck, RuntimeErrorCarriesCallSiteCallAndLibraryMessage) {
  const absl::Status status = KT_CUDA_STATUS(Returns(cudaErrorMemoryAllocation));
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("cuda_device_test.cc:"));
  EXPECT_THAT(status.message(), HasSubstr("Returns(cudaErrorMemoryAllocation) failed"));
  EXPECT_THAT(status.message(), HasSubstr(cudaGetErrorString(cudaErrorMemoryAllocation)));
}

TEST(CudaCheck, MissingDeviceOrDriverIsAPrecondition) {
  for (const cudaError_t error : {cudaErrorNoDevice, cudaErrorInsufficientDriver}) {
    const absl::Status status = KT_CUDA_STATUS(Returns(error));
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    EXPECT_THAT(std::string(status.message()), StartsWith("no CUDA device/driver: "));
  }
  EXPECT_TRUE(absl::IsInternal(KT_CUDA_STATUS(Returns(cudaErrorIllegalAddress))));
}

TEST(CudaCheck, CublasStatusesMapToCodes) {
  const absl::Status alloc = KT_CUBLAS_STATUS(Returns(CUBLAS_STATUS_ALLOC_FAILED));
  EXPECT_TRUE(absl::IsResourceExhausted(alloc)) << alloc;
  EXPECT_THAT(alloc.message(), HasSubstr(cublasGetStatusString(CUBLAS_STATUS_ALLOC_FAILED)));
  EXPECT_THAT(alloc.message(), HasSubstr("CUBLAS_STATUS_ALLOC_FAILED"));
  EXPECT_TRUE(absl::IsInternal(KT_CUBLAS_STATUS(Returns(CUBLAS_STATUS_INVALID_VALUE))));
  EXPECT_TRUE(absl::IsFailedPrecondition(KT_CUBLAS_STATUS(Returns(CUBLAS_STATUS_ARCH_MISMATCH))));
}

TEST(CudaCheck, NcclResultsMapToCodes) {
  const absl::Status remote = KT_NCCL_STATUS(Returns(ncclRemoteError));
  EXPECT_TRUE(absl::IsUnavailable(remote)) << remote;
  EXPECT_THAT(remote.message(), HasSubstr(ncclGetErrorString(ncclRemoteError)));
  EXPECT_TRUE(absl::IsUnavailable(KT_NCCL_STATUS(Returns(ncclSystemError))));
  EXPECT_TRUE(absl::IsFailedPrecondition(KT_NCCL_STATUS(Returns(ncclInvalidUsage))));
  EXPECT_TRUE(absl::IsInternal(KT_NCCL_STATUS(Returns(ncclUnhandledCudaError))));
}

absl::Status TwoCalls(cudaError_t first, bool* reached_second) {
  KT_CUDA_RETURN_IF_ERROR(Returns(first));
  *reached_second = true;
  return absl::OkStatus();
}

TEST(CudaCheck, ReturnFormStopsAtTheFirstFailure) {
  bool reached = false;
  EXPECT_TRUE(absl::IsInternal(TwoCalls(cudaErrorLaunchFailure, &reached)));
  EXPECT_FALSE(reached);
  EXPECT_THAT(TwoCalls(cudaSuccess, &reached), IsOk());
  EXPECT_TRUE(reached);
}

TEST(ProbeCudaDevices, NeverCrashesAndExplainsAZeroCount) {
  const CudaProbe probe = ProbeCudaDevices();
  EXPECT_EQ(probe.status.ok(), probe.device_count > 0) << probe.status;
  if (probe.device_count == 0) {
    EXPECT_TRUE(absl::IsFailedPrecondition(probe.status)) << probe.status;
    EXPECT_THAT(probe.status.message(), HasSubstr("no CUDA device/driver"));
  }
}

TEST(CudaDeviceCreate, FailsCleanlyWithoutADeviceElseDescribesIt) {
  const CudaProbe probe = ProbeCudaDevices();
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create();
  if (probe.device_count == 0) {
    EXPECT_TRUE(absl::IsFailedPrecondition(device.status())) << device.status();
    return;
  }
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ((*device)->name(), "cuda");
  EXPECT_THAT((*device)->description(), StartsWith("cuda:0 "));
  EXPECT_GT((*device)->description().size(), std::string("cuda:0 ").size());
}

// ---------------------------------------------------------------------------------------------
// Kernels against CpuDevice.

// |got - want| <= tol * (1 + |want|) element by element.
void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << "at " << i;
  }
}

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaProbe probe = ProbeCudaDevices();
    // The reason starts "no CUDA device/driver: ".
    if (probe.device_count == 0) GTEST_SKIP() << probe.status.message();
    // FP32 throughout, so that results match the CPU's to FP32 rounding; the TF32 tests make
    // their own device.
    absl::StatusOr<std::unique_ptr<CudaDevice>> device =
        CudaDevice::Create({.tf32_convolutions = false});
    ASSERT_TRUE(device.ok()) << device.status();
    gpu_ = *std::move(device);
  }

  template <typename T>
  Buffer<T> ToGpu(const std::vector<T>& host) {
    Buffer<T> buffer(*gpu_, {static_cast<int64_t>(host.size())});
    gpu_->Upload(host.data(), buffer, buffer.size());
    return buffer;
  }

  template <typename T>
  std::vector<T> FromGpu(const Buffer<T>& buffer) {
    std::vector<T> host(static_cast<size_t>(buffer.size()));
    gpu_->Download(buffer, host.data(), buffer.size());
    const absl::Status status = gpu_->Synchronize();
    EXPECT_TRUE(status.ok()) << status;
    return host;
  }

  CpuDevice cpu_;
  std::unique_ptr<CudaDevice> gpu_;
};

// Byte sizes around the staging chunk (1000 bytes here, deliberately not a multiple of a float),
// so copies start, end and split mid-chunk and mid-float.
TEST_F(CudaDeviceTest, CopiesRoundTripAcrossStagingChunks) {
  absl::StatusOr<std::unique_ptr<CudaDevice>> small =
      CudaDevice::Create({.ordinal = 0, .staging_chunk_bytes = 1000});
  ASSERT_TRUE(small.ok()) << small.status();
  CudaDevice& device = **small;
  Rng rng(11);
  for (const size_t bytes : {size_t{1}, size_t{999}, size_t{1000}, size_t{1001}, size_t{2000},
                             size_t{5555}, size_t{(1 << 20) + 3}}) {
    SCOPED_TRACE(absl::StrCat("bytes=", bytes));
    std::vector<uint8_t> host(bytes), back(bytes, 0), copy(bytes, 0);
    for (uint8_t& b : host) b = static_cast<uint8_t>(rng.Below(256));
    void* a = device.AllocateBytes(bytes);
    void* b = device.AllocateBytes(bytes);
    device.CopyHostToDevice(host.data(), a, bytes);
    // The upload has consumed the host buffer once it returns.
    const std::vector<uint8_t> sent = host;
    std::fill(host.begin(), host.end(), uint8_t{0});
    device.CopyDeviceToDevice(a, b, bytes);
    device.CopyDeviceToHost(a, back.data(), bytes);
    device.CopyDeviceToHost(b, copy.data(), bytes);
    const absl::Status status = device.Synchronize();
    EXPECT_TRUE(status.ok()) << status;
    EXPECT_EQ(back, sent);
    EXPECT_EQ(copy, sent);
    device.FreeBytes(a);
    device.FreeBytes(b);
  }
  EXPECT_THAT(device.Synchronize(), IsOk());
}

// Copies and kernels run on different streams; each must see the other's results.
TEST_F(CudaDeviceTest, CopiesAreOrderedWithKernels) {
  const int64_t n = 300000;  // 1.2 MB: more than one default staging chunk
  const std::vector<float> host = RandomVector(n, 12);
  Tensor x = ToGpu(host);
  gpu_->Scale(n, 2.0f, x.data());
  std::vector<float> doubled(static_cast<size_t>(n));
  gpu_->Download(x, doubled.data(), n);
  gpu_->Upload(host.data(), x, n);
  gpu_->Scale(n, -1.0f, x.data());
  const std::vector<float> negated = FromGpu(x);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(doubled[i], 2.0f * host[i]) << i;
    ASSERT_EQ(negated[i], -host[i]) << i;
  }
}

TEST_F(CudaDeviceTest, DeviceToDeviceCopyAllowsOverlapLikeMemmove) {
  const std::vector<float> host = RandomVector(1000, 13);
  for (const auto& [from, to, count] :
       {std::tuple{0, 100, 600}, std::tuple{300, 0, 600}, std::tuple{10, 11, 900},
        std::tuple{5, 5, 100}, std::tuple{0, 700, 300}}) {
    SCOPED_TRACE(absl::StrCat(from, " -> ", to, " x ", count));
    Tensor x = ToGpu(host);
    gpu_->CopyDeviceToDevice(x.data() + from, x.data() + to, count * sizeof(float));
    std::vector<float> want = host;
    std::memmove(want.data() + to, want.data() + from, count * sizeof(float));
    EXPECT_EQ(FromGpu(x), want);
  }
}

TEST_F(CudaDeviceTest, Fill) {
  Tensor x(*gpu_, {100003});
  gpu_->Fill(x.size(), -2.5f, x.data());
  EXPECT_EQ(FromGpu(x), std::vector<float>(100003, -2.5f));
}

struct GemmCase {
  bool trans_a;
  bool trans_b;
  int m, n, k;
};

void PrintTo(const GemmCase& p, std::ostream* os) {
  *os << (p.trans_a ? "T" : "N") << (p.trans_b ? "T" : "N") << " m=" << p.m << " n=" << p.n
      << " k=" << p.k;
}

class CudaGemmTest : public CudaDeviceTest, public ::testing::WithParamInterface<GemmCase> {};

TEST_P(CudaGemmTest, MatchesCpu) {
  const GemmCase p = GetParam();
  const float alpha = 1.5f, beta = -0.5f;
  const std::vector<float> a = RandomVector(int64_t{p.m} * p.k, 2);
  const std::vector<float> b = RandomVector(int64_t{p.k} * p.n, 3);
  std::vector<float> want = RandomVector(int64_t{p.m} * p.n, 4);
  Tensor ga = ToGpu(a), gb = ToGpu(b), gc = ToGpu(want);
  cpu_.Gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, alpha, a.data(), b.data(), beta, want.data());
  gpu_->Gemm(p.trans_a, p.trans_b, p.m, p.n, p.k, alpha, ga.data(), gb.data(), beta, gc.data());
  ExpectNear(FromGpu(gc), want, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    AllTransposesOddSizes, CudaGemmTest,
    ::testing::Values(GemmCase{false, false, 37, 29, 53}, GemmCase{true, false, 37, 29, 53},
                      GemmCase{false, true, 37, 29, 53}, GemmCase{true, true, 37, 29, 53},
                      GemmCase{false, false, 1, 7, 3}, GemmCase{true, true, 131, 1, 257},
                      GemmCase{true, false, 25, 33, 4097}, GemmCase{false, true, 513, 10, 129}),
    [](const ::testing::TestParamInfo<GemmCase>& info) {
      const GemmCase& p = info.param;
      return absl::StrCat(p.trans_a ? "T" : "N", p.trans_b ? "T" : "N", "_", p.m, "x", p.n, "x",
                          p.k);
    });

// --tf32: the same GEMM on tensor cores agrees with the CPU to TF32's precision (inputs rounded
// to 10 mantissa bits), and the default FP32 device stays at FP32's.
TEST_F(CudaDeviceTest, Tf32GemmAgreesWithTheCpuToTf32Precision) {
  absl::StatusOr<std::unique_ptr<CudaDevice>> tf32 = CudaDevice::Create({.tf32 = true});
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  const int m = 256, n = 128, k = 512;
  const std::vector<float> a = RandomVector(int64_t{m} * k, 5);
  const std::vector<float> b = RandomVector(int64_t{k} * n, 6);
  std::vector<float> want(static_cast<size_t>(m) * n);
  cpu_.Gemm(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, want.data());
  Tensor ga(**tf32, {int64_t{m} * k}), gb(**tf32, {int64_t{k} * n}), gc(**tf32, {int64_t{m} * n});
  (*tf32)->Upload(a.data(), ga, ga.size());
  (*tf32)->Upload(b.data(), gb, gb.size());
  (*tf32)->Gemm(false, false, m, n, k, 1.0f, ga.data(), gb.data(), 0.0f, gc.data());
  std::vector<float> got(static_cast<size_t>(gc.size()));
  (*tf32)->Download(gc, got.data(), gc.size());
  ASSERT_TRUE((*tf32)->Synchronize().ok());
  ExpectNear(got, want, 2e-2);
}

TEST_F(CudaDeviceTest, FailedCallIsReportedOnceBySynchronize) {
  Tensor c(*gpu_, {4});
  // A negative size is rejected by cuBLAS before it touches memory.
  gpu_->Gemm(false, false, -1, 2, 2, 1.0f, c.data(), c.data(), 0.0f, c.data());
  const absl::Status failed = gpu_->Synchronize();
  EXPECT_TRUE(absl::IsInternal(failed)) << failed;
  EXPECT_THAT(failed.message(), HasSubstr("RowMajorSgemm"));
  EXPECT_THAT(failed.message(), HasSubstr("CUBLAS_STATUS_INVALID_VALUE"));
  // Reported once; the device goes on working.
  gpu_->Fill(4, 1.0f, c.data());
  EXPECT_EQ(FromGpu(c), std::vector<float>(4, 1.0f));
}

TEST_F(CudaDeviceTest, AxpyAndScale) {
  const int64_t n = 70001;
  const std::vector<float> x = RandomVector(n, 5);
  std::vector<float> want = RandomVector(n, 6);
  Tensor gx = ToGpu(x), gy = ToGpu(want);
  cpu_.Axpy(n, -2.0f, x.data(), want.data());
  cpu_.Scale(n, 0.5f, want.data());
  gpu_->Axpy(n, -2.0f, gx.data(), gy.data());
  gpu_->Scale(n, 0.5f, gy.data());
  ExpectNear(FromGpu(gy), want, 1e-6);
}

struct Matrix {
  int rows;
  int cols;
};

// Row counts below, at and past ColumnSumPlan's chunk (256 rows), and many chunks; column counts
// below and past one block of 32.
const Matrix kBiasShapes[] = {{1, 1}, {37, 10}, {256, 33}, {257, 64}, {5000, 7}, {3001, 128}};

TEST_F(CudaDeviceTest, AddBiasAndAddBiasRelu) {
  for (const Matrix& s : kBiasShapes) {
    SCOPED_TRACE(absl::StrCat(s.rows, "x", s.cols));
    const std::vector<float> x = RandomVector(int64_t{s.rows} * s.cols, 7);
    const std::vector<float> bias = RandomVector(s.cols, 8);
    Tensor gx = ToGpu(x), gr = ToGpu(x), gb = ToGpu(bias);
    std::vector<float> plain = x, relu = x;
    cpu_.AddBias(s.rows, s.cols, bias.data(), plain.data());
    cpu_.AddBiasRelu(s.rows, s.cols, bias.data(), relu.data());
    gpu_->AddBias(s.rows, s.cols, gb.data(), gx.data());
    gpu_->AddBiasRelu(s.rows, s.cols, gb.data(), gr.data());
    EXPECT_EQ(FromGpu(gx), plain);
    EXPECT_EQ(FromGpu(gr), relu);
  }
}

TEST_F(CudaDeviceTest, BiasGradAndReluBiasGrad) {
  for (const Matrix& s : kBiasShapes) {
    SCOPED_TRACE(absl::StrCat(s.rows, "x", s.cols));
    const int64_t n = int64_t{s.rows} * s.cols;
    const std::vector<float> y = RandomVector(n, 9), dy = RandomVector(n, 10);
    std::vector<float> db(s.cols, 99.0f), relu_db(s.cols, 99.0f), dx(n);
    cpu_.BiasGrad(s.rows, s.cols, dy.data(), db.data());
    cpu_.ReluBiasGrad(s.rows, s.cols, y.data(), dy.data(), dx.data(), relu_db.data());
    Tensor gy = ToGpu(y), gdy = ToGpu(dy), gdx(*gpu_, {n});
    Tensor gdb = ToGpu(std::vector<float>(s.cols, 99.0f)),
           grelu_db = ToGpu(std::vector<float>(s.cols, 99.0f));
    gpu_->BiasGrad(s.rows, s.cols, gdy.data(), gdb.data());
    gpu_->ReluBiasGrad(s.rows, s.cols, gy.data(), gdy.data(), gdx.data(), grelu_db.data());
    // Column sums in another order: the error grows with the row count.
    const double tol = 1e-6 * (1.0 + std::sqrt(static_cast<double>(s.rows)));
    ExpectNear(FromGpu(gdb), db, tol);
    ExpectNear(FromGpu(grelu_db), relu_db, tol);
    EXPECT_EQ(FromGpu(gdx), dx);
    // dy and dx may alias.
    gpu_->ReluBiasGrad(s.rows, s.cols, gy.data(), gdy.data(), gdy.data(), grelu_db.data());
    EXPECT_EQ(FromGpu(gdy), dx);
    ExpectNear(FromGpu(grelu_db), relu_db, tol);
  }
}

TEST_F(CudaDeviceTest, ReluAndReluGrad) {
  const int64_t n = 100003;
  const std::vector<float> x = RandomVector(n, 14), dy = RandomVector(n, 15);
  std::vector<float> y(n), dx(n);
  cpu_.Relu(n, x.data(), y.data());
  cpu_.ReluGrad(n, y.data(), dy.data(), dx.data());
  Tensor gx = ToGpu(x), gdy = ToGpu(dy), gy(*gpu_, {n}), gdx(*gpu_, {n});
  gpu_->Relu(n, gx.data(), gy.data());
  gpu_->ReluGrad(n, gy.data(), gdy.data(), gdx.data());
  EXPECT_EQ(FromGpu(gy), y);
  EXPECT_EQ(FromGpu(gdx), dx);
  gpu_->Relu(n, gx.data(), gx.data());  // in place
  EXPECT_EQ(FromGpu(gx), y);
}

TEST_F(CudaDeviceTest, SoftmaxCrossEntropyAndArgMax) {
  const int rows = 301, cols = 10;
  const std::vector<float> logits = RandomVector(int64_t{rows} * cols, 16, 8.0f);
  std::vector<int32_t> labels(rows);
  Rng rng(17);
  for (int32_t& label : labels) label = static_cast<int32_t>(rng.Below(cols));
  std::vector<float> loss(rows), dlogits(int64_t{rows} * cols), eval_loss(rows);
  std::vector<int32_t> argmax(rows);
  cpu_.SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(), 0.25f, loss.data(),
                           dlogits.data());
  cpu_.SoftmaxCrossEntropy(rows, cols, logits.data(), labels.data(), 1.0f, eval_loss.data(),
                           nullptr);
  cpu_.ArgMax(rows, cols, logits.data(), argmax.data());
  Tensor gl = ToGpu(logits), gloss(*gpu_, {rows}), gd(*gpu_, {rows, cols}), geval(*gpu_, {rows});
  IntTensor glabels = ToGpu(labels), gargmax(*gpu_, {rows});
  gpu_->SoftmaxCrossEntropy(rows, cols, gl.data(), glabels.data(), 0.25f, gloss.data(), gd.data());
  gpu_->SoftmaxCrossEntropy(rows, cols, gl.data(), glabels.data(), 1.0f, geval.data(), nullptr);
  gpu_->ArgMax(rows, cols, gl.data(), gargmax.data());
  // expf/logf differ by an ulp or two between the host library and the GPU.
  ExpectNear(FromGpu(gloss), loss, 1e-5);
  ExpectNear(FromGpu(geval), eval_loss, 1e-5);
  ExpectNear(FromGpu(gd), dlogits, 1e-5);
  EXPECT_EQ(FromGpu(gargmax), argmax);
}

const ConvGeometry kConvShapes[] = {
    {2, 28, 28, 1, 5, 2, 1}, {3, 14, 14, 32, 5, 2, 1}, {2, 7, 6, 3, 3, 0, 2},
    {1, 9, 5, 2, 4, 1, 3},   {4, 5, 5, 1, 3, 1, 2},
};

TEST_F(CudaDeviceTest, Im2ColAndCol2Im) {
  for (const ConvGeometry& g : kConvShapes) {
    SCOPED_TRACE(absl::StrCat("h=", g.height, " w=", g.width, " c=", g.channels, " k=", g.kernel,
                              " pad=", g.pad, " stride=", g.stride));
    const int64_t col_size = g.col_rows() * g.col_cols();
    const std::vector<float> input = RandomVector(g.input_size(), 18);
    const std::vector<float> dcol = RandomVector(col_size, 19);
    std::vector<float> col(col_size), dinput(g.input_size());
    cpu_.Im2Col(g, input.data(), col.data());
    cpu_.Col2Im(g, dcol.data(), dinput.data());
    Tensor gin = ToGpu(input), gdcol = ToGpu(dcol), gcol(*gpu_, {col_size});
    Tensor gdin = ToGpu(std::vector<float>(g.input_size(), 99.0f));  // overwritten
    gpu_->Im2Col(g, gin.data(), gcol.data());
    gpu_->Col2Im(g, gdcol.data(), gdin.data());
    EXPECT_EQ(FromGpu(gcol), col);
    // The gather adds in the CPU's order (kernels_math_test checks it bit for bit on the host);
    // a tolerance leaves room for the device's own float arithmetic.
    ExpectNear(FromGpu(gdin), dinput, 1e-6);
  }
}

TEST_F(CudaDeviceTest, MaxPoolAndGrad) {
  for (const PoolGeometry& g : {PoolGeometry{2, 28, 28, 32}, PoolGeometry{3, 7, 5, 3},
                                PoolGeometry{1, 2, 2, 1}, PoolGeometry{2, 9, 9, 64}}) {
    SCOPED_TRACE(absl::StrCat("h=", g.height, " w=", g.width, " c=", g.channels));
    std::vector<float> input = RandomVector(g.input_size(), 20);
    for (size_t i = 0; i < input.size(); i += 3) input[i] = 0.5f;  // ties
    const std::vector<float> dout = RandomVector(g.output_size(), 21);
    std::vector<float> out(g.output_size()), din(g.input_size());
    std::vector<int32_t> argmax(g.output_size());
    cpu_.MaxPool2x2(g, input.data(), out.data(), argmax.data());
    cpu_.MaxPool2x2Grad(g, dout.data(), argmax.data(), din.data());
    Tensor gin = ToGpu(input), gout(*gpu_, {g.output_size()}), gdout = ToGpu(dout);
    Tensor gdin = ToGpu(std::vector<float>(g.input_size(), 99.0f));
    IntTensor gargmax(*gpu_, {g.output_size()});
    gpu_->MaxPool2x2(g, gin.data(), gout.data(), gargmax.data());
    gpu_->MaxPool2x2Grad(g, gdout.data(), gargmax.data(), gdin.data());
    EXPECT_EQ(FromGpu(gout), out);
    EXPECT_EQ(FromGpu(gargmax), argmax);
    EXPECT_EQ(FromGpu(gdin), din);
  }
}

ps::UpdateRule Rule(ps::UpdateKind kind) {
  ps::UpdateRule r;
  r.kind = kind;
  r.lr = kind == ps::UpdateKind::kAdam ? 0.01f : 0.1f;
  r.momentum = 0.9f;
  r.beta1 = 0.9f;
  r.beta2 = 0.999f;
  r.rest1 = 0.1f;
  r.rest2 = 0.001f;
  r.epsilon = 1e-7f;
  r.grad_scale = 0.5f;
  return r;
}

class CudaUpdateTest : public CudaDeviceTest,
                       public ::testing::WithParamInterface<ps::UpdateKind> {};

TEST_P(CudaUpdateTest, ThreeStepsMatchCpu) {
  const ps::UpdateRule rule = Rule(GetParam());
  const int slots = ps::UpdateSlots(rule.kind);
  const int64_t n = 10007;
  std::vector<float> value = RandomVector(n, 22), slot0(n, 0.1f), slot1(n, 0.0f);
  Tensor gvalue = ToGpu(value), gslot0 = ToGpu(slot0), gslot1 = ToGpu(slot1);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> grad = RandomVector(n, 23 + step);
    Tensor ggrad = ToGpu(grad);
    cpu_.ApplyUpdate(rule, n, grad.data(), value.data(), slots > 0 ? slot0.data() : nullptr,
                     slots > 1 ? slot1.data() : nullptr);
    gpu_->ApplyUpdate(rule, n, ggrad.data(), gvalue.data(), slots > 0 ? gslot0.data() : nullptr,
                      slots > 1 ? gslot1.data() : nullptr);
  }
  ExpectNear(FromGpu(gvalue), value, 1e-5);
  ExpectNear(FromGpu(gslot0), slot0, 1e-5);
  ExpectNear(FromGpu(gslot1), slot1, 1e-5);
}

// The fused update (Device::ApplyUpdates) over more slices than one kernel takes, of uneven and
// empty sizes, applies what ApplyUpdate applies slice by slice on the CPU.
TEST_P(CudaUpdateTest, FusedUpdateOfManySlicesMatchesCpu) {
  const ps::UpdateRule rule = Rule(GetParam());
  const int slots = ps::UpdateSlots(rule.kind);
  const int count = math::UpdateSlices::kMax + 7;
  std::vector<int64_t> sizes;
  for (int k = 0; k < count; ++k) sizes.push_back(k % 9 == 4 ? 0 : 1 + (k * 37) % 513);
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  std::vector<float> value = RandomVector(total, 42), slot0(total, 0.1f), slot1(total, 0.0f);
  const std::vector<float> grad = RandomVector(total, 43);
  Tensor gvalue = ToGpu(value), gslot0 = ToGpu(slot0), gslot1 = ToGpu(slot1), ggrad = ToGpu(grad);
  std::vector<UpdateSlice> on_gpu;
  int64_t offset = 0;
  for (int64_t n : sizes) {
    cpu_.ApplyUpdate(rule, n, grad.data() + offset, value.data() + offset,
                     slots > 0 ? slot0.data() + offset : nullptr,
                     slots > 1 ? slot1.data() + offset : nullptr);
    on_gpu.push_back({n, ggrad.data() + offset, gvalue.data() + offset,
                      slots > 0 ? gslot0.data() + offset : nullptr,
                      slots > 1 ? gslot1.data() + offset : nullptr});
    offset += n;
  }
  // The rule is read from device memory (Device::ApplyUpdates).
  Buffer<ps::UpdateRule> grule(*gpu_, {1});
  gpu_->Upload(&rule, grule, 1);
  gpu_->ApplyUpdates(grule.data(), on_gpu);
  ExpectNear(FromGpu(gvalue), value, 1e-5);
  ExpectNear(FromGpu(gslot0), slot0, 1e-5);
  ExpectNear(FromGpu(gslot1), slot1, 1e-5);
}

std::string RuleName(const ::testing::TestParamInfo<ps::UpdateKind>& info) {
  switch (info.param) {
    case ps::UpdateKind::kSgd:
      return "Sgd";
    case ps::UpdateKind::kMomentum:
      return "Momentum";
    case ps::UpdateKind::kAdam:
      return "Adam";
    case ps::UpdateKind::kAdagrad:
      return "Adagrad";
  }
  return "Unknown";
}

INSTANTIATE_TEST_SUITE_P(AllRules, CudaUpdateTest,
                         ::testing::Values(ps::UpdateKind::kSgd, ps::UpdateKind::kMomentum,
                                           ps::UpdateKind::kAdam, ps::UpdateKind::kAdagrad),
                         RuleName);

// A whole forward and backward pass through the model code, on both devices from one seed.
class CudaModelTest : public CudaDeviceTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(CudaModelTest, ComputeGradientsMatchesCpu) {
  const int batch = 16;
  absl::StatusOr<std::unique_ptr<Model>> on_cpu = MakeModel(GetParam(), cpu_, 5);
  absl::StatusOr<std::unique_ptr<Model>> on_gpu = MakeModel(GetParam(), *gpu_, 5);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  ASSERT_TRUE(on_gpu.ok()) << on_gpu.status();
  Model& cpu_model = **on_cpu;
  Model& gpu_model = **on_gpu;
  const Batch b = UniformBatch(batch, cpu_model.input_size(), cpu_model.num_classes(), 24);

  std::vector<float> cpu_values(cpu_model.num_parameters()), gpu_values(cpu_values.size());
  ASSERT_THAT(cpu_model.ReadValues(absl::MakeSpan(cpu_values)), IsOk());
  ASSERT_THAT(gpu_model.ReadValues(absl::MakeSpan(gpu_values)), IsOk());
  ASSERT_EQ(gpu_values, cpu_values);  // same seed, same host-drawn initialisation

  for (int step = 0; step < 2; ++step) {  // the second step reuses every buffer
    absl::StatusOr<float> cpu_loss = cpu_model.ComputeGradients(b.images, b.labels);
    absl::StatusOr<float> gpu_loss = gpu_model.ComputeGradients(b.images, b.labels);
    ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
    ASSERT_TRUE(gpu_loss.ok()) << gpu_loss.status();
    EXPECT_NEAR(*gpu_loss, *cpu_loss, 1e-4 * (1.0 + *cpu_loss));
  }
  // The loss left on the device (all-reduce's path) is the same mean.
  Tensor loss(*gpu_, {1});
  ASSERT_THAT(gpu_model.ComputeGradients(b.images, b.labels, loss.data()), IsOk());
  float on_device = 0.0f;
  gpu_->Download(loss, &on_device, 1);
  ASSERT_THAT(gpu_->Synchronize(), IsOk());
  absl::StatusOr<float> cpu_loss = cpu_model.ComputeGradients(b.images, b.labels);
  ASSERT_TRUE(cpu_loss.ok()) << cpu_loss.status();
  EXPECT_NEAR(on_device, *cpu_loss, 1e-4 * (1.0 + *cpu_loss));
  testing::ExpectGradientsNear(gpu_model, cpu_model, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(BothModels, CudaModelTest, ::testing::Values("mlp", "cnn"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// cuDNN's convolutions (Device::MakeConvolution) against the CPU's im2col + GEMM in every
// direction, for the CNN's two layers and an odd-sized one, each at two batch sizes (a plan
// each): the HWIO <-> OHWI filter transposes, the descriptors and the algorithms chosen.
class CudnnConvolutionTest : public CudaDeviceTest,
                             public ::testing::WithParamInterface<Conv2DShape> {};

TEST_P(CudnnConvolutionTest, MatchesTheCpuInEveryDirection) {
  const Conv2DShape s = GetParam();
  std::unique_ptr<ConvolutionKernels> kernels = gpu_->MakeConvolution(s);
  ASSERT_NE(kernels, nullptr);
  const int64_t patch = int64_t{s.kernel} * s.kernel * s.in_channels;
  const std::vector<float> w = RandomVector(patch * s.filters, 31);
  for (int batch : {5, 2, 5}) {
    const int64_t pixels = int64_t{batch} * s.height * s.width;
    const std::vector<float> x = RandomVector(pixels * s.in_channels, 32 + batch);
    const std::vector<float> dy = RandomVector(pixels * s.filters, 33 + batch);
    // The CPU: y = cols(x) W, dW = cols(x)^T dy, dx = col2im(dy W^T).
    const ConvGeometry g{batch, s.height, s.width, s.in_channels, s.kernel, s.kernel / 2, 1};
    std::vector<float> cols(static_cast<size_t>(pixels * patch));
    std::vector<float> y(static_cast<size_t>(pixels * s.filters));
    std::vector<float> dw(static_cast<size_t>(patch * s.filters));
    std::vector<float> dx(x.size());
    cpu_.Im2Col(g, x.data(), cols.data());
    cpu_.Gemm(false, false, static_cast<int>(pixels), s.filters, static_cast<int>(patch), 1.0f,
              cols.data(), w.data(), 0.0f, y.data());
    cpu_.Gemm(true, false, static_cast<int>(patch), s.filters, static_cast<int>(pixels), 1.0f,
              cols.data(), dy.data(), 0.0f, dw.data());
    cpu_.Gemm(false, true, static_cast<int>(pixels), static_cast<int>(patch), s.filters, 1.0f,
              dy.data(), w.data(), 0.0f, cols.data());
    cpu_.Col2Im(g, cols.data(), dx.data());

    Buffer<float> gx = ToGpu(x), gw = ToGpu(w), gdy = ToGpu(dy);
    Tensor gy(*gpu_, {pixels * s.filters}), gdw(*gpu_, {patch * s.filters});
    Tensor gdx(*gpu_, {pixels * s.in_channels});
    kernels->Forward(batch, gx.data(), gw.data(), gy.data());
    kernels->BackwardFilter(batch, gx.data(), gdy.data(), gdw.data());
    kernels->BackwardData(batch, gdy.data(), gw.data(), gdx.data());
    ExpectNear(FromGpu(gy), y, 1e-4);
    ExpectNear(FromGpu(gdw), dw, 1e-4);
    ExpectNear(FromGpu(gdx), dx, 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudnnConvolutionTest,
                         ::testing::Values(Conv2DShape{28, 28, 1, 32, 5},
                                           Conv2DShape{14, 14, 32, 64, 5},
                                           Conv2DShape{9, 5, 3, 4, 3}));

// By default the device runs convolutions in TF32 (CudaDeviceOptions::tf32_convolutions): the
// CNN's loss and gradients then agree with the CPU's to TF32's precision.
TEST_F(CudaDeviceTest, CnnWithTf32ConvolutionsAgreesWithTheCpuToTf32Precision) {
  absl::StatusOr<std::unique_ptr<CudaDevice>> tf32 = CudaDevice::Create();
  ASSERT_TRUE(tf32.ok()) << tf32.status();
  ASSERT_TRUE((*tf32)->tf32_convolutions());
  testing::ExpectCnnStepNear(**tf32, cpu_, 1e-2, 3e-2);
}

// Every method makes its device current first, so a thread whose current device is another one
// (with two or more GPUs: device 0, while this uses the last) can issue work.
TEST_F(CudaDeviceTest, UsableFromAnotherThread) {
  absl::StatusOr<std::unique_ptr<CudaDevice>> last =
      CudaDevice::Create({.ordinal = ProbeCudaDevices().device_count - 1});
  ASSERT_TRUE(last.ok()) << last.status();
  CudaDevice& device = **last;
  Tensor x(device, {1000});
  std::vector<float> got(1000);
  std::thread([&] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    device.Fill(x.size(), 3.0f, x.data());
    device.Scale(x.size(), 2.0f, x.data());
    device.Download(x, got.data(), x.size());
    const absl::Status status = device.Synchronize();
    EXPECT_TRUE(status.ok()) << status;
  }).join();
  EXPECT_EQ(got, std::vector<float>(1000, 6.0f));
}

// ---------------------------------------------------------------------------------------------
// NCCL: ranks as threads in this process sharing an in-memory store, one GPU per rank (NCCL
// refuses two ranks of one communicator on one GPU).

class MemoryStore final : public KeyValueStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    values_[key] = value;
    changed_.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    const bool found = changed_.wait_for(lock, absl::ToChronoMilliseconds(timeout),
                                         [&] { return values_.count(key) > 0; });
    if (!found) return absl::DeadlineExceededError(absl::StrCat("no value for key ", key));
    return values_[key];
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// Skips unless `needed` CUDA devices are visible; the reason starts "no CUDA device/driver: ".
#define KT_SKIP_WITHOUT_DEVICES(needed)                                               \
  do {                                                                                \
    const CudaProbe probe = ProbeCudaDevices();                                       \
    if (probe.device_count == 0) GTEST_SKIP() << probe.status.message();              \
    if (probe.device_count < (needed)) {                                              \
      GTEST_SKIP() << "needs " << (needed) << " CUDA devices, " << probe.device_count \
                   << " visible";                                                     \
    }                                                                                 \
  } while (false)

// Runs `body(rank, device, communicator)` on `ranks` threads, rank r on GPU r.
template <typename Body>
void RunRanks(int ranks, absl::Duration timeout, Body body) {
  MemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create({.ordinal = rank});
      ASSERT_TRUE(device.ok()) << device.status();
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
          NcclCommunicator::Create(**device, store, rank, ranks, timeout);
      ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
      body(rank, **device, **comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(NcclCommunicator, AllReduceBroadcastAndBarrier) {
  KT_SKIP_WITHOUT_DEVICES(1);
  const int ranks = std::min(2, ProbeCudaDevices().device_count);
  const int64_t n = 4099;
  RunRanks(ranks, absl::Seconds(60), [&](int rank, CudaDevice& device, Communicator& comm) {
    EXPECT_EQ(comm.name(), "nccl");
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.size(), ranks);
    // Small integers: sums, minima and maxima are exact in any order.
    std::vector<float> mine(n);
    for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<float>((rank + 1) * (i % 7 - 3));
    Tensor x(device, {n});
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax}) {
      device.Upload(mine.data(), x, n);
      const absl::Status reduced = comm.AllReduce(x.data(), n, op);
      ASSERT_TRUE(reduced.ok()) << reduced;
      std::vector<float> got(n);
      device.Download(x, got.data(), n);
      ASSERT_THAT(device.Synchronize(), IsOk());
      for (int64_t i = 0; i < n; ++i) {
        const float base = static_cast<float>(i % 7 - 3);
        float want = 0.0f;
        if (op == ReduceOp::kSum) want = base * static_cast<float>(ranks * (ranks + 1) / 2);
        if (op == ReduceOp::kMin) want = base < 0 ? base * ranks : base;
        if (op == ReduceOp::kMax) want = base < 0 ? base : base * ranks;
        ASSERT_EQ(got[i], want) << "op " << static_cast<int>(op) << " at " << i;
      }
    }
    const int root = ranks - 1;
    std::vector<float> sent(n);
    for (int64_t i = 0; i < n; ++i) sent[i] = static_cast<float>(rank * 1000 + i % 13);
    device.Upload(sent.data(), x, n);
    ASSERT_THAT(comm.Broadcast(x.data(), n, root), IsOk());
    std::vector<float> got(n);
    device.Download(x, got.data(), n);
    ASSERT_THAT(device.Synchronize(), IsOk());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], static_cast<float>(root * 1000 + i % 13));
    EXPECT_TRUE(absl::IsInvalidArgument(comm.Broadcast(x.data(), n, ranks)));
    EXPECT_THAT(comm.Barrier(), IsOk());
  });
}

// The all-reduce step's call: every fused buffer in one NCCL group, queued without a wait, then
// one bounded wait for it and the work queued after it (here a scale on the same stream).
TEST(NcclCommunicator, AllReduceManyIsOneQueuedGroupThatWaitForQueuedCompletes) {
  KT_SKIP_WITHOUT_DEVICES(1);
  const int ranks = std::min(2, ProbeCudaDevices().device_count);
  RunRanks(ranks, absl::Seconds(60), [&](int rank, CudaDevice& device, Communicator& comm) {
    const std::vector<int64_t> sizes = {1, 4099, 1 << 16};
    std::vector<Tensor> buffers;
    std::vector<absl::Span<float>> spans;
    for (int64_t n : sizes) {
      std::vector<float> mine(n);
      for (int64_t i = 0; i < n; ++i) mine[i] = static_cast<float>((rank + 1) * (i % 5));
      buffers.emplace_back(device, Shape{n});
      device.Upload(mine.data(), buffers.back(), n);
      spans.push_back(absl::MakeSpan(buffers.back().data(), static_cast<size_t>(n)));
    }
    ASSERT_THAT(comm.AllReduceMany(spans, ReduceOp::kSum), IsOk());
    device.Scale(sizes.back(), 2.0f, buffers.back().data());
    ASSERT_THAT(comm.WaitForQueued(), IsOk());
    const float ranks_sum = static_cast<float>(ranks * (ranks + 1) / 2);
    for (size_t b = 0; b < sizes.size(); ++b) {
      std::vector<float> got(sizes[b]);
      device.Download(buffers[b], got.data(), sizes[b]);
      ASSERT_THAT(device.Synchronize(), IsOk());
      const float scale = b + 1 == sizes.size() ? 2.0f : 1.0f;
      for (int64_t i = 0; i < sizes[b]; ++i) {
        ASSERT_EQ(got[i], scale * ranks_sum * static_cast<float>(i % 5)) << "buffer " << b;
      }
    }
  });
}

TEST(NcclCommunicator, RejectsBadRanks) {
  KT_SKIP_WITHOUT_DEVICES(1);
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create();
  ASSERT_TRUE(device.ok()) << device.status();
  MemoryStore store;
  for (const auto& [rank, size] : {std::pair{2, 2}, std::pair{-1, 2}, std::pair{0, 0}}) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        NcclCommunicator::Create(**device, store, rank, size, absl::Seconds(1)).status()));
  }
}

TEST(NcclCommunicator, RankWithoutRankZeroTimesOutWaitingForTheId) {
  KT_SKIP_WITHOUT_DEVICES(1);
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create();
  ASSERT_TRUE(device.ok()) << device.status();
  MemoryStore store;
  const absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(**device, store, 1, 2, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("NCCL unique id"));
}

// Rank 0 of two with no rank 1: set-up must give up at the deadline rather than wait forever.
TEST(NcclCommunicator, SetUpTimesOutWhenAPeerNeverJoins) {
  KT_SKIP_WITHOUT_DEVICES(1);
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create();
  ASSERT_TRUE(device.ok()) << device.status();
  MemoryStore store;
  const absl::Time start = absl::Now();
  const absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(**device, store, 0, 2, absl::Seconds(2));
  EXPECT_TRUE(absl::IsDeadlineExceeded(comm.status())) << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_THAT(store.Get(std::string(NcclCommunicator::kUniqueIdKey), absl::ZeroDuration()), IsOk());
}

// SIGTERM while rank 0 waits for a peer that never joins: the stop flag aborts the communicator
// at once instead of after the (long) timeout.
TEST(NcclCommunicator, StopAbortsAWaitLongBeforeTheTimeout) {
  KT_SKIP_WITHOUT_DEVICES(1);
  absl::StatusOr<std::unique_ptr<CudaDevice>> device = CudaDevice::Create();
  ASSERT_TRUE(device.ok()) << device.status();
  MemoryStore store;
  std::atomic<bool> stop{false};
  std::thread signal([&] {
    // A stop that arrives while the set-up waits for its peer (the behaviour under test).
    absl::SleepFor(absl::Milliseconds(300));
    stop.store(true);
  });
  const absl::Time start = absl::Now();
  const absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(**device, store, 0, 2, absl::Minutes(5), &stop);
  signal.join();
  EXPECT_TRUE(absl::IsCancelled(comm.status())) << comm.status();
  EXPECT_THAT(comm.status().message(), HasSubstr("stop request"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

// Rank 1 never joins the all-reduce: rank 0 returns DEADLINE_EXCEEDED and refuses further calls.
TEST(NcclCommunicator, CollectiveTimesOutWhenAPeerStalls) {
  KT_SKIP_WITHOUT_DEVICES(2);
  std::mutex mu;
  std::condition_variable cv;
  bool rank0_done = false;
  RunRanks(2, absl::Seconds(3), [&](int rank, CudaDevice& device, Communicator& comm) {
    if (rank == 1) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return rank0_done; });
      return;
    }
    Tensor x(device, {16});
    device.Fill(16, 1.0f, x.data());
    const absl::Status reduced = comm.AllReduce(x.data(), 16, ReduceOp::kSum);
    EXPECT_TRUE(absl::IsDeadlineExceeded(reduced)) << reduced;
    EXPECT_TRUE(absl::IsFailedPrecondition(comm.Barrier()));
    std::lock_guard<std::mutex> lock(mu);
    rank0_done = true;
    cv.notify_all();
  });
}

}  // namespace
}  // namespace kubetrain::worker
