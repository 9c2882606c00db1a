// The per-element (gather) forms of worker/core/kernels_math.h, compiled for the host, against
// CpuDevice's loops: the CUDA kernels run exactly these functions, one thread per element, so
// agreeing here means the GPU's index math agrees with the CPU reference.
#include "worker/core/kernels_math.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/random.h"
#include "worker/tests/random_images.h"

namespace kubetrain::worker {
namespace {

std::string Describe(const ConvGeometry& g) {
  return absl::StrCat("batch=", g.batch, " h=", g.height, " w=", g.width, " c=", g.channels,
                      " k=", g.kernel, " pad=", g.pad, " stride=", g.stride);
}

// Hand-picked edge cases (padding, stride 2, odd sizes, a kernel as large as the padded image)
// plus random geometries.
std::vector<ConvGeometry> ConvGeometries() {
  std::vector<ConvGeometry> out = {
      {1, 5, 5, 1, 3, 1, 1}, {2, 7, 6, 3, 3, 0, 2}, {1, 6, 7, 2, 5, 2, 2}, {3, 4, 4, 1, 5, 2, 1},
      {1, 1, 1, 4, 1, 0, 1}, {2, 9, 5, 2, 4, 1, 3}, {1, 3, 3, 2, 5, 1, 1},
  };
  Rng rng(7);
  while (out.size() < 40) {
    ConvGeometry g;
    g.batch = 1 + static_cast<int>(rng.Below(3));
    g.height = 1 + static_cast<int>(rng.Below(11));
    g.width = 1 + static_cast<int>(rng.Below(11));
    g.channels = 1 + static_cast<int>(rng.Below(4));
    g.kernel = 1 + static_cast<int>(rng.Below(5));
    g.pad = static_cast<int>(rng.Below(3));
    g.stride = 1 + static_cast<int>(rng.Below(3));
    if (g.height + 2 * g.pad >= g.kernel && g.width + 2 * g.pad >= g.kernel) out.push_back(g);
  }
  return out;
}

std::vector<PoolGeometry> PoolGeometries() {
  std::vector<PoolGeometry> out = {{1, 2, 2, 1}, {2, 5, 7, 3}, {1, 6, 4, 2}, {3, 3, 3, 1}};
  Rng rng(8);
  while (out.size() < 30) {
    out.push_back({1 + static_cast<int>(rng.Below(3)), 2 + static_cast<int>(rng.Below(9)),
                   2 + static_cast<int>(rng.Below(9)), 1 + static_cast<int>(rng.Below(5))});
  }
  return out;
}

class KernelsMathTest : public ::testing::Test {
 protected:
  CpuDevice cpu_;
};

TEST_F(KernelsMathTest, Im2ColElementMatchesCpuIm2Col) {
  for (const ConvGeometry& g : ConvGeometries()) {
    SCOPED_TRACE(Describe(g));
    const std::vector<float> input = RandomVector(g.input_size(), 1);
    std::vector<float> col(static_cast<size_t>(g.col_rows() * g.col_cols()));
    cpu_.Im2Col(g, input.data(), col.data());
    for (int64_t r = 0; r < g.col_rows(); ++r) {
      for (int64_t c = 0; c < g.col_cols(); ++c) {
        ASSERT_EQ(g.Im2ColElement(input.data(), r, c), col[r * g.col_cols() + c])
            << "row " << r << " col " << c;
      }
    }
  }
}

// Bit-equal, not merely close: the gather adds each element's contributions in the CPU's order.
TEST_F(KernelsMathTest, Col2ImElementMatchesCpuCol2ImBitForBit) {
  for (const ConvGeometry& g : ConvGeometries()) {
    SCOPED_TRACE(Describe(g));
    const std::vector<float> col = RandomVector(g.col_rows() * g.col_cols(), 2);
    std::vector<float> want(static_cast<size_t>(g.input_size()), 99.0f);
    cpu_.Col2Im(g, col.data(), want.data());
    for (int64_t i = 0; i < g.input_size(); ++i) {
      ASSERT_EQ(g.Col2ImElement(col.data(), i), want[i]) << "input element " << i;
    }
  }
}

// Each input element's gradient is the sum over exactly the column entries that read it: a
// window range off by one either way would miss or add a tap. Counting with an all-ones column
// matrix makes that visible as an integer.
TEST_F(KernelsMathTest, Col2ImElementCountsEveryTapOnce) {
  for (const ConvGeometry& g : ConvGeometries()) {
    SCOPED_TRACE(Describe(g));
    std::vector<float> taps(static_cast<size_t>(g.input_size()), 0.0f);
    for (int64_t r = 0; r < g.col_rows(); ++r) {
      for (int ky = 0; ky < g.kernel; ++ky) {
        for (int kx = 0; kx < g.kernel; ++kx) {
          const int64_t pixel = g.SourcePixel(r, ky, kx);
          if (pixel < 0) continue;
          for (int c = 0; c < g.channels; ++c) taps[pixel * g.channels + c] += 1.0f;
        }
      }
    }
    const std::vector<float> ones(static_cast<size_t>(g.col_rows() * g.col_cols()), 1.0f);
    for (int64_t i = 0; i < g.input_size(); ++i) {
      ASSERT_EQ(g.Col2ImElement(ones.data(), i), taps[i]) << "input element " << i;
    }
  }
}

TEST_F(KernelsMathTest, PoolElementMatchesCpuMaxPool) {
  for (const PoolGeometry& g : PoolGeometries()) {
    SCOPED_TRACE(absl::StrCat("batch=", g.batch, " h=", g.height, " w=", g.width));
    const std::vector<float> input = RandomVector(g.input_size(), 3);
    std::vector<float> output(static_cast<size_t>(g.output_size()));
    std::vector<int32_t> argmax(output.size());
    cpu_.MaxPool2x2(g, input.data(), output.data(), argmax.data());
    for (int64_t o = 0; o < g.output_size(); ++o) {
      int32_t winner = -1;
      ASSERT_EQ(g.PoolElement(input.data(), o, &winner), output[o]) << "output " << o;
      ASSERT_EQ(winner, argmax[o]) << "output " << o;
    }
  }
}

// Ties included: a quantised input makes windows with equal taps common, where the first tap in
// window order must win on both paths.
TEST_F(KernelsMathTest, PoolGradElementMatchesCpuMaxPoolGrad) {
  for (const PoolGeometry& g : PoolGeometries()) {
    SCOPED_TRACE(absl::StrCat("batch=", g.batch, " h=", g.height, " w=", g.width));
    std::vector<float> input = RandomVector(g.input_size(), 4);
    for (float& x : input) x = static_cast<float>(static_cast<int>(x * 2.0f));  // -1, 0, 1
    std::vector<float> output(static_cast<size_t>(g.output_size()));
    std::vector<int32_t> argmax(output.size());
    cpu_.MaxPool2x2(g, input.data(), output.data(), argmax.data());
    const std::vector<float> output_grad = RandomVector(g.output_size(), 5);
    std::vector<float> want(static_cast<size_t>(g.input_size()), 99.0f);
    cpu_.MaxPool2x2Grad(g, output_grad.data(), argmax.data(), want.data());
    for (int64_t i = 0; i < g.input_size(); ++i) {
      ASSERT_EQ(g.PoolGradElement(output_grad.data(), argmax.data(), i), want[i])
          << "input element " << i;
    }
  }
}

// The column sums a GPU computes, evaluated on the host in the kernels' order: lane sums, then
// chunk sums, then the column total.
std::vector<float> PlannedColumnSums(const std::vector<float>& x, int rows, int cols) {
  const math::ColumnSumPlan plan{rows, cols};
  std::vector<float> sums(static_cast<size_t>(cols));
  std::vector<float> chunk_sums(static_cast<size_t>(plan.chunks()));
  std::vector<float> lane_sums(math::ColumnSumPlan::kLanes);
  for (int c = 0; c < cols; ++c) {
    for (int chunk = 0; chunk < plan.chunks(); ++chunk) {
      for (int lane = 0; lane < math::ColumnSumPlan::kLanes; ++lane) {
        lane_sums[lane] = plan.LaneSum(x.data(), chunk, lane, c);
      }
      chunk_sums[chunk] =
          math::ColumnSumPlan::AddInOrder(lane_sums.data(), math::ColumnSumPlan::kLanes, 1);
    }
    sums[c] = math::ColumnSumPlan::AddInOrder(chunk_sums.data(), plan.chunks(), 1);
  }
  return sums;
}

TEST_F(KernelsMathTest, ColumnSumPlanMatchesCpuBiasGrad) {
  // Row counts below, at and around the chunk size and the lane count, and many chunks.
  const int kChunk = math::ColumnSumPlan::kChunkRows;
  for (const int rows : {0, 1, 7, 8, 9, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 5, 5000}) {
    for (const int cols : {1, 10, 33}) {
      SCOPED_TRACE(absl::StrCat("rows=", rows, " cols=", cols));
      const std::vector<float> x = RandomVector(static_cast<int64_t>(rows) * cols, 6);
      std::vector<float> want(static_cast<size_t>(cols), 99.0f);
      cpu_.BiasGrad(rows, cols, x.data(), want.data());
      const std::vector<float> got = PlannedColumnSums(x, rows, cols);
      for (int c = 0; c < cols; ++c) {
        // Different summation orders of values in [-1, 1): the error grows like sqrt(rows).
        ASSERT_NEAR(got[c], want[c], 1e-5 * (1.0 + rows)) << "column " << c;
      }
    }
  }
}

// Integers sum exactly in any order, so every row must be counted exactly once per column.
// The fused update's thread-to-element map: every element of every slice exactly once, in its
// own slice and place, empty slices included.
TEST(UpdateSlices, EveryElementBelongsToItsOwnSliceOnce) {
  const std::vector<int64_t> sizes = {5, 0, 1, 7, 0, 0, 3, 0};
  math::UpdateSlices s;
  for (int64_t n : sizes) {
    s.begin[s.count + 1] = s.begin[s.count] + n;
    ++s.count;
  }
  ASSERT_EQ(s.total(), 16);
  std::vector<std::vector<int>> seen(sizes.size());
  for (int64_t i = 0; i < s.total(); ++i) {
    const int k = s.SliceOf(i);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, s.count);
    ASSERT_GE(i, s.begin[k]);
    ASSERT_LT(i, s.begin[k + 1]) << "element " << i << " given to slice " << k;
    seen[static_cast<size_t>(k)].push_back(static_cast<int>(i - s.begin[k]));
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<int> want(static_cast<size_t>(sizes[k]));
    for (size_t j = 0; j < want.size(); ++j) want[j] = static_cast<int>(j);
    EXPECT_EQ(seen[k], want) << "slice " << k;
  }
}

TEST(FusedUpdateLaunches, OnePerThirtyTwoSlices) {
  EXPECT_EQ(FusedUpdateLaunches(0), 0);
  EXPECT_EQ(FusedUpdateLaunches(1), 1);
  EXPECT_EQ(FusedUpdateLaunches(math::UpdateSlices::kMax), 1);
  EXPECT_EQ(FusedUpdateLaunches(math::UpdateSlices::kMax + 1), 2);
}

TEST_F(KernelsMathTest, ColumnSumPlanCoversEveryRowOnce) {
  const int kChunk = math::ColumnSumPlan::kChunkRows;
  for (const int rows : {1, 9, kChunk, kChunk + 1, 7 * kChunk + 3}) {
    const int cols = 3;
    std::vector<float> x(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c)
        x[static_cast<size_t>(r) * cols + c] = static_cast<float>(r + 1);
    }
    const std::vector<float> got = PlannedColumnSums(x, rows, cols);
    const float want = static_cast<float>(static_cast<int64_t>(rows) * (rows + 1) / 2);
    for (int c = 0; c < cols; ++c) EXPECT_EQ(got[c], want) << "rows=" << rows << " column " << c;
  }
}

}  // namespace
}  // namespace kubetrain::worker
