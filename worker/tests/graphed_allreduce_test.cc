// All-reduce training whose reduction, update and loss download are captured with the step
// (StepTail; docs/decisions/0010-one-graph-per-step.md), as a GPU job over NCCL runs them: on a
// RecordingDevice, which captures as a GPU does, over a ReplicaCommunicator, whose collectives
// queue device work as NCCL's do.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/data/shard.h"
#include "worker/core/models.h"
#include "worker/runtime/gradient_exchange.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/counting_device.h"
#include "worker/tests/fashion_mnist_fixture.h"
#include "worker/tests/recording_device.h"
#include "worker/tests/replica_communicator.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;

using GraphedAllReduceTest = FashionMnistTest;

// Adam with a decaying rate: the rule changes at every step, so a replay that kept the rule of
// the step it was captured at would train another model.
TrainerOptions AdamOptions(int epochs, bool graphed) {
  TrainerOptions o;
  o.mode = Mode::kAllReduce;
  o.epochs = epochs;
  o.batch_size = 64;
  o.optimizer = "adam";
  o.lr = 0.002;
  o.lr_decay = true;
  o.step_graphs = graphed;
  return o;
}

struct ReplicaRun {
  absl::StatusOr<TrainingSummary> summary;
  int64_t graphs_launched = 0;
  int64_t reductions_issued = 0;  // AllReduceMany calls the host made
};

// Rank 0 of two replicas trains `epochs` epochs of 20 steps.
ReplicaRun TrainRankZero(const Dataset& train, const Dataset& test, int epochs, bool graphed) {
  CpuDevice cpu;
  testing::RecordingDevice device(cpu);
  testing::ReplicaCommunicator comm(device, 2);
  TaskIdentity id{Role::kChief, 0, 2, {}};
  id.communicator = &comm;
  Trainer trainer(AdamOptions(epochs, graphed), id, device, &train, &test, nullptr);
  std::atomic<bool> stop{false};
  ReplicaRun run;
  run.summary = trainer.Run(stop);
  run.graphs_launched = device.graphs_launched();
  run.reductions_issued = comm.all_reduce_many_calls();
  return run;
}

TEST_F(GraphedAllReduceTest, CapturedReductionAndUpdateTrainTheModelUncapturedStepsTrain) {
  const Dataset train = First(small_train(), 2 * 20 * 64);
  const ReplicaRun eager = TrainRankZero(train, small_test(), 2, false);
  const ReplicaRun graphed = TrainRankZero(train, small_test(), 2, true);
  ASSERT_THAT(eager.summary, IsOk());
  ASSERT_THAT(graphed.summary, IsOk());
  EXPECT_EQ(eager.summary->steps, 40);
  EXPECT_EQ(graphed.summary->steps, 40);
  EXPECT_EQ(graphed.summary->test_loss, eager.summary->test_loss);
  EXPECT_EQ(graphed.summary->test_accuracy, eager.summary->test_accuracy);
  EXPECT_EQ(eager.graphs_launched, 0);
  EXPECT_EQ(eager.reductions_issued, 40);
  // Every step after the warm-up is one graph, its reduction inside. The host issued the
  // reduction three times: the warm-up, the capture, and the capture again after the ranks'
  // evaluation at the first epoch's end grew the model's buffers.
  EXPECT_EQ(graphed.graphs_launched, 39);
  EXPECT_EQ(graphed.reductions_issued, 3);
}

// A model and an all-reduce exchange over two replicas, set up and started, on a counted device
// that captures as a GPU does.
struct CountedReplica {
  CpuDevice cpu;
  testing::RecordingDevice recording{cpu};
  testing::CountingDevice device{recording};
  testing::ReplicaCommunicator comm{device, 2};
  std::unique_ptr<Model> model;
  std::unique_ptr<ShardBatches> batches;
  std::unique_ptr<GradientExchange> exchange;
  std::atomic<bool> stop{false};
  // The exchange keeps references to both.
  const TrainerOptions options = AdamOptions(1, true);
  TaskIdentity id{Role::kWorker, 0, 2, {}};

  absl::StatusOr<int64_t> Start(const Dataset& train) {
    id.communicator = &comm;
    ASSIGN_OR_RETURN(model, MakeModel("mlp", device, 1));
    model->UseStepGraphs(true);
    batches = std::make_unique<ShardBatches>(train, ShardSpec{1, 0, 2}, options.batch_size);
    exchange = MakeGradientExchange(
        {options, id, device, *model, nullptr, batches->steps_per_epoch(), stop, nullptr});
    RETURN_IF_ERROR(exchange->Setup());
    return exchange->Start(nullptr);
  }

  // One training step at `pos`, as the trainer runs it; returns the next position.
  absl::StatusOr<int64_t> Step(int64_t pos) {
    ASSIGN_OR_RETURN(const Batch* batch, batches->At(pos));
    RETURN_IF_ERROR(model->ComputeGradients(batch->image_span(), batch->label_span(),
                                            exchange->DeviceLossSlot(), exchange->DeviceTail()));
    ASSIGN_OR_RETURN(ExchangedStep next, exchange->Exchange(pos, 0));
    if (!(next.loss > 0 && next.loss < 10)) {
      return absl::InternalError(absl::StrCat("step at ", pos, " reported loss ", next.loss));
    }
    return next.next;
  }
};

// What the graph saves a GPU, counted: after the warm-up, a step (the capture, then each replay)
// is one launch (forward, backward, the reduction, the update and the loss's download) and one
// host wait, and nothing is uploaded outside the graph.
TEST_F(GraphedAllReduceTest, AReplayedStepIsOneLaunchAndOneHostWait) {
  CountedReplica r;
  absl::StatusOr<int64_t> pos = r.Start(small_train());
  ASSERT_THAT(pos, IsOk());
  for (int step = 0; step < 6; ++step) {
    r.device.Reset();
    pos = r.Step(*pos);
    ASSERT_THAT(pos, IsOk()) << "step " << step;
    const testing::CountingDevice::Counts& c = r.device.counts();
    if (step == 0) {
      EXPECT_GT(c.launches, 10) << "the warm-up is issued kernel by kernel";
      continue;
    }
    EXPECT_EQ(c.launches, 1) << "step " << step;
    EXPECT_EQ(c.host_waits, 1) << "step " << step;
    EXPECT_EQ(c.uploads, 0) << "step " << step;
  }
  EXPECT_EQ(r.model->step_graphs().stats().captures, 1);
  EXPECT_EQ(r.comm.all_reduce_many_calls(), 2);
}

// A reduction that cannot be issued during the capture (the communicator has failed) fails that
// step with the communicator's error; graphs stay on, and the next step is captured.
TEST_F(GraphedAllReduceTest, AReductionThatFailsDuringTheCaptureFailsTheStep) {
  CountedReplica r;
  absl::StatusOr<int64_t> pos = r.Start(small_train());
  ASSERT_THAT(pos, IsOk());
  pos = r.Step(*pos);  // the warm-up
  ASSERT_THAT(pos, IsOk());
  r.comm.FailNextAllReduceMany(absl::UnavailableError("peer gone"));
  EXPECT_THAT(r.Step(*pos), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(r.model->step_graphs().active());
  EXPECT_EQ(r.model->step_graphs().stats().captures, 0);
  ASSERT_THAT(r.Step(*pos), IsOk());
  EXPECT_EQ(r.model->step_graphs().stats().captures, 1);
  EXPECT_EQ(r.model->step_graphs().stats().replays, 1);
}

}  // namespace
}  // namespace kubetrain::worker
