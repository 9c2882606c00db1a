// --overlap-allreduce: two ranks over Gloo's TCP ring train the same parameters, bit for bit,
// whether each fused buffer's sum starts during backward or after it; with overlap, buffers do
// start during backward (the counter says so), and without it none does; and how the buffers
// are packed for it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/models.h"
#include "worker/runtime/fused_buckets.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/fashion_mnist_fixture.h"
#include "worker/tests/gloo_ranks.h"

namespace kubetrain::worker {
namespace {

using OverlapTest = FashionMnistTest;

struct RanksRun {
  std::vector<absl::StatusOr<TrainingSummary>> results;
  double overlapped = 0;
};

RanksRun TrainTwoRanks(const Dataset& train, const Dataset& test, bool overlap,
                       ps::WireFloat wire) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {"overlap", "chief", "0"});
  RanksRun run{std::vector<absl::StatusOr<TrainingSummary>>(2, absl::UnknownError("not run"))};
  std::vector<absl::Status> joined =
      testing::RunGlooRanks(2, [&](int rank, Communicator& comm) -> absl::Status {
        TrainerOptions o;
        o.mode = Mode::kAllReduce;
        o.epochs = 1;
        o.batch_size = 32;
        o.fusion_bytes = 64 << 10;  // the MLP's ~235k parameters in several buffers
        o.overlap_allreduce = overlap;
        o.gradient_compression = wire;
        CpuDevice device;
        TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, 2, {}};
        id.communicator = &comm;
        std::atomic<bool> stop{false};
        Trainer trainer(o, id, device, &train, &test, rank == 0 ? &metrics : nullptr);
        run.results[rank] = trainer.Run(stop);
        return run.results[rank].status();
      });
  for (int rank = 0; rank < 2; ++rank) {
    if (!joined[rank].ok()) run.results[rank] = joined[rank];
  }
  run.overlapped = metrics.overlapped_buffers.Value();
  return run;
}

TEST_F(OverlapTest, SumsDuringBackwardTrainTheSameParametersBitForBit) {
  const Dataset train = First(data_->train, 4000), test = First(data_->test, 1000);
  RanksRun after = TrainTwoRanks(train, test, /*overlap=*/false, ps::WireFloat::kFloat32);
  RanksRun during = TrainTwoRanks(train, test, /*overlap=*/true, ps::WireFloat::kFloat32);
  for (const RanksRun* r : {&after, &during}) {
    ASSERT_TRUE(r->results[0].ok()) << r->results[0].status();
    ASSERT_TRUE(r->results[1].ok()) << r->results[1].status();
  }
  EXPECT_EQ(during.results[0]->steps, 62);
  // The evaluation of the final parameters is the same to the last bit: so are they. (Two
  // ranks: each element's sum is a + b whatever buffer it is in.)
  EXPECT_EQ(during.results[0]->test_loss, after.results[0]->test_loss);
  EXPECT_EQ(during.results[0]->test_accuracy, after.results[0]->test_accuracy);
  EXPECT_EQ(after.overlapped, 0);
  // Every buffer but the last (which carries the loss) starts during backward, every step.
  EXPECT_GE(during.overlapped, 62);
}

// With fp16 on the wire too (which element is rounded where depends on the buffers, so the
// bits may differ from the run without overlap; every rank still ends with the same ones).
TEST_F(OverlapTest, OverlapsWithCompression) {
  const Dataset train = First(data_->train, 4000), test = First(data_->test, 1000);
  RanksRun during = TrainTwoRanks(train, test, /*overlap=*/true, ps::WireFloat::kFloat16);
  ASSERT_TRUE(during.results[0].ok()) << during.results[0].status();
  ASSERT_TRUE(during.results[1].ok()) << during.results[1].status();
  EXPECT_GT(during.results[0]->test_accuracy, 0.6);
  EXPECT_GE(during.overlapped, 62);
}

std::vector<std::vector<std::string>> BufferVariables(const FusedBuckets& buckets) {
  std::vector<std::vector<std::string>> out;
  for (const FusedBucket& b : buckets.buckets()) {
    std::vector<std::string>& names = out.emplace_back();
    for (const FusedBucket::Member& m : b.members) names.push_back(m.variable->name);
  }
  return out;
}

// The CNN's 1.8 MB of gradients are far under the default 64 MiB threshold. Summed after
// backward they stay one buffer; for overlap the last layers' buffer closes once it passes
// 1 MiB, as DDP's first bucket does, so their sum goes out while backward goes on through the
// convolutions. Without that rule --overlap-allreduce overlapped nothing on the CNN.
TEST(FusedBucketsTest, OverlapSendsTheLastLayersOfAModelUnderTheThresholdFirst) {
  CpuDevice device;
  const int64_t threshold = int64_t{64} << 20;
  auto after_model = MakeCnn(device);
  ASSERT_THAT(after_model, kubetrain::testing::IsOk());
  const FusedBuckets after(device, **after_model, threshold, /*reverse=*/false, 1);
  EXPECT_EQ(after.buckets().size(), 1u);

  auto cnn = MakeCnn(device);
  ASSERT_THAT(cnn, kubetrain::testing::IsOk());
  const FusedBuckets during(device, **cnn, threshold, /*reverse=*/true, 1);
  EXPECT_THAT(
      BufferVariables(during),
      ::testing::ElementsAre(
          ::testing::ElementsAre("logits/bias", "logits/kernel", "dense1/bias", "dense1/kernel"),
          ::testing::ElementsAre("conv2/bias", "conv2/kernel", "conv1/bias", "conv1/kernel")));
  EXPECT_GE(during.buckets()[0].buffer.bytes(), size_t{FusedBuckets::kFirstBufferBytes});
  EXPECT_EQ(during.buckets()[1].elements, (25 * 32 * 64 + 64) + (25 * 32 + 32) + 1);  // + loss

  // A threshold under 1 MiB bounds the first buffer as it bounds the others; a model under
  // 1 MiB in all (the MLP, ~0.9 MB) stays one buffer.
  auto small_threshold = MakeCnn(device);
  ASSERT_THAT(small_threshold, kubetrain::testing::IsOk());
  const FusedBuckets bounded(device, **small_threshold, int64_t{1} << 20, /*reverse=*/true, 1);
  EXPECT_EQ(bounded.buckets().size(), 3u);  // logits; dense1/kernel alone (1.6 MB); the rest
  auto mlp = MakeMlp(device);
  ASSERT_THAT(mlp, kubetrain::testing::IsOk());
  EXPECT_EQ(FusedBuckets(device, **mlp, threshold, /*reverse=*/true, 1).buckets().size(), 1u);
}

}  // namespace
}  // namespace kubetrain::worker
