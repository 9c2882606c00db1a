// Parameter-server training end to end in one process: real ps servers on 127.0.0.1 port 0, one
// thread per worker, the real Fashion-MNIST data.
#include "worker/runtime/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <thread>

#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "kubetrain/v1/ps.grpc.pb.h"
#include "prometheus/registry.h"
#include "ps/server.h"
#include "tensorflow/core/util/event.pb.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/data/fashion_mnist.h"
#include "worker/core/models.h"
#include "worker/runtime/checkpoint.h"
#include "worker/summary/tfrecord.h"
#include "worker/tests/counting_device.h"
#include "worker/tests/fashion_mnist_fixture.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

class TrainerTest : public FashionMnistTest {
 protected:
  std::unique_ptr<ps::PsServer> StartPs(int port = 0) {
    ps::ServerOptions options;
    options.address = "127.0.0.1:" + std::to_string(port);
    auto server = ps::PsServer::Start(options, nullptr);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? std::move(*server) : nullptr;
  }

  // Runs `workers` training threads on `train` (default: the small set) and the small test set
  // (rank 0 is the chief, which first asks FinishedRun, as kubetrain-worker does); returns the
  // chief's summary.
  absl::StatusOr<TrainingSummary> Train(const TrainerOptions& options,
                                        const std::vector<std::string>& ps, int workers,
                                        WorkerMetrics* chief_metrics = nullptr,
                                        const Dataset* train = nullptr) {
    if (train == nullptr) train = &small_train();
    std::vector<absl::StatusOr<TrainingSummary>> results(workers, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < workers; ++rank) {
      threads.emplace_back([&, rank] {
        CpuDevice device;
        TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, workers, ps};
        Trainer trainer(options, id, device, train, &small_test(),
                        rank == 0 ? chief_metrics : nullptr);
        if (rank == 0) {
          absl::StatusOr<std::optional<TrainingSummary>> over = trainer.FinishedRun(stop_);
          if (!over.ok() || over->has_value()) {
            results[rank] = over.ok() ? **over : absl::StatusOr<TrainingSummary>(over.status());
            return;
          }
        }
        results[rank] = trainer.Run(stop_);
      });
    }
    for (auto& t : threads) t.join();
    for (int rank = 1; rank < workers; ++rank) {
      EXPECT_TRUE(results[rank].ok()) << "worker " << rank << ": " << results[rank].status();
    }
    return results[0];
  }

  TrainerOptions Options(Mode mode, int epochs) {
    TrainerOptions o;
    o.mode = mode;
    o.epochs = epochs;
    o.batch_size = 64;
    o.checkpoint_dir = ::kubetrain::testing::FreshTempDir(
        std::string("trainer_ckpt_") +
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    return o;
  }

  // The seeded mlp's initial values as a checkpoint at `step`.
  static ps::ModelState ModelAt(int64_t step) {
    CpuDevice device;
    auto model = MakeModel("mlp", device, 1);
    EXPECT_TRUE(model.ok()) << model.status();
    std::vector<float> flat((*model)->num_parameters());
    EXPECT_THAT((*model)->ReadValues(absl::MakeSpan(flat)), IsOk());
    ps::ModelState state;
    state.global_step = step;
    state.run_id = "earlier-run";
    size_t offset = 0;
    for (Variable* v : (*model)->variables()) {
      state.variables.push_back(
          {v->name, {flat.begin() + offset, flat.begin() + offset + v->size()}, {}});
      offset += v->size();
    }
    return state;
  }

  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::atomic<bool> stop_{false};
};

// Observations a histogram holds.
uint64_t Count(prometheus::Histogram& h) { return h.Collect().histogram.sample_count; }

