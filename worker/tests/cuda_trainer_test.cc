// All-reduce training on GPUs: one thread per rank, each with its own CudaDevice (rank r on GPU
// r) and NCCL communicator, rendezvous through a real coordinator on 127.0.0.1. Needs a GPU (and
// two for the two-rank test: NCCL refuses two ranks on one GPU); skips, saying why, without.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/testing/status_matchers.h"
#include "worker/collective/coordinator.h"
#include "worker/cuda/cuda_device.h"
#include "worker/cuda/nccl_communicator.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/fashion_mnist_fixture.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

class CudaTrainerTest : public FashionMnistTest {
 protected:
  // Skips unless `needed` CUDA devices are visible.
  static bool Skip(int needed, std::string* why) {
    const CudaProbe probe = ProbeCudaDevices();
    if (probe.device_count == 0) {
      *why = std::string(probe.status.message());
      return true;
    }
    if (probe.device_count < needed) {
      *why = absl::StrCat("needs ", needed, " CUDA devices (NCCL puts each rank on a GPU of its ",
                          "own), ", probe.device_count, " visible");
      return true;
    }
    return false;
  }

  // Trains `ranks` ranks for one epoch of the MLP, rank r on GPU r; every rank's summary. With
  // `examples`, the epoch is the first `examples` of the training set, scored on as many of the
  // test set's. `graphed` captures the steps (TrainerOptions::step_graphs).
  std::vector<absl::StatusOr<TrainingSummary>> Train(int ranks, int64_t examples = 0,
                                                     bool graphed = false) {
    std::optional<Dataset> train, test;
    if (examples > 0) {
      train = First(data_->train, examples);
      test = First(data_->test, examples);
    }
    const Dataset* train_set = train ? &*train : &data_->train;
    const Dataset* test_set = test ? &*test : &data_->test;
    auto server = CoordinatorServer::Start({"127.0.0.1:0", ranks});
    EXPECT_TRUE(server.ok()) << server.status();
    std::vector<absl::StatusOr<TrainingSummary>> results(ranks, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < ranks; ++rank) {
      threads.emplace_back([&, rank] {
        results[rank] = [&]() -> absl::StatusOr<TrainingSummary> {
          ASSIGN_OR_RETURN(auto store,
                           CoordinatorClient::Connect(
                               {.address = "127.0.0.1:" + std::to_string((*server)->port()),
                                .rank = rank,
                                .world_size = ranks}));
          ASSIGN_OR_RETURN(auto device, CudaDevice::Create({.ordinal = rank}));
          ASSIGN_OR_RETURN(
              auto comm, NcclCommunicator::Create(*device, *store, rank, ranks, absl::Seconds(60)));
          TrainerOptions o;
          o.mode = Mode::kAllReduce;
          o.epochs = 1;
          o.batch_size = 64;
          o.step_graphs = graphed;
          TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, ranks, {}};
          id.communicator = comm.get();
          std::atomic<bool> stop{false};
          Trainer trainer(o, id, *device, train_set, test_set, nullptr);
          return trainer.Run(stop);
        }();
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }
};

// One rank: the whole all-reduce step path on a GPU (gradients in the fused buffer, the loss
// on the device, the grouped NCCL call, one wait per step) trains the model.
TEST_F(CudaTrainerTest, OneRankTrainsThroughNccl) {
  std::string why;
  if (Skip(1, &why)) GTEST_SKIP() << why;
  auto results = Train(1);
  ASSERT_THAT(results[0], IsOk());
  EXPECT_EQ(results[0]->steps, 937);
  EXPECT_GT(results[0]->test_accuracy, 0.80);
}

// The same step path over 20 batches: the run compute-sanitizer's racecheck makes of this suite
// (worker/CMakeLists.txt), since a whole epoch under racecheck takes about 10 minutes on an H200
// and runs no kernel, shape or launch that these batches do not.
TEST_F(CudaTrainerTest, OneRankTrainsTwentyBatchesThroughNccl) {
  std::string why;
  if (Skip(1, &why)) GTEST_SKIP() << why;
  auto results = Train(1, 20 * 64);
  ASSERT_THAT(results[0], IsOk());
  EXPECT_EQ(results[0]->steps, 20);
  EXPECT_GT(results[0]->test_accuracy, 0.3);  // chance is 0.1
}

// Each step after the warm-up captured with its NCCL all-reduce, the update and the loss's
// download (docs/decisions/0010): the run ends with the model of uncaptured steps, to the bit.
TEST_F(CudaTrainerTest, OneRankCapturedWithItsAllReduceTrainsAsUncaptured) {
  std::string why;
  if (Skip(1, &why)) GTEST_SKIP() << why;
  auto eager = Train(1, 40 * 64, false);
  auto graphed = Train(1, 40 * 64, true);
  ASSERT_THAT(eager[0], IsOk());
  ASSERT_THAT(graphed[0], IsOk());
  EXPECT_EQ(graphed[0]->steps, 40);
  EXPECT_EQ(graphed[0]->test_loss, eager[0]->test_loss);
  EXPECT_EQ(graphed[0]->test_accuracy, eager[0]->test_accuracy);
}

// Two ranks on two GPUs learn together and end with bit-identical parameters (EndTraining
// compares their checksums and fails the run otherwise).
TEST_F(CudaTrainerTest, TwoRanksOnTwoGpusLearnTogether) {
  std::string why;
  if (Skip(2, &why)) GTEST_SKIP() << why;
  auto results = Train(2);
  ASSERT_THAT(results[0], IsOk());
  ASSERT_THAT(results[1], IsOk());
  EXPECT_EQ(results[0]->steps, 468);
  EXPECT_GT(results[0]->test_accuracy, 0.80);
}

}  // namespace
}  // namespace kubetrain::worker
