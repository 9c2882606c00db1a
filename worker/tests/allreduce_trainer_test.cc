// All-reduce training end to end in one process: a coordinator on 127.0.0.1, one thread per rank
// with its own CPU device and Gloo communicator over loopback TCP.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <thread>

#include "common/status.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "prometheus/registry.h"
#include "ps/optimizer.h"
#include "ps/server.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/elastic_group.h"
#include "worker/collective/gloo_communicator.h"
#include "worker/collective/shm_communicator.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/core/data/shard.h"
#include "worker/core/models.h"
#include "worker/runtime/allreduce_agreement.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/exchange_allreduce.h"
#include "worker/runtime/gradient_exchange.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/counting_device.h"
#include "worker/tests/fashion_mnist_fixture.h"
#include "worker/tests/gloo_ranks.h"
#include "worker/tests/random_images.h"
#include "worker/tests/recording_device.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::FreshTempDir;
using ::kubetrain::testing::IsOk;
using ::kubetrain::worker::testing::CountingDevice;

TrainerOptions Options(int epochs, const std::string& checkpoint_dir) {
  TrainerOptions o;
  o.mode = Mode::kAllReduce;
  o.epochs = epochs;
  o.batch_size = 64;
  o.checkpoint_dir = checkpoint_dir;
  return o;
}

enum class Transport { kGloo, kSharedMemory };

// Runs one training thread per rank after a Gloo (or shared-memory) rendezvous through a real
// coordinator. Rank r runs with options[r] and stop flag stops[r]; returns every rank's result.
// With `graphs_launched`, each rank runs on a RecordingDevice (which captures graphs as a GPU
// does) over its CPU, and graphs_launched[r] is the number of graphs rank r launched.
std::vector<absl::StatusOr<TrainingSummary>> TrainRanks(
    const std::vector<TrainerOptions>& options, const Dataset& train, const Dataset& test,
    std::vector<std::atomic<bool>>* stops = nullptr, WorkerMetrics* chief_metrics = nullptr,
    absl::Duration timeout = absl::Seconds(30), Transport transport = Transport::kGloo,
    std::vector<int64_t>* graphs_launched = nullptr) {
  const int n = static_cast<int>(options.size());
  auto server = CoordinatorServer::Start({"127.0.0.1:0", n});
  EXPECT_TRUE(server.ok()) << server.status();
  std::vector<absl::StatusOr<TrainingSummary>> results(n, absl::UnknownError("not run"));
  std::vector<std::atomic<bool>> no_stop(n);
  if (stops == nullptr) stops = &no_stop;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto store =
          CoordinatorClient::Connect({.address = "127.0.0.1:" + std::to_string((*server)->port()),
                                      .rank = rank,
                                      .world_size = n});
      if (!store.ok()) {
        results[rank] = store.status();
        return;
      }
      absl::StatusOr<std::unique_ptr<Communicator>> comm;
      if (transport == Transport::kSharedMemory) {
        auto shm = ShmCommunicator::TryCreate(
            **store, {.rank = rank, .size = n, .timeout = timeout, .stop = &(*stops)[rank]});
        if (shm.ok() && *shm == nullptr) shm = absl::InternalError("no shared memory here");
        if (shm.ok()) comm = std::move(*shm);
        if (!shm.ok()) comm = shm.status();
      } else {
        auto gloo =
            GlooCommunicator::Create(**store, {.rank = rank, .size = n, .timeout = timeout});
        if (gloo.ok()) comm = std::move(*gloo);
        if (!gloo.ok()) comm = gloo.status();
      }
      if (!comm.ok()) {
        results[rank] = comm.status();
        return;
      }
      CpuDevice cpu;
      testing::RecordingDevice recording(cpu);
      Device& device = graphs_launched != nullptr ? static_cast<Device&>(recording) : cpu;
      TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, n, {}};
      id.communicator = comm->get();
      Trainer trainer(options[rank], id, device, &train, &test,
                      rank == 0 ? chief_metrics : nullptr);
      results[rank] = trainer.Run((*stops)[rank]);
      if (graphs_launched != nullptr) (*graphs_launched)[rank] = recording.graphs_launched();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// Asserts that every rank's training succeeded and expects each to have run `steps` steps.
