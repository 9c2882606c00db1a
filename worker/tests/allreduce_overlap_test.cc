// --overlap-allreduce: two ranks over Gloo's TCP ring train the same parameters, bit for bit,
// whether each fused buffer's sum starts during backward or after it; with overlap, buffers do
// start during backward (the counter says so), and without it none does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/testing/status_matchers.h"
#include "prometheus/registry.h"
#include "worker/core/cpu/cpu_device.h"
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

}  // namespace
}  // namespace kubetrain::worker