// A ps of an earlier release, which has every method but PushAndPull (gRPC answers that one
// UNIMPLEMENTED): each call is forwarded to a real ps.
class PsWithoutPushAndPull final : public v1::ParameterServer::Service {
 public:
  explicit PsWithoutPushAndPull(const std::string& real)
      : stub_(v1::ParameterServer::NewStub(
            grpc::CreateChannel(real, grpc::InsecureChannelCredentials()))) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~PsWithoutPushAndPull() override { server_->Shutdown(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  using Ps = v1::ParameterServer::Stub;
  grpc::Status Init(grpc::ServerContext* c, const v1::InitRequest* q,
                    v1::InitResponse* a) override {
    return Forward(&Ps::Init, c, q, a);
  }
  grpc::Status Push(grpc::ServerContext* c, const v1::PushRequest* q,
                    v1::PushResponse* a) override {
    return Forward(&Ps::Push, c, q, a);
  }
  grpc::Status Pull(grpc::ServerContext* c, const v1::PullRequest* q,
                    v1::PullResponse* a) override {
    return Forward(&Ps::Pull, c, q, a);
  }
  grpc::Status Export(grpc::ServerContext* c, const v1::ExportRequest* q,
                      v1::ExportResponse* a) override {
    return Forward(&Ps::Export, c, q, a);
  }
  grpc::Status Status(grpc::ServerContext* c, const v1::StatusRequest* q,
                      v1::StatusResponse* a) override {
    return Forward(&Ps::Status, c, q, a);
  }
  grpc::Status Shutdown(grpc::ServerContext* c, const v1::ShutdownRequest* q,
                        v1::ShutdownResponse* a) override {
    return Forward(&Ps::Shutdown, c, q, a);
  }
  grpc::Status Attach(grpc::ServerContext* c, const v1::AttachRequest* q,
                      v1::AttachResponse* a) override {
    return Forward(&Ps::Attach, c, q, a);
  }

 private:
  template <typename Request, typename Response>
  grpc::Status Forward(grpc::Status (Ps::*method)(grpc::ClientContext*, const Request&, Response*),
                       grpc::ServerContext* server_context, const Request* request,
                       Response* response) {
    grpc::ClientContext context;
    context.set_deadline(server_context->deadline());
    return (stub_.get()->*method)(&context, *request, response);
  }

  std::unique_ptr<Ps> stub_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(TrainerTest, SyncTrainingOfTwoWorkersLearnsAndStepsOncePerRound) {
  auto ps = StartPs();
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {"t", "chief", "0"});
  auto summary = Train(Options(Mode::kPsSync, 1), {ps->address()}, 2, &metrics);
  ASSERT_TRUE(summary.ok()) << summary.status();
  // 6400 examples per worker, 64 per step: 100 steps, each averaging both workers' gradients.
  EXPECT_EQ(summary->steps, 100);
  EXPECT_GT(summary->test_accuracy, kLearned);
  EXPECT_EQ(metrics.steps.Value(), 100);
  EXPECT_EQ(ps->store().Status().global_step, 100);
  EXPECT_TRUE(ps->service().shutdown_requested());
  EXPECT_FALSE(summary->checkpoint.empty());
  // Each step's exchange is one round trip: a PushAndPull, no Push or Pull of its own.
  EXPECT_EQ(Count(metrics.push_pull_duration), 100);
  EXPECT_EQ(Count(metrics.push_duration), 0);
}

// The chief writes one TensorBoard event file per start (FinishedRun's look at the checkpoints
// and the run share it): the version record, then loss, examples/s, learning rate and exchange
// time with each progress line, accuracy and test loss at each epoch's evaluation.
TEST_F(TrainerTest, TheChiefWritesTensorBoardScalarsIntoOneEventFile) {
  auto ps = StartPs();
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {"t", "chief", "0"});
  TrainerOptions options = Options(Mode::kPsSync, 2);
  options.log_every = absl::Milliseconds(1);  // progress lines (and their scalars) often
  options.summary_dir = options.checkpoint_dir + "/summaries";
  auto summary = Train(options, {ps->address()}, 2, &metrics);
  ASSERT_TRUE(summary.ok()) << summary.status();
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(options.summary_dir)) {
    files.push_back(e.path().string());
  }
  ASSERT_EQ(files.size(), 1u) << "one file per start";
  EXPECT_THAT(files[0], ::testing::HasSubstr("/events.out.tfevents."));
  absl::StatusOr<std::vector<std::string>> records =
      summary::ReadTfRecords(ReadAll(files[0]), files[0]);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_GT(records->size(), 2u);
  tensorflow::Event first;
  ASSERT_TRUE(first.ParseFromString(records->front()));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  std::map<std::string, std::vector<std::pair<int64_t, float>>> series;
  for (size_t i = 1; i < records->size(); ++i) {
    tensorflow::Event event;
    ASSERT_TRUE(event.ParseFromString((*records)[i]));
    for (const tensorflow::Summary::Value& v : event.summary().value()) {
      series[v.tag()].push_back({event.step(), v.simple_value()});
    }
  }
  for (const char* tag : {"loss", "examples_per_second", "learning_rate",
                          "exchange_seconds_per_step", "accuracy", "test_loss"}) {
    EXPECT_FALSE(series[tag].empty()) << tag;
  }
  // Both epochs' evaluations (the second at the run's end), the last at the final step with the
  // run's own test accuracy.
  ASSERT_EQ(series["accuracy"].size(), 2u);
  EXPECT_EQ(series["accuracy"].back().first, summary->steps);
  EXPECT_NEAR(series["accuracy"].back().second, summary->test_accuracy, 1e-6);
  EXPECT_GT(series["learning_rate"].front().second, 0);
  EXPECT_GT(series["exchange_seconds_per_step"].front().second, 0);
}