void ExpectEveryRankRan(const std::vector<absl::StatusOr<TrainingSummary>>& results,
                        int64_t steps) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    ASSERT_TRUE(results[rank].ok()) << "rank " << rank << ": " << results[rank].status();
    EXPECT_EQ(results[rank]->steps, steps) << "rank " << rank;
  }
}

using AllReduceTrainerTest = FashionMnistTest;

TEST_F(AllReduceTrainerTest, TwoRanksLearnTogetherInLockstep) {
  const std::string dir = FreshTempDir("allreduce_learn");
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {"t", "chief", "0"});
  auto results =
      TrainRanks({Options(1, dir), Options(1, "")}, small_train(), small_test(), nullptr, &metrics);
  // 6400 examples per rank, 64 per step: 100 steps, each averaging both ranks' gradients.
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankRan(results, 100));
  EXPECT_GT(results[0]->test_accuracy, kLearned);
  EXPECT_EQ(metrics.steps.Value(), 100);
  EXPECT_EQ(metrics.global_step.Value(), 100);
  EXPECT_GT(metrics.sent_bytes.Value(), 0);
  EXPECT_FALSE(results[0]->checkpoint.empty());
}

// --cuda-graphs in all-reduce mode, on devices that capture as a GPU does: each rank's steps
// after its warm-up are graph launches, the exchange and the update run between them, and both
// ranks end with the model uncaptured steps train.
TEST_F(AllReduceTrainerTest, CapturedStepsTrainTheModelUncapturedStepsTrain) {
  const Dataset train = First(small_train(), 2 * 40 * 64);
  auto run = [&](bool graphed, std::vector<int64_t>& launched) {
    TrainerOptions o = Options(1, "");
    o.step_graphs = graphed;
    return TrainRanks({o, o}, train, small_test(), nullptr, nullptr, absl::Seconds(30),
                      Transport::kGloo, &launched);
  };
  std::vector<int64_t> eager_launches(2), graphed_launches(2);
  auto eager = run(false, eager_launches);
  auto graphed = run(true, graphed_launches);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_THAT(eager[rank], IsOk()) << "rank " << rank;
    ASSERT_THAT(graphed[rank], IsOk()) << "rank " << rank;
    EXPECT_EQ(graphed[rank]->steps, 40);
    EXPECT_EQ(eager_launches[rank], 0);
    // The first step of each rank is its warm-up.
    EXPECT_EQ(graphed_launches[rank], 39) << "rank " << rank;
  }
  EXPECT_EQ(graphed[0]->test_loss, eager[0]->test_loss);
  EXPECT_EQ(graphed[0]->test_accuracy, eager[0]->test_accuracy);
}

// A chief restarted after the run ended: its peers finished and are gone, so it must not wait to
// connect to them. kubetrain-worker asks FinishedRun before it connects anything.
TEST_F(AllReduceTrainerTest, AChiefRestartedAfterItsRunEndedFinishesWithoutItsPeers) {
  const std::string dir = FreshTempDir("allreduce_restarted_chief");
  auto results = TrainRanks({Options(1, dir), Options(1, "")}, small_train(), small_test());
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();

  CpuDevice device;
  Trainer chief(Options(1, dir), {Role::kChief, 0, 2, {}}, device, &small_train(), &small_test(),
                nullptr);
  std::atomic<bool> stop{false};
  auto over = chief.FinishedRun(stop);
  ASSERT_TRUE(over.ok()) << over.status();
  ASSERT_TRUE(over->has_value());
  EXPECT_EQ((*over)->steps, 100);
  EXPECT_EQ((*over)->checkpoint, results[0]->checkpoint);
  // Alone, where the ranks had evaluated it together (summing their losses as floats).
  EXPECT_NEAR((*over)->test_loss, results[0]->test_loss, 1e-6);
  EXPECT_EQ((*over)->test_accuracy, results[0]->test_accuracy);
  EXPECT_EQ((*over)->examples_per_second, 0);

  // A chief whose latest checkpoint is from halfway through has training left: FinishedRun
  // leaves it to Run.
  const std::string halfway = FreshTempDir("allreduce_restarted_chief_halfway");
  auto state = Checkpointer({dir, 3}).LoadLatest("mlp");
  ASSERT_TRUE(state.ok() && state->has_value()) << state.status();
  (*state)->global_step = 50;
  ASSERT_THAT(Checkpointer({halfway, 3}).Save(**state, "mlp"), IsOk());
  Trainer resumed(Options(1, halfway), {Role::kChief, 0, 2, {}}, device, &small_train(),
                  &small_test(), nullptr);
  auto left = resumed.FinishedRun(stop);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_FALSE(left->has_value());
}

