// A test suite over the real Fashion-MNIST data (Debian's dataset-fashion-mnist), loaded once per
// suite and shared read-only by its tests; every test skips, saying why, where it is missing.
#pragma once

#include <gtest/gtest.h>

#include "worker/data/fashion_mnist.h"

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

  static inline FashionMnist* data_ = nullptr;
};

}  // namespace kubetrain::worker
