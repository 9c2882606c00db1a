// A test suite over the real Fashion-MNIST data (Debian's dataset-fashion-mnist), loaded once per
// suite and shared read-only by its tests; every test skips, saying why, where it is missing.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "worker/core/data/dataset.h"
#include "worker/core/data/fashion_mnist.h"

namespace kubetrain::worker {

class FashionMnistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto data = LoadFashionMnist();
    if (data.ok()) data_ = new FashionMnist(std::move(*data));
  }
  static void TearDownTestSuite() {
    delete data_;
    data_ = nullptr;
  }
  void SetUp() override {
    if (data_ == nullptr) GTEST_SKIP() << "Fashion-MNIST not installed (dataset-fashion-mnist)";
  }

  // The first `n` examples of `all`, for a run of a few steps.
  static Dataset First(const Dataset& all, int64_t n) {
    Dataset d;
    d.height = all.height;
    d.width = all.width;
    d.channels = all.channels;
    d.num_classes = all.num_classes;
    d.images.assign(all.images.begin(), all.images.begin() + n * all.example_size());
    d.labels.assign(all.labels.begin(), all.labels.begin() + n);
    return d;
  }

  static inline FashionMnist* data_ = nullptr;
};

}  // namespace kubetrain::worker
