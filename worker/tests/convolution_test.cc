// The CPU-checkable half of the device convolutions (worker/core/convolution.h): the algorithm
// choice, the plan cache, the descriptor dims and the filter layout that the cuDNN backend
// (worker/cuda/cudnn_convolution.cc) builds on, and the convolution layer's path for a device's
// own kernels, run here with a direct (seven-loop) convolution against the im2col path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "worker/core/convolution.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/kernels_math.h"
#include "worker/core/models.h"
#include "worker/tests/model_reads.h"
#include "worker/tests/random_images.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::testing::HasSubstr;

constexpr size_t kMiB = size_t{1} << 20;

TEST(ChooseAlgorithm, TakesTheFastestThatRanWithinTheWorkspace) {
  const std::vector<AlgorithmTrial> trials = {
      {.algorithm = 0, .ok = true, .milliseconds = 3.0f, .workspace_bytes = 0},
      {.algorithm = 1, .ok = true, .milliseconds = 1.0f, .workspace_bytes = 512 * kMiB},
      {.algorithm = 2, .ok = false, .milliseconds = 0.5f, .workspace_bytes = 0},
      {.algorithm = 3, .ok = true, .milliseconds = 2.0f, .workspace_bytes = 64 * kMiB},
  };
  std::optional<AlgorithmTrial> best = ChooseAlgorithm(trials, 256 * kMiB);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algorithm, 3);  // 1 needs too much, 2 failed
  best = ChooseAlgorithm(trials, 1024 * kMiB);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algorithm, 1);
  best = ChooseAlgorithm(trials, 0);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->algorithm, 0);  // the one that needs no workspace
}

TEST(ChooseAlgorithm, TiesGoToLessWorkspaceThenTheLowerNumberWhateverTheOrder) {
  std::vector<AlgorithmTrial> trials = {
      {.algorithm = 7, .ok = true, .milliseconds = 1.0f, .workspace_bytes = 8},
      {.algorithm = 5, .ok = true, .milliseconds = 1.0f, .workspace_bytes = 8},
      {.algorithm = 1, .ok = true, .milliseconds = 1.0f, .workspace_bytes = 16},
  };
  EXPECT_EQ(ChooseAlgorithm(trials, 1024)->algorithm, 5);
  std::reverse(trials.begin(), trials.end());
  EXPECT_EQ(ChooseAlgorithm(trials, 1024)->algorithm, 5);
}

TEST(ChooseAlgorithm, NoneWhenNothingRanOrFitsOrATimeIsNotANumber) {
  EXPECT_FALSE(ChooseAlgorithm({}, 1024).has_value());
  const std::vector<AlgorithmTrial> trials = {
      {.algorithm = 0, .ok = false, .milliseconds = 1.0f, .workspace_bytes = 0},
      {.algorithm = 1, .ok = true, .milliseconds = 1.0f, .workspace_bytes = 2048},
      {.algorithm = 2,
       .ok = true,
       .milliseconds = std::numeric_limits<float>::quiet_NaN(),
       .workspace_bytes = 0},
      {.algorithm = 3, .ok = true, .milliseconds = -1.0f, .workspace_bytes = 0},
  };
  EXPECT_FALSE(ChooseAlgorithm(trials, 1024).has_value());
}

TEST(ConvolutionWorkspaceLimit, AnEighthOfTheFreeMemoryUpTo256MiB) {
  EXPECT_EQ(ConvolutionWorkspaceLimit(0), 0u);
  EXPECT_EQ(ConvolutionWorkspaceLimit(800 * kMiB), 100 * kMiB);
  EXPECT_EQ(ConvolutionWorkspaceLimit(size_t{140} << 30), 256 * kMiB);
}