// Against a ps that predates PushAndPull the workers push and pull separately, and train the
// same model: the same steps, and the same test loss to the bit.
TEST_F(TrainerTest, WorkersOfAPsThatPredatesPushAndPullPushAndPullSeparately) {
  auto Run = [&](bool older, WorkerMetrics& metrics) -> absl::StatusOr<TrainingSummary> {
    auto ps = StartPs();
    std::optional<PsWithoutPushAndPull> proxy;
    if (older) proxy.emplace(ps->address());
    TrainerOptions o = Options(Mode::kPsSync, 1);
    o.checkpoint_dir.clear();
    return Train(o, {older ? proxy->address() : ps->address()}, 2, &metrics);
  };
  prometheus::Registry registry;
  WorkerMetrics current(registry, {"t", "chief", "0"}), separate(registry, {"u", "chief", "0"});
  auto expected = Run(false, current);
  auto got = Run(true, separate);
  ASSERT_THAT(expected, IsOk());
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->steps, 100);
  EXPECT_EQ(got->test_loss, expected->test_loss);
  EXPECT_EQ(got->test_accuracy, expected->test_accuracy);
  EXPECT_EQ(Count(separate.push_pull_duration), 0);
  EXPECT_EQ(Count(separate.push_duration), 100);
  EXPECT_GE(Count(separate.pull_duration), 100);
}

// On the CPU the ps exchange pushes gradients from the model's own buffers and pulls values
// into them; on memory the host cannot address (a GPU's) it copies each way every step. Both
// paths train the same model to the bit, and the first uploads no parameters.
TEST_F(TrainerTest, APsStepOnHostMemoryCopiesNoParametersAndTrainsAsTheCopyingPathDoes) {
  constexpr int kSteps = 10;
  const Dataset train = First(data_->train, int64_t{kSteps} * 64);
  struct Run {
    absl::StatusOr<TrainingSummary> summary;
    int64_t uploads = 0;
  };
  auto run = [&](bool hide_host_memory) {
    auto ps = StartPs();
    CpuDevice cpu;
    testing::CountingDevice device(cpu);
    if (hide_host_memory) device.HideHostMemory();
    TrainerOptions options = Options(Mode::kPsSync, 1);
    options.checkpoint_dir.clear();
    Trainer trainer(options, {Role::kChief, 0, 1, {ps->address()}}, device, &train, &small_test(),
                    nullptr);
    Run r;
    r.summary = trainer.Run(stop_);
    r.uploads = device.counts().uploads;
    return r;
  };
  const Run in_place = run(false);
  const Run copying = run(true);
  ASSERT_THAT(in_place.summary, IsOk());
  ASSERT_THAT(copying.summary, IsOk());
  EXPECT_EQ(in_place.summary->steps, kSteps);
  EXPECT_EQ(in_place.summary->test_loss, copying.summary->test_loss);
  EXPECT_EQ(in_place.summary->test_accuracy, copying.summary->test_accuracy);
  // The copying path uploads each of the MLP's 6 variables before every step.
  EXPECT_GE(copying.uploads - in_place.uploads, kSteps * 6)
      << "in place " << in_place.uploads << ", copying " << copying.uploads;
}

// Backup workers (TF's SyncReplicasOptimizer): with one of three workers slowed down, each
// step applies the first two gradients; the slow worker's late pushes are dropped as stale and
// it goes on from the newest step, so the job runs its steps at the fast workers' pace.
TEST_F(TrainerTest, ABackupWorkerLetsTheStepsOutrunASlowWorker) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsSync, 1);
  options.backup_workers = 1;
  TrainerOptions slow = options;
  slow.inject_delay = absl::Milliseconds(100);
  prometheus::Registry registry;
  WorkerMetrics slow_metrics(registry, {"t", "worker", "2"});
  std::vector<absl::StatusOr<TrainingSummary>> results(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      CpuDevice device;
      TaskIdentity id{rank == 0 ? Role::kChief : Role::kWorker, rank, 3, {ps->address()}};
      Trainer trainer(rank == 2 ? slow : options, id, device, &small_train(), &small_test(),
                      rank == 2 ? &slow_metrics : nullptr);
      results[rank] = trainer.Run(stop_);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.status();
  // 4266 examples per worker, 64 per step: 66 global steps, each of two gradients.
  EXPECT_EQ(results[0]->steps, 66);
  EXPECT_EQ(ps->store().Status().global_step, 66);
  EXPECT_GT(results[0]->test_accuracy, kLearned);
  EXPECT_GE(slow_metrics.stale_pushes.Value(), 1);
  EXPECT_LT(slow_metrics.steps.Value(), 66);  // it skipped the steps that went on without it
}