// With two ranks the all-reduce sum g0 + g1 and the ps's average of the same two gradients are
// the same floats (addition of two numbers commutes; halving is exact), and both apply the
// optimizer through ps/update_rule.h: the two modes must train bit-identical models.
TEST_F(AllReduceTrainerTest, TwoRanksReproducePsSyncTrainingExactly) {
  auto allreduce = TrainRanks({Options(1, ""), Options(1, "")}, small_train(), small_test());
  ASSERT_TRUE(allreduce[0].ok()) << allreduce[0].status();

  auto ps = ps::PsServer::Start({.address = "127.0.0.1:0"}, nullptr);
  ASSERT_TRUE(ps.ok()) << ps.status();
  std::vector<absl::StatusOr<TrainingSummary>> results(2, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      CpuDevice device;
      TrainerOptions o = Options(1, "");
      o.mode = Mode::kPsSync;
      TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, 2, {(*ps)->address()}};
      Trainer trainer(o, id, device, &small_train(), &small_test(), nullptr);
      std::atomic<bool> stop{false};
      results[rank] = trainer.Run(stop);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  EXPECT_EQ(results[0]->steps, allreduce[0]->steps);
  // The ps-sync chief evaluates alone; the all-reduce ranks each evaluate half and sum their
  // losses as floats, in another order.
  EXPECT_NEAR(results[0]->test_loss, allreduce[0]->test_loss, 1e-6);
  EXPECT_EQ(results[0]->test_accuracy, allreduce[0]->test_accuracy);
}

// The same job over shared memory (the processes of `kubetrain run`) trains the same model as
// over Gloo: with two ranks both sum the same two floats per element.
TEST_F(AllReduceTrainerTest, SharedMemoryTrainsTheSameModelAsGloo) {
  auto gloo = TrainRanks({Options(1, ""), Options(1, "")}, small_train(), small_test());
  auto shm = TrainRanks({Options(1, ""), Options(1, "")}, small_train(), small_test(), nullptr,
                        nullptr, absl::Seconds(30), Transport::kSharedMemory);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(gloo[rank].ok()) << gloo[rank].status();
    ASSERT_TRUE(shm[rank].ok()) << shm[rank].status();
  }
  EXPECT_EQ(shm[0]->steps, 100);
  EXPECT_EQ(shm[0]->test_loss, gloo[0]->test_loss);
  EXPECT_EQ(shm[0]->test_accuracy, gloo[0]->test_accuracy);
  EXPECT_GT(shm[0]->test_accuracy, kLearned);
}

TEST_F(AllReduceTrainerTest, ARestartedJobResumesEveryRankFromTheChiefsCheckpoint) {
  const std::string dir = FreshTempDir("allreduce_resume");
  auto first = TrainRanks({Options(1, dir), Options(1, "")}, small_train(), small_test());
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  // Two epochs now: the chief restores step 100 and broadcasts values, slots and step. Had the
  // other rank kept its fresh initialisation, the end-of-run checksum would catch it.
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {"t", "chief", "0"});
  auto second =
      TrainRanks({Options(2, dir), Options(2, "")}, small_train(), small_test(), nullptr, &metrics);
  ASSERT_NO_FATAL_FAILURE(ExpectEveryRankRan(second, 200));
  EXPECT_EQ(metrics.steps.Value(), 100);  // only the second epoch ran again
  EXPECT_GE(second[0]->test_accuracy, first[0]->test_accuracy - 0.02);
}