TEST(BoundedCache, KeepsTheMostRecentlyUsedAndReplacesInPlace) {
  BoundedCache<int, std::string> cache(2);
  cache.Put(64, "batch");
  cache.Put(32, "last batch");
  ASSERT_NE(cache.Find(64), nullptr);  // 64 is now the most recently used
  cache.Put(500, "evaluation");        // so 32 goes
  EXPECT_EQ(cache.Find(32), nullptr);
  ASSERT_NE(cache.Find(64), nullptr);
  EXPECT_EQ(*cache.Find(64), "batch");
  EXPECT_EQ(*cache.Find(500), "evaluation");
  cache.Put(500, "again");
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(*cache.Find(500), "again");
  BoundedCache<int, int> at_least_one(0);
  at_least_one.Put(1, 1);
  EXPECT_EQ(*at_least_one.Find(1), 1);
}

TEST(DescribeConvolution, TheCnnLayersKeepTheirSizeWithSamePadding) {
  // The CNN's two convolutions (worker/core/models.cc): 28x28x1 -> 32 and 14x14x32 -> 64.
  absl::StatusOr<ConvolutionDims> d = DescribeConvolution({28, 28, 1, 32, 5}, 64);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((std::vector<int>{d->n, d->c, d->h, d->w}), (std::vector<int>{64, 1, 28, 28}));
  EXPECT_EQ((std::vector<int>{d->k, d->c, d->r, d->s}), (std::vector<int>{32, 1, 5, 5}));
  EXPECT_EQ((std::vector<int>{d->pad, d->stride, d->dilation}), (std::vector<int>{2, 1, 1}));
  EXPECT_EQ((std::vector<int>{d->p, d->q}), (std::vector<int>{28, 28}));
  d = DescribeConvolution({14, 14, 32, 64, 5}, 7);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->output_elements(), int64_t{7} * 64 * 14 * 14);
  EXPECT_EQ(d->filter_elements(), int64_t{64} * 32 * 5 * 5);
  d = DescribeConvolution({9, 5, 3, 4, 3}, 2);  // not square
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((std::vector<int>{d->p, d->q, d->pad}), (std::vector<int>{9, 5, 1}));
}

TEST(DescribeConvolution, BadSizesNameTheField) {
  EXPECT_EQ(DescribeConvolution({28, 28, 1, 32, 4}, 1).status().message(),
            "convolution kernel: must be odd for 'same' padding, got 4");
  EXPECT_EQ(DescribeConvolution({28, 28, 1, 32, 5}, 0).status().message(),
            "convolution batch: must be at least 1, got 0");
  EXPECT_EQ(DescribeConvolution({28, 0, 1, 32, 5}, 1).status().message(),
            "convolution width: must be at least 1, got 0");
  EXPECT_THAT(DescribeConvolution({1024, 1024, 64, 64, 3}, 64).status().message(),
              HasSubstr("convolution input: 4294967296 elements, more than 2^31 - 1"));
}

TEST(TransposedIndex, TurnsHwioIntoTheOhwiFilterLayoutAndBack) {
  const int k = 3, in = 2, filters = 4;
  const int64_t patch = int64_t{k} * k * in;
  for (int ky = 0; ky < k; ++ky) {
    for (int kx = 0; kx < k; ++kx) {
      for (int c = 0; c < in; ++c) {
        for (int o = 0; o < filters; ++o) {
          const int64_t hwio = ((int64_t{ky} * k + kx) * in + c) * filters + o;
          const int64_t ohwi = ((int64_t{o} * k + ky) * k + kx) * in + c;
          ASSERT_EQ(math::TransposedIndex(hwio, patch, filters), ohwi);
          ASSERT_EQ(math::TransposedIndex(ohwi, filters, patch), hwio);
        }
      }
    }
  }
}

// A direct convolution, loop by loop, in the layouts the layer uses (NHWC images, HWIO kernel),
// standing where cuDNN stands on a GPU: the layer hands it whole batches.
class DirectConvolution final : public ConvolutionKernels {
 public:
  explicit DirectConvolution(const Conv2DShape& s) : s_(s) {}