TEST_F(TrainerTest, BackupWorkersLeaveAGradientPerStep) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsSync, 1);
  options.backup_workers = 2;
  CpuDevice device;
  Trainer trainer(options, {Role::kWorker, 1, 2, {ps->address()}}, device, &small_train(),
                  &small_test(), nullptr);
  absl::StatusOr<TrainingSummary> summary = trainer.Run(stop_);  // refused before any ps call
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().message(),
            "--backup-workers=2: the job has 2 training workers, and each step needs at least one "
            "gradient (at most 1)");
}

// An elastic job (docs/architecture.md §5.10): a worker joins while the job trains and another
// leaves (its pod deleted: a stop signal). Nobody restarts, every step waits only for the
// members, and the run still ends after one epoch of examples.
TEST_F(TrainerTest, ElasticJobGrowsAndShrinksWhileItTrainsTheSameExamples) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsSync, 1);
  options.elastic = true;
  std::atomic<bool> stop_worker_1{false};
  const Dataset train = ElasticTrain();
  std::vector<absl::StatusOr<TrainingSummary>> results(3, absl::UnknownError("not run"));
  auto run = [&](int rank, const std::atomic<bool>& stop) {
    CpuDevice device;
    // TF_CONFIG at each pod's creation: worker 2 was created after a scale to 3.
    TaskIdentity id{
        rank == 0 ? Role::kChief : Role::kWorker, rank, rank == 2 ? 3 : 2, {ps->address()}};
    Trainer trainer(options, id, device, &train, &small_test(), nullptr);
    results[rank] = trainer.Run(stop);
  };
  auto step = [&] { return ps->store().Status().global_step; };
  auto wait_for_step = [&](int64_t s) {
    for (absl::Time end = absl::Now() + absl::Seconds(120); step() < s && absl::Now() < end;) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  };
  std::thread chief(run, 0, std::cref(stop_));
  std::thread worker_1(run, 1, std::cref(stop_worker_1));
  wait_for_step(40);
  std::thread worker_2(run, 2, std::cref(stop_));
  absl::Time grown_by = absl::Now() + absl::Seconds(30);
  while (ps->store().Status().members < 3 && absl::Now() < grown_by) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(ps->store().Status().members, 3u);
  wait_for_step(step() + 60);
  stop_worker_1 = true;
  worker_1.join();
  chief.join();
  worker_2.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  ASSERT_TRUE(results[2].ok()) << results[2].status();
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kCancelled);
  // 25600 examples, 64 per gradient: the run ends once 400 gradients are in, whatever the size.
  const ps::StoreStatus end = ps->store().Status();
  EXPECT_GE(end.gradients_applied, 400);
  EXPECT_LE(end.gradients_applied, 400 + 2);
  EXPECT_LT(end.global_step, 400);  // steps of two and three gradients
  EXPECT_GT(results[0]->test_accuracy, 0.78);
  EXPECT_EQ(results[0]->steps, end.global_step);
  EXPECT_TRUE(ps->service().shutdown_requested());
}

TEST_F(TrainerTest, ElasticAsyncJobEndsAfterTheSameExamples) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsAsync, 1);
  options.elastic = true;
  auto summary = Train(options, {ps->address()}, 2);
  ASSERT_TRUE(summary.ok()) << summary.status();
  const ps::StoreStatus end = ps->store().Status();
  EXPECT_GE(end.gradients_applied, 200);  // one push per gradient: 12800 / 64
  EXPECT_LE(end.gradients_applied, 200 + 2);
  EXPECT_EQ(end.global_step, end.gradients_applied);
  EXPECT_EQ(end.members, 0u);  // both left when they finished
  EXPECT_GT(summary->test_accuracy, kLearned);
}

