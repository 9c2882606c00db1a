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
    if (!data.ok()) return;
    data_ = new FashionMnist(std::move(*data));
    small_train_ = new Dataset(First(data_->train, kSmallTrainExamples));
    small_test_ = new Dataset(First(data_->test, kSmallTestExamples));
  }
  static void TearDownTestSuite() {
    delete data_;
    delete small_train_;
    delete small_test_;
    data_ = nullptr;
    small_train_ = small_test_ = nullptr;
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

  // The first 12,800 training and 2,000 test examples, for tests of what a run does rather than
  // how well it learns: an epoch is 200 steps of 64 (100 for each of two workers) and learns
  // well past chance in a fifth of the whole set's time, which counts most under the sanitizers.
  static constexpr int64_t kSmallTrainExamples = 12800;
  static constexpr int64_t kSmallTestExamples = 2000;
  // Test accuracy well past chance (10 classes) that a run on the small sets reaches, with room
  // (measured: 0.81-0.86).
  static constexpr double kLearned = 0.75;
  // The first 25,600 training examples: 400 gradients of 64, room for an elastic job's joins and
  // leaves (twice the small set's).
  static Dataset ElasticTrain() { return First(data_->train, 25600); }
  static const Dataset& small_train() { return *small_train_; }
  static const Dataset& small_test() { return *small_test_; }

  static inline FashionMnist* data_ = nullptr;
  static inline Dataset* small_train_ = nullptr;
  static inline Dataset* small_test_ = nullptr;
};

}  // namespace kubetrain::worker