// Over Gloo and over shared memory alike.
TEST_F(AllReduceTrainerTest, ARankThatStopsFailsItsPeersInsteadOfHangingThem) {
  for (Transport transport : {Transport::kGloo, Transport::kSharedMemory}) {
    SCOPED_TRACE(transport == Transport::kGloo ? "gloo" : "shared memory");
    std::vector<std::atomic<bool>> stops(2);
    prometheus::Registry registry;
    WorkerMetrics metrics(registry, {"t", "chief", "0"});
    std::thread stopper([&] {
      // Rank 1 stops once the ranks train (the chief has made a step).
      for (absl::Time end = absl::Now() + absl::Seconds(60);
           metrics.steps.Value() < 1 && absl::Now() < end;) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      stops[1] = true;
    });
    absl::Time t0 = absl::Now();
    auto results = TrainRanks({Options(5, ""), Options(5, "")}, small_train(), small_test(), &stops,
                              &metrics, absl::Seconds(3), transport);
    stopper.join();
    EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled) << results[1].status();
    ASSERT_FALSE(results[0].ok());
    EXPECT_EQ(results[0].status().code(), absl::StatusCode::kUnavailable) << results[0].status();
    EXPECT_LT(absl::Now() - t0, absl::Seconds(20));
  }
}

// An elastic all-reduce job (docs/architecture.md §5.10): ranks 0 and 1 start; member 2 joins
// while they train and the group reforms with three; member 1 stops (a deleted pod) and the
// others reform without it. Nobody restarts, and the run ends after one epoch of gradients with
// every remaining rank holding the same parameters.
TEST_F(AllReduceTrainerTest, ElasticGroupGrowsAndShrinksWhileItTrains) {
  auto server = CoordinatorServer::Start({.address = "127.0.0.1:0",
                                          .world_size = 2,
                                          .min_members = 1,
                                          .member_timeout = absl::Seconds(5)});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  TrainerOptions options = Options(1, FreshTempDir("allreduce_elastic"));
  options.elastic = true;
  options.heartbeat_every = absl::Milliseconds(100);
  options.inject_delay = absl::Milliseconds(2);
  const Dataset train = ElasticTrain();
  std::vector<std::atomic<bool>> stops(3);
  std::vector<absl::StatusOr<TrainingSummary>> results(3, absl::UnknownError("not run"));
  std::vector<std::unique_ptr<WorkerMetrics>> metrics;
  std::vector<std::unique_ptr<prometheus::Registry>> registries;
  for (int i = 0; i < 3; ++i) {
    registries.push_back(std::make_unique<prometheus::Registry>());
    metrics.push_back(std::make_unique<WorkerMetrics>(*registries.back(),
                                                      MetricLabels{"t", "w", std::to_string(i)}));
  }
  auto run = [&](int member, int size) {
    auto store = CoordinatorClient::Connect({.address = "127.0.0.1:" + std::to_string(port),
                                             .rank = member,
                                             .world_size = size,
                                             .elastic = true});
    if (!store.ok()) {
      results[member] = store.status();
      return;
    }
    ElasticGroup group(
        **store,
        [](KeyValueStore& kv, int rank, int n) -> absl::StatusOr<std::unique_ptr<Communicator>> {
          ASSIGN_OR_RETURN(std::unique_ptr<GlooCommunicator> gloo,
                           GlooCommunicator::Create(
                               kv, {.rank = rank, .size = n, .timeout = absl::Seconds(30)}));
          return std::unique_ptr<Communicator>(std::move(gloo));
        });
    CpuDevice device;
    TaskIdentity id{member == 0 ? Role::kChief : Role::kWorker, member, size, {}};
    id.group = &group;
    Trainer trainer(options, id, device, &train, &small_test(), metrics[member].get());
    results[member] = trainer.Run(stops[member]);
  };
  auto steps = [&](int member) { return metrics[member]->steps.Value(); };
  auto wait_until = [](const std::function<bool()>& done) {
    for (absl::Time end = absl::Now() + absl::Seconds(60); !done() && absl::Now() < end;) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    return done();
  };
  std::thread r0(run, 0, 2), r1(run, 1, 2);
  ASSERT_TRUE(wait_until([&] { return steps(0) >= 30; }));
  std::thread r2(run, 2, 3);
  ASSERT_TRUE(wait_until([&] { return steps(2) >= 30; }));
  EXPECT_EQ(metrics[0]->workers.Value(), 3);
  stops[1] = true;
  r1.join();
  ASSERT_TRUE(wait_until([&] { return metrics[0]->workers.Value() == 2; }));
  r0.join();
  r2.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[2].ok()) << results[2].status();
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled) << results[1].status();
  EXPECT_GT(results[0]->test_accuracy, 0.78);
  // One epoch of gradients: 25600 / 64 = 400, give or take the size of the last step.
  auto last = Checkpointer({.dir = options.checkpoint_dir}).LoadLatest("mlp");
  ASSERT_TRUE(last.ok() && last->has_value()) << last.status();
  EXPECT_GE((*last)->gradients_applied, 400);
  EXPECT_LE((*last)->gradients_applied, 400 + 2);
}