TEST_F(TrainerTest, AsyncTrainingAppliesEveryPush) {
  auto ps0 = StartPs();
  auto ps1 = StartPs();
  auto summary = Train(Options(Mode::kPsAsync, 1), {ps0->address(), ps1->address()}, 2);
  ASSERT_TRUE(summary.ok()) << summary.status();
  // Every push of either worker bumps both ps; the job ends after 2 × 100 of them (a push of
  // each worker in flight at that moment may land too: a worker whose answers from the two ps
  // came before the other's last push landed on one of them pushes once more).
  EXPECT_GE(ps0->store().Status().global_step, 200);
  EXPECT_LE(ps0->store().Status().global_step, 200 + 2);
  EXPECT_EQ(ps1->store().Status().global_step, ps0->store().Status().global_step);
  EXPECT_GT(summary->test_accuracy, kLearned);
}

TEST_F(TrainerTest, WorkersWaitForAChiefThatStartsLate) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsSync, 1);
  absl::StatusOr<TrainingSummary> worker_result = absl::UnknownError("not run");
  std::thread worker([&] {
    CpuDevice device;
    Trainer t(options, {Role::kWorker, 1, 2, {ps->address()}}, device, &small_train(), nullptr,
              nullptr);
    worker_result = t.Run(stop_);
  });
  // A chief that comes late (the behaviour under test): the worker waits for the ps it fills.
  absl::SleepFor(absl::Milliseconds(700));
  CpuDevice device;
  Trainer chief(options, {Role::kChief, 0, 2, {ps->address()}}, device, &small_train(),
                &small_test(), nullptr);
  auto summary = chief.Run(stop_);
  worker.join();
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_TRUE(worker_result.ok()) << worker_result.status();
  EXPECT_EQ(summary->steps, 100);
}

TEST_F(TrainerTest, PsThatRestartsEmptyIsRefilledAndTrainingFinishes) {
  auto ps = StartPs();
  int port = ps->port();
  TrainerOptions options = Options(Mode::kPsSync, 2);
  options.checkpoint_every = absl::Milliseconds(200);
  options.monitor_every = absl::Milliseconds(100);
  prometheus::Registry registry;
  WorkerMetrics metrics(registry, {"t", "chief", "0"});
  std::thread killer([&] {
    // Let training get going (half of its 200 steps), then replace the ps with an empty one on
    // the same port.
    const absl::Time give_up = absl::Now() + absl::Seconds(120);
    while (ps->store().Status().global_step < 100 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ps->Stop(absl::Seconds(1));
    ps.reset();
    ps = StartPs(port);
  });
  auto summary = Train(options, {"127.0.0.1:" + std::to_string(port)}, 2, &metrics);
  killer.join();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_GE(metrics.recoveries.Value(), 1);
  EXPECT_EQ(summary->steps, 200);
  EXPECT_GT(summary->test_accuracy, kLearned);
}

TEST_F(TrainerTest, EvaluatorEvaluatesUntilTrainingIsOver) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsSync, 1);
  options.eval_every = absl::Milliseconds(300);
  absl::StatusOr<TrainingSummary> eval_result = absl::UnknownError("not run");
  std::thread evaluator([&] {
    CpuDevice device;
    Trainer t(options, {Role::kEvaluator, 0, 1, {ps->address()}}, device, nullptr, &small_test(),
              nullptr);
    eval_result = t.Run(stop_);
  });
  // The whole training set: the run must outlast the evaluator's first evaluation (at step 0)
  // by more than --eval-every, which the small set's 200 steps do not always do.
  auto summary = Train(options, {ps->address()}, 1, nullptr, &data_->train);
  evaluator.join();
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_TRUE(eval_result.ok()) << eval_result.status();
  EXPECT_GT(eval_result->test_accuracy, 0.5);
}

TEST_F(TrainerTest, ChiefWithAnUnreadableManifestFindsTheNewestCheckpointAndKeepsIt) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsSync, 1);
  // One worker, 1 epoch: 200 steps. The earlier run got to the end.
  Checkpointer earlier({options.checkpoint_dir, 3});
  ASSERT_THAT(earlier.Save(ModelAt(0), "mlp"), IsOk());
  ASSERT_THAT(earlier.Save(ModelAt(200), "mlp"), IsOk());
  const std::string before = ReadAll(options.checkpoint_dir + "/ckpt-200.pb");
  std::ofstream(options.checkpoint_dir + "/checkpoint.json", std::ios::trunc) << "{\"latest\": 5";
  auto summary = Train(options, {ps->address()}, 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  // That run is over: the chief evaluates its last checkpoint and writes none of its own.
  EXPECT_EQ(summary->steps, 200);
  EXPECT_EQ(summary->checkpoint, options.checkpoint_dir + "/ckpt-200.pb");
  EXPECT_EQ(ReadAll(options.checkpoint_dir + "/ckpt-200.pb"), before);
  EXPECT_FALSE(std::filesystem::exists(options.checkpoint_dir + "/ckpt-200.1.pb"));
  EXPECT_TRUE(std::filesystem::exists(options.checkpoint_dir + "/ckpt-0.pb"));
}