  void Forward(int batch, const float* x, const float* w, float* y) override {
    ForEachTap(
        batch, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += x[xi] * w[wi]; }, y,
        OutputElements(batch));
  }
  void BackwardFilter(int batch, const float* x, const float* dy, float* dw) override {
    ForEachTap(
        batch, [&](int64_t xi, int64_t wi, int64_t yi) { dw[wi] += x[xi] * dy[yi]; }, dw,
        int64_t{s_.kernel} * s_.kernel * s_.in_channels * s_.filters);
  }
  void BackwardData(int batch, const float* dy, const float* w, float* dx) override {
    ForEachTap(
        batch, [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += w[wi] * dy[yi]; }, dx,
        int64_t{batch} * s_.height * s_.width * s_.in_channels);
  }
  int calls = 0;

 private:
  int64_t OutputElements(int batch) const {
    return int64_t{batch} * s_.height * s_.width * s_.filters;
  }
  // Zeroes `out` (`n` floats), then calls f(x index, w index, y index) for every product.
  template <typename F>
  void ForEachTap(int batch, F f, float* out, int64_t n) {
    ++calls;
    std::fill(out, out + n, 0.0f);
    const int pad = s_.kernel / 2;
    for (int b = 0; b < batch; ++b) {
      for (int oy = 0; oy < s_.height; ++oy) {
        for (int ox = 0; ox < s_.width; ++ox) {
          for (int ky = 0; ky < s_.kernel; ++ky) {
            for (int kx = 0; kx < s_.kernel; ++kx) {
              const int iy = oy + ky - pad, ix = ox + kx - pad;
              if (iy < 0 || iy >= s_.height || ix < 0 || ix >= s_.width) continue;
              for (int c = 0; c < s_.in_channels; ++c) {
                for (int o = 0; o < s_.filters; ++o) {
                  f(((int64_t{b} * s_.height + iy) * s_.width + ix) * s_.in_channels + c,
                    ((int64_t{ky} * s_.kernel + kx) * s_.in_channels + c) * s_.filters + o,
                    ((int64_t{b} * s_.height + oy) * s_.width + ox) * s_.filters + o);
                }
              }
            }
          }
        }
      }
    }
  }
  Conv2DShape s_;
};

// The CPU backend with convolution kernels of its own, as the CUDA backend has cuDNN's.
class DirectConvolutionDevice final : public CpuDevice {
 public:
  std::unique_ptr<ConvolutionKernels> MakeConvolution(const Conv2DShape& shape) override {
    auto kernels = std::make_unique<DirectConvolution>(shape);
    made.push_back(kernels.get());
    return kernels;
  }
  std::vector<DirectConvolution*> made;
};

// The CNN's loss and every gradient through the device's kernels equal those through im2col +
// GEMM, for a full batch and a shorter one, twice (the second pass reuses every buffer).
TEST(DeviceConvolution, TheLayerComputesWhatTheIm2colPathComputes) {
  CpuDevice reference;
  DirectConvolutionDevice direct;
  absl::StatusOr<std::unique_ptr<Model>> a = MakeModel("cnn", reference, 3);
  absl::StatusOr<std::unique_ptr<Model>> b = MakeModel("cnn", direct, 3);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(direct.made.size(), 2u);  // one per convolution layer
  Model& im2col = **a;
  Model& kernels = **b;
  for (int batch : {6, 6, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const Batch b = UniformBatch(batch, im2col.input_size(), im2col.num_classes(),
                                 static_cast<uint64_t>(batch) + 11);
    absl::StatusOr<float> want = im2col.ComputeGradients(b.images, b.labels);
    absl::StatusOr<float> got = kernels.ComputeGradients(b.images, b.labels);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, *want, 1e-5 * (1.0 + *want));
    ASSERT_NO_FATAL_FAILURE(testing::ExpectGradientsNear(kernels, im2col, 1e-4));
  }
  // Each layer ran its kernels once per direction and pass: forward, filter, and data for the
  // second convolution only (the first one's input is the images, which need no gradient).
  EXPECT_EQ(direct.made[0]->calls, 3 * 2);
  EXPECT_EQ(direct.made[1]->calls, 3 * 3);
}

}  // namespace
}  // namespace kubetrain::worker