// A Gloo group of one rank on 127.0.0.1: its coordinator, the rank's client of it, and the
// communicator.
struct OneRankGroup {
  std::unique_ptr<CoordinatorServer> server;
  std::unique_ptr<CoordinatorClient> store;
  std::unique_ptr<GlooCommunicator> comm;

  // The identity of its one rank, in `role`.
  TaskIdentity Identity(Role role) const {
    TaskIdentity id{role, 0, 1, {}};
    id.communicator = comm.get();
    return id;
  }
};
absl::StatusOr<OneRankGroup> GroupOfOne() {
  OneRankGroup g;
  ASSIGN_OR_RETURN(g.server, CoordinatorServer::Start({"127.0.0.1:0", 1}));
  ASSIGN_OR_RETURN(g.store, CoordinatorClient::Connect(
                                {.address = "127.0.0.1:" + std::to_string(g.server->port()),
                                 .rank = 0,
                                 .world_size = 1}));
  ASSIGN_OR_RETURN(g.comm, GlooCommunicator::Create(*g.store, {.rank = 0, .size = 1}));
  return g;
}

// Two ranks over Gloo on 127.0.0.1, each on its own thread with its own counted CPU device, an
// MLP and an all-reduce exchange set up and started (with `test` as the test set); `body` then
// runs on each rank. Returns each rank's status.
using CountedRank =
    std::function<absl::Status(int rank, CountingDevice& device, Model& model,
                               GradientExchange& exchange, ShardBatches& batches, int64_t pos)>;
std::vector<absl::Status> RunTwoCountedRanks(const TrainerOptions& options, const Dataset& train,
                                             const Dataset* test, const CountedRank& body) {
  return testing::RunGlooRanks(2, [&](int rank, Communicator& comm) -> absl::Status {
    CpuDevice cpu;
    CountingDevice device(cpu);
    TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, 2, {}};
    id.communicator = &comm;
    ASSIGN_OR_RETURN(std::unique_ptr<Model> model, MakeModel("mlp", device, 1));
    ShardBatches batches(train, ShardSpec{1, rank, 2}, options.batch_size);
    std::atomic<bool> stop{false};
    std::unique_ptr<GradientExchange> exchange = MakeGradientExchange(
        {options, id, device, *model, nullptr, batches.steps_per_epoch(), stop, test});
    RETURN_IF_ERROR(exchange->Setup());
    ASSIGN_OR_RETURN(int64_t pos, exchange->Start(nullptr));
    return body(rank, device, *model, *exchange, batches, pos);
  });
}