// A chief killed after it shut the ps down, and restarted by its pod's policy: the ps have
// exited for good (a Succeeded pod is not restarted), and so have the other workers. It ends
// the job from the run's final checkpoint instead of waiting for ps that never come back.
TEST_F(TrainerTest, AChiefRestartedAfterItsRunEndedFinishesFromTheFinalCheckpoint) {
  for (Mode mode : {Mode::kPsSync, Mode::kPsAsync}) {
    SCOPED_TRACE(mode == Mode::kPsSync ? "ps-sync" : "ps-async");
    TrainerOptions options = Options(mode, 1);
    options.checkpoint_dir += mode == Mode::kPsSync ? "/sync" : "/async";
    auto ps = StartPs();
    const std::string address = ps->address();
    const int port = ps->port();
    auto trained = Train(options, {address}, 2);
    ASSERT_TRUE(trained.ok()) << trained.status();
    ps.reset();  // it exited once the chief shut it down
    // ps-async: the chief was killed before it shut the ps down, so one still runs.
    if (mode == Mode::kPsAsync) ps = StartPs(port);

    CpuDevice device;
    Trainer chief(options, {Role::kChief, 0, 2, {address}}, device, &small_train(), &small_test(),
                  nullptr);
    auto over = chief.FinishedRun(stop_);
    ASSERT_TRUE(over.ok()) << over.status();
    ASSERT_TRUE(over->has_value());
    const std::optional<TrainingSummary>& again = *over;
    EXPECT_EQ(again->checkpoint, trained->checkpoint);
    EXPECT_EQ(again->examples_per_second, 0);  // it trained nothing
    // The values the chief evaluated at the end, evaluated again: its summary described the
    // final checkpoint, in ps-async too, where the other worker pushed on until the ps closed.
    EXPECT_EQ(again->steps, trained->steps);
    EXPECT_EQ(again->test_accuracy, trained->test_accuracy);
    EXPECT_EQ(again->test_loss, trained->test_loss);
    if (ps != nullptr) {
      EXPECT_TRUE(ps->store().Status().closed);  // and ends with the job
    }
  }
}

TEST_F(TrainerTest, ChiefRefusesACheckpointBeyondTheJobNamingIt) {
  auto ps = StartPs();
  TrainerOptions options = Options(Mode::kPsSync, 1);
  ASSERT_THAT(Checkpointer({options.checkpoint_dir, 3}).Save(ModelAt(int64_t{1} << 62), "mlp"),
              IsOk());
  auto summary = Train(options, {ps->address()}, 1);
  ASSERT_FALSE(summary.ok());
  EXPECT_NE(summary.status().message().find(options.checkpoint_dir +
                                            "/ckpt-4611686018427387904.pb is at global step "
                                            "4611686018427387904, beyond the 200 steps"),
            std::string::npos)
      << summary.status();
  EXPECT_FALSE(ps->store().Status().initialized);
}

TEST(TrainerOptions, BadValuesNameTheFlag) {
  TrainerOptions o;
  o.optimizer = "rmsprop";
  EXPECT_EQ(ValidateOptions(o).message(),
            "--optimizer: unsupported value \"rmsprop\"; allowed: sgd, momentum, adam, adagrad");
  o = TrainerOptions{};
  o.model = "resnet";
  EXPECT_EQ(ValidateOptions(o).message(),
            "--model: unsupported value \"resnet\"; allowed: mlp, cnn, or mlp:W1,W2,... for an "
            "MLP with those hidden widths");
  o = TrainerOptions{};
  o.batch_size = 0;
  EXPECT_EQ(ValidateOptions(o).message(), "--batch-size: must be >= 1, got 0");
  o = TrainerOptions{};
  o.mode = Mode::kPsAsync;
  o.backup_workers = 1;
  EXPECT_EQ(ValidateOptions(o).message(),
            "--backup-workers: only --mode=ps-sync aggregates a quota of gradients per step");
}

}  // namespace
}  // namespace kubetrain::worker
