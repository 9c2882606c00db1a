#include "worker/core/data/fashion_mnist.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

namespace kubetrain::worker {
namespace {

TEST(FashionMnist, MissingFileNamesPathAndPackage) {
  auto data = LoadFashionMnist("/nonexistent/fashion-mnist");
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(data.status().message(),
            "Fashion-MNIST file /nonexistent/fashion-mnist/train-images-idx3-ubyte.gz not found; "
            "install the Debian package dataset-fashion-mnist "
            "(apt-get install dataset-fashion-mnist) or point --data-dir at a copy");
}

TEST(FashionMnist, NormalizationMatchesPixelStatistics) {
  IdxArray images{{1, 1, 4}, {0, 255, 0, 255}};
  Normalization norm = ComputeNormalization(images);
  EXPECT_FLOAT_EQ(norm.mean, 0.5f);
  EXPECT_FLOAT_EQ(norm.stddev, 0.5f);
}

TEST(FashionMnist, MakeDatasetAppliesNormalization) {
  IdxArray images{{2, 1, 2}, {0, 51, 102, 255}};
  IdxArray labels{{2}, {3, 9}};
  auto data = MakeDataset(images, labels, {0.2f, 0.5f}, "i.gz", "l.gz");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 2);
  EXPECT_EQ(data->example_size(), 2);
  EXPECT_FLOAT_EQ(data->images[0], -0.4f);
  EXPECT_FLOAT_EQ(data->images[1], 0.0f);
  EXPECT_FLOAT_EQ(data->images[3], 1.6f);
  EXPECT_EQ(data->labels, (std::vector<int32_t>{3, 9}));
}

TEST(FashionMnist, MakeDatasetRejectsCountMismatchNamingBothFiles) {
  IdxArray images{{2, 1, 1}, {0, 1}};
  IdxArray labels{{3}, {0, 1, 2}};
  auto data = MakeDataset(images, labels, {}, "i.gz", "l.gz");
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data.status().message(),
            "l.gz holds 3 labels but i.gz holds 2 images: the two files are not of one data set");
}

// A bad labels file is named, not the images file beside it.
TEST(FashionMnist, MakeDatasetNamesTheLabelsFileForABadLabel) {
  IdxArray images{{1, 1, 1}, {0}};
  IdxArray labels{{1}, {10}};
  auto data = MakeDataset(images, labels, {}, "train-images.gz", "train-labels.gz");
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(data.status().message(),
            "train-labels.gz: label 10 of example 0 is out of range (0 to 9)");
  IdxArray flat{{1}, {0}};
  EXPECT_EQ(MakeDataset(images, IdxArray{{1, 1}, {0}}, {}, "i.gz", "l.gz").status().message(),
            "l.gz: holds 2 dimensions; labels are [n]");
  EXPECT_EQ(MakeDataset(flat, labels, {}, "i.gz", "l.gz").status().message(),
            "i.gz: holds 1 dimensions; images are [n, height, width]");
}

TEST(FashionMnist, LoadsRealDatasetStandardised) {
  if (!std::filesystem::exists(std::string(kDefaultFashionMnistDir))) {
    GTEST_SKIP() << kDefaultFashionMnistDir
                 << " is absent: apt-get install dataset-fashion-mnist to run this test";
  }
  auto data = LoadFashionMnist();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->train.size(), 60000);
  EXPECT_EQ(data->test.size(), 10000);
  EXPECT_EQ(data->train.height, 28);
  EXPECT_EQ(data->train.width, 28);
  EXPECT_EQ(data->test.images.size(), 10000u * 784u);
  // Published Fashion-MNIST train statistics on the [0, 1] scale.
  EXPECT_NEAR(data->normalization.mean, 0.2860, 1e-3);
  EXPECT_NEAR(data->normalization.stddev, 0.3530, 1e-3);
  // Balanced classes: 6000 train and 1000 test images each.
  std::vector<int> train_counts(10), test_counts(10);
  for (int32_t l : data->train.labels) ++train_counts[l];
  for (int32_t l : data->test.labels) ++test_counts[l];
  EXPECT_EQ(train_counts, std::vector<int>(10, 6000));
  EXPECT_EQ(test_counts, std::vector<int>(10, 1000));
  double sum = 0.0, sum_sq = 0.0;
  for (float x : data->train.images) {
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(data->train.images.size());
  EXPECT_NEAR(sum / n, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(sum_sq / n - (sum / n) * (sum / n)), 1.0, 1e-4);
}

}  // namespace
}  // namespace kubetrain::worker