// What an all-reduce step costs a GPU, counted on the CPU backend (the same calls reach a CUDA
// device): the gradients are computed into the fused buffers and the loss stays on the device,
// so nothing is copied or waited for before the all-reduce; the reduction, the update and the
// summed loss's download then cost one wait. Two ranks over Gloo, each with its own counter.
TEST_F(AllReduceTrainerTest, AStepWaitsForTheDeviceOnceAndCopiesNoGradient) {
  std::vector<std::vector<CountingDevice::Counts>> costs(2);
  std::vector<absl::Status> results = RunTwoCountedRanks(
      Options(1, ""), small_train(), nullptr,
      [&](int rank, CountingDevice& device, Model& model, GradientExchange& exchange,
          ShardBatches& batches, int64_t pos) -> absl::Status {
        if (exchange.DeviceLossSlot() == nullptr) return absl::InternalError("no device loss slot");
        for (int step = 0; step < 5; ++step) {
          ASSIGN_OR_RETURN(const Batch* batch, batches.At(pos));
          device.Reset();
          RETURN_IF_ERROR(model.ComputeGradients(batch->image_span(), batch->label_span(),
                                                 exchange.DeviceLossSlot()));
          ASSIGN_OR_RETURN(ExchangedStep next, exchange.Exchange(pos, 0));
          costs[rank].push_back(device.counts());
          if (!(next.loss > 0 && next.loss < 10)) {
            return absl::InternalError(absl::StrCat("step ", step, " reported loss ", next.loss));
          }
          pos = next.next;
        }
        return exchange.EndTraining();
      });
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_THAT(results[rank], IsOk()) << "rank " << rank;
    ASSERT_EQ(costs[rank].size(), 5u);
    for (const CountingDevice::Counts& c : costs[rank]) {
      EXPECT_EQ(c.host_waits, 1) << "rank " << rank;
      EXPECT_EQ(c.copies, 0) << "rank " << rank << ": a gradient was copied into its buffer";
      EXPECT_EQ(c.uploads, 3) << "rank " << rank
                              << ": images, labels and the update's rule, nothing else";
    }
  }
}

// At the end of a fixed-size job the ranks evaluate the final parameters together: each runs the
// forward passes of half the test set, and both get the whole set's result, which is what one
// rank evaluating every example alone finds.
TEST_F(AllReduceTrainerTest, TheRanksEvaluateTheFinalParametersTogetherEachOnHalfTheTestSet) {
  const TrainerOptions options = Options(1, "");
  std::vector<std::optional<EvalResult>> together(2);
  std::vector<EvalResult> alone(2);
  std::vector<int64_t> gemms_together(2), gemms_alone(2);
  std::vector<absl::Status> results = RunTwoCountedRanks(
      options, small_train(), &small_test(),
      [&](int rank, CountingDevice& device, Model& model, GradientExchange& exchange,
          ShardBatches& batches, int64_t pos) -> absl::Status {
        for (int step = 0; step < 20; ++step) {
          ASSIGN_OR_RETURN(const Batch* batch, batches.At(pos));
          RETURN_IF_ERROR(model.ComputeGradients(batch->image_span(), batch->label_span(),
                                                 exchange.DeviceLossSlot()));
          ASSIGN_OR_RETURN(ExchangedStep next, exchange.Exchange(pos, 0));
          pos = next.next;
        }
        device.Reset();
        RETURN_IF_ERROR(exchange.EndTraining());
        gemms_together[rank] = device.counts().gemms;
        together[rank] = exchange.shared_evaluation();
        device.Reset();
        ASSIGN_OR_RETURN(alone[rank], model.Evaluate(small_test(), options.eval_batch));
        gemms_alone[rank] = device.counts().gemms;
        return absl::OkStatus();
      });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_THAT(results[rank], IsOk());
    ASSERT_TRUE(together[rank].has_value());
    EXPECT_EQ(together[rank]->examples, kSmallTestExamples);
    EXPECT_EQ(together[rank]->accuracy, alone[rank].accuracy);
    EXPECT_NEAR(together[rank]->loss, alone[rank].loss, 1e-6);
    EXPECT_GT(alone[rank].accuracy, 0.5);  // 20 steps have trained something
    EXPECT_EQ(2 * gemms_together[rank], gemms_alone[rank]);
  }
}

