// End to end in one process: the MLP learns real Fashion-MNIST through the CPU device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/data/batch_iterator.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/core/data/shard.h"
#include "worker/core/models.h"
#include "worker/core/sgd.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

TEST(Training, MlpReachesEightyPercentInOneEpoch) {
  if (!std::filesystem::exists(std::string(kDefaultFashionMnistDir))) {
    GTEST_SKIP() << kDefaultFashionMnistDir
                 << " is absent: apt-get install dataset-fashion-mnist to run this test";
  }
  const auto start = std::chrono::steady_clock::now();
  auto data = LoadFashionMnist();
  ASSERT_TRUE(data.ok()) << data.status();
  CpuDevice device;
  auto model = MakeModel("mlp", device, /*seed=*/1);
  ASSERT_TRUE(model.ok()) << model.status();
  MomentumSgd sgd(device, (*model)->variables(), {.learning_rate = 0.01f, .momentum = 0.9f});

  auto shard = EpochShard(data->train.size(), {.seed = 1, .index = 0, .count = 1}, /*epoch=*/0);
  ASSERT_THAT(shard, IsOk());
  BatchIterator batches(data->train, *std::move(shard), /*batch_size=*/64);
  double last_loss = 0.0;
  while (const Batch* b = batches.Next()) {
    auto loss = (*model)->ComputeGradients(b->image_span(), b->label_span());
    ASSERT_TRUE(loss.ok()) << loss.status();
    sgd.Step();
    last_loss = *loss;
  }
  auto eval = (*model)->Evaluate(data->test);
  ASSERT_TRUE(eval.ok()) << eval.status();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("mlp: 1 epoch, test accuracy %.4f, test loss %.4f, last batch loss %.4f, %.1f s\n",
              eval->accuracy, eval->loss, last_loss, seconds);
  RecordProperty("test_accuracy", std::to_string(eval->accuracy));
  RecordProperty("seconds", std::to_string(seconds));
  EXPECT_EQ(eval->examples, 10000);
  EXPECT_GT(eval->accuracy, 0.80);
  EXPECT_LT(seconds, 60.0);
}

}  // namespace
}  // namespace kubetrain::worker