// Each epoch's end but the last is evaluated together in the step's Exchange (the last is the
// final evaluation, in EndTraining): 2 epochs of 3 steps per rank.
TEST_F(AllReduceTrainerTest, TheRanksEvaluateEachEpochsEndTogether) {
  const Dataset train = RandomImages(2 * 64 * 3, 7);
  std::vector<std::vector<bool>> evaluated(2);
  std::vector<std::optional<EvalResult>> at_epoch_end(2);
  std::vector<EvalResult> alone(2);
  std::vector<absl::Status> results = RunTwoCountedRanks(
      Options(2, ""), train, &small_test(),
      [&](int rank, CountingDevice&, Model& model, GradientExchange& exchange,
          ShardBatches& batches, int64_t pos) -> absl::Status {
        if (batches.steps_per_epoch() != 3) return absl::InternalError("not 3 steps an epoch");
        while (!exchange.Done(pos)) {
          ASSIGN_OR_RETURN(const Batch* batch, batches.At(pos));
          RETURN_IF_ERROR(model.ComputeGradients(batch->image_span(), batch->label_span(),
                                                 exchange.DeviceLossSlot()));
          ASSIGN_OR_RETURN(ExchangedStep next, exchange.Exchange(pos, 0));
          pos = next.next;
          evaluated[rank].push_back(exchange.shared_evaluation().has_value());
          if (pos == 3) {
            at_epoch_end[rank] = exchange.shared_evaluation();
            ASSIGN_OR_RETURN(alone[rank], model.Evaluate(small_test(), 500));
          }
        }
        RETURN_IF_ERROR(exchange.EndTraining());
        evaluated[rank].push_back(exchange.shared_evaluation().has_value());
        return absl::OkStatus();
      });
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_THAT(results[rank], IsOk());
    // After steps 1..6, then EndTraining.
    EXPECT_EQ(evaluated[rank], (std::vector<bool>{false, false, true, false, false, false, true}));
    ASSERT_TRUE(at_epoch_end[rank].has_value());
    EXPECT_EQ(at_epoch_end[rank]->examples, kSmallTestExamples);
    EXPECT_EQ(at_epoch_end[rank]->accuracy, alone[rank].accuracy);
    EXPECT_NEAR(at_epoch_end[rank]->loss, alone[rank].loss, 1e-6);
  }
}

// One rank has no one to share the final evaluation with: the chief makes it alone, as before.
TEST_F(AllReduceTrainerTest, ASingleRankLeavesTheFinalEvaluationToTheChief) {
  auto group = GroupOfOne();
  ASSERT_THAT(group, IsOk());
  CpuDevice device;
  const TaskIdentity id = group->Identity(Role::kChief);
  auto model = MakeModel("mlp", device, 1);
  ASSERT_THAT(model, IsOk());
  std::atomic<bool> stop{false};
  const TrainerOptions options = Options(1, "");  // the exchange keeps a reference to it
  std::unique_ptr<GradientExchange> exchange =
      MakeGradientExchange({options, id, device, **model, nullptr, 10, stop, &small_test()});
  ASSERT_THAT(exchange->Setup(), IsOk());
  ASSERT_THAT(exchange->Start(nullptr), IsOk());
  ASSERT_THAT(exchange->EndTraining(), IsOk());
  EXPECT_FALSE(exchange->shared_evaluation().has_value());
}

TEST_F(AllReduceTrainerTest, AnEvaluatorIsRefusedWithTheFix) {
  auto group = GroupOfOne();
  ASSERT_THAT(group, IsOk());
  CpuDevice device;
  const TaskIdentity id = group->Identity(Role::kEvaluator);
  Trainer trainer(Options(1, ""), id, device, nullptr, &small_test(), nullptr);
  std::atomic<bool> stop{false};
  auto result = trainer.Run(stop);
  ASSERT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("remove the Evaluator replica"), std::string::npos)
      << result.status();
}

// The all-reduce update is exactly "average the ranks' gradients, apply the optimizer": two
// SGD steps of two ranks on a small synthetic set, against the same arithmetic done by hand on
// one device.
TEST(AllReduceTrainer, AStepAppliesTheMeanOfTheRanksGradients) {
  const Dataset train = RandomImages(256, 7);
  const std::string dir = FreshTempDir("allreduce_exact");
  TrainerOptions o = Options(1, dir);
  o.optimizer = "sgd";
  o.lr = 0.1;
  o.batch_size = 64;  // 128 examples per rank: 2 steps
  auto results = TrainRanks({o, o}, train, train);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[1].ok()) << results[1].status();
  ASSERT_EQ(results[0]->steps, 2);

  CpuDevice device;
  auto model = MakeModel("mlp", device, o.seed);
  ASSERT_THAT(model, IsOk());
  auto optimizer = ps::MakeOptimizer(OptimizerFor(o, 128, 2));
  ASSERT_THAT(optimizer, IsOk());
  const size_t n = (*model)->num_parameters();
  std::vector<float> values(n), grad(n), sum(n);
  ASSERT_THAT((*model)->ReadValues(absl::MakeSpan(values)), IsOk());
  ShardBatches rank0(train, {o.seed, 0, 2}, 64), rank1(train, {o.seed, 1, 2}, 64);
  for (int step = 0; step < 2; ++step) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (ShardBatches* batches : {&rank0, &rank1}) {
      auto batch = batches->At(step);
      ASSERT_THAT(batch, IsOk());
      ASSERT_THAT((*model)->WriteValues(values), IsOk());
      ASSERT_THAT((*model)->ComputeGradients((*batch)->image_span(), (*batch)->label_span()),
                  IsOk());
      ASSERT_THAT((*model)->ReadGradients(absl::MakeSpan(grad)), IsOk());
      for (size_t i = 0; i < n; ++i) sum[i] += grad[i];
    }
    ps::UpdateRule rule = (*optimizer)->Rule(step);
    rule.grad_scale = 0.5f;
    ps::update::ApplyLoop(rule, static_cast<int64_t>(n), sum.data(), values.data(), nullptr,
                          nullptr);
  }

  auto saved = Checkpointer({dir, 3}).LoadLatest("mlp");
  ASSERT_TRUE(saved.ok() && saved->has_value()) << saved.status();
  EXPECT_EQ((*saved)->global_step, 2);
  size_t offset = 0;
  for (Variable* v : (*model)->variables()) {
    const ps::VariableState* state = nullptr;
    for (const auto& s : (*saved)->variables) {
      if (s.name == v->name) state = &s;
    }
    ASSERT_NE(state, nullptr) << v->name;
    for (int64_t i = 0; i < v->size(); ++i) {
      ASSERT_NEAR(state->values[i], values[offset + i], 1e-6f) << v->name << "[" << i << "]";
    }
    offset += v->size();
  }
}

TEST(AllReduceTrainer, ChecksumSeesASingleFlippedBit) {
  std::vector<float> a(1000, 0.25f);
  std::vector<float> b = a;
  uint32_t bits;
  std::memcpy(&bits, &b[517], 4);
  bits ^= 1;
  std::memcpy(&b[517], &bits, 4);
  EXPECT_NE(ParameterChecksum(a.data(), a.size()), ParameterChecksum(b.data(), b.size()));
  EXPECT_EQ(ParameterChecksum(a.data(), a.size()), ParameterChecksum(a.data(), a.size()));
}

}  // namespace
}  // namespace kubetrain::worker
