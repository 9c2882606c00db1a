// The ps over real gRPC: several PsServers on 127.0.0.1 port 0 in this process, driven by
// PsClient from several worker threads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/testing/status_matchers.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "prometheus/registry.h"
#include "ps/client.h"
#include "ps/server.h"
#include "ps/tests/ps_cluster.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::IsOk;
using testing::Buffers;
using testing::Cluster;
using testing::kNotInitialised;
using testing::Sample;
using testing::Spans;

// A 12 MB variable (three 4 MiB partitions) so one ps's share exceeds gRPC's 4 MiB default, plus
// an MLP-sized layer and a bias.
std::vector<VariableSpec> Model() {
  return {{"embedding", 3'000'000}, {"dense/kernel", 784 * 256}, {"dense/bias", 256}};
}

// Element i of each variable valued i % 7.
ModelState InitialState(const PlacementPlan& plan, TrainingConfig config) {
  return testing::InitialState(plan, config, 7);
}

PlacementPlan Plan(int num_ps) {
  auto plan = PlacementPlan::Build(Model(), num_ps);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

TEST(PsService, UninitialisedPsRefusesPushAndPullWithFailedPrecondition) {
  Cluster cluster(2);
  PlacementPlan plan = Plan(2);
  auto client = cluster.Client(plan);
  auto values = Buffers(plan);
  auto pulled = client->Pull(Spans(values));
  EXPECT_EQ(pulled.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(pulled.status().message().find(kNotInitialised), absl::string_view::npos)
      << pulled.status();
  std::vector<std::span<const float>> grads(values.begin(), values.end());
  auto pushed = client->Push(grads, Version{{0, 0}, {}});
  EXPECT_EQ(pushed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(pushed.status().message().find(kNotInitialised), absl::string_view::npos);
  // The first refusal cancels the call to the other ps, which may or may not have answered yet;
  // and a server counts a call once its answer is on the way, so the count may trail the reply.
  auto refused = [&] {
    double n = 0;
    for (int ps = 0; ps < 2; ++ps) {
      // -1 means this ps has no such sample: it never answered (the call was cancelled).
      n += std::max(0.0, Sample(cluster.registry(ps), "kubetrain_ps_requests_total",
                                {{"method", "Pull"}, {"code", "FAILED_PRECONDITION"}}));
    }
    return n;
  };
  absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (refused() < 1 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(refused(), 1);
  // Reachable but not initialised: ready for the chief, not for workers.
  EXPECT_THAT(client->WaitReady(absl::Seconds(30), /*require_initialized=*/false), IsOk());
  EXPECT_EQ(client->WaitReady(absl::Milliseconds(300), true).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(PsService, WorkersTrainSynchronouslyOverThreeShards) {
  constexpr int kPs = 3, kWorkers = 3, kSteps = 4;
  Cluster cluster(kPs);
  PlacementPlan plan = Plan(kPs);
  uint64_t largest = 0;
  for (int ps = 0; ps < kPs; ++ps) largest = std::max(largest, plan.BytesOn(ps));
  ASSERT_GT(largest, uint64_t{4} << 20) << "the test must send messages over gRPC's default limit";

  auto client = cluster.Client(plan);  // shared by the worker threads: it is thread-safe
  ModelState initial = InitialState(plan, {UpdateMode::kSync, kWorkers, {.learning_rate = 1}});
  ASSERT_THAT(client->Init(initial), IsOk());
  ASSERT_THAT(client->WaitReady(absl::Seconds(30), true), IsOk());

  std::atomic<int> failures{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto params = Buffers(plan);
      auto pulled = client->Pull(Spans(params));
      if (!pulled.ok()) return void(++failures);
      Version v = *pulled;
      for (int s = 0; s < kSteps; ++s) {
        // Worker w sends (w + 1) * (s + 1) everywhere: the average over 3 workers is 2 (s + 1).
        auto grads = Buffers(plan, float(w + 1) * float(s + 1));
        std::vector<std::span<const float>> spans(grads.begin(), grads.end());
        auto pushed = client->Push(spans, v);
        if (!pushed.ok() || pushed->stale != 0) return void(++failures);
        Version next = v.Next();
        auto after = client->Pull(Spans(params), &next);
        if (!after.ok()) return void(++failures);
        v = *after;
      }
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_EQ(failures, 0);

  auto values = Buffers(plan);
  auto version = client->Pull(Spans(values));
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(version->steps, std::vector<int64_t>(kPs, kSteps));
  const float total = 2 * (1 + 2 + 3 + 4);
  for (size_t v = 0; v < values.size(); ++v) {
    for (size_t i = 0; i < values[v].size(); ++i) {
      ASSERT_EQ(values[v][i], float(i % 7) - total) << plan.variables()[v].name << "[" << i << "]";
    }
  }
  for (int ps = 0; ps < kPs; ++ps) {
    EXPECT_EQ(Sample(cluster.registry(ps), "kubetrain_ps_global_step"), kSteps);
    EXPECT_EQ(Sample(cluster.registry(ps), "kubetrain_ps_requests_total",
                     {{"method", "Push"}, {"code", "OK"}}),
              kWorkers * kSteps);
    EXPECT_EQ(Sample(cluster.registry(ps), "kubetrain_ps_parameter_bytes"), plan.BytesOn(ps));
    EXPECT_GT(Sample(cluster.registry(ps), "kubetrain_ps_received_bytes_total"), 0);
  }
}

// The same training with one PushAndPull per step: the first pushers' calls wait at the ps for
// the step the last push completes, and every worker ends with the same values. Worker 0 goes
// over gRPC bytes, the others through shared memory.
// Three workers (one over gRPC bytes, two sharing a client over shared memory) train four sync
// steps with PushAndPull: either one call per ps task and step, or (`pipeline`) each ps task's
// share in pieces, a Push and a Pull each, the ps answering a piece's pull once that piece's
// round completes. Both end at the same values.
void TrainWithPushAndPull(bool pipeline) {
  constexpr int kPs = 2, kWorkers = 3, kSteps = 4;
  Cluster cluster(kPs);
  PlacementPlan plan = Plan(kPs);
  auto bytes_client = cluster.Client(plan, /*shared_memory=*/false, pipeline);
  auto shm_client = cluster.Client(plan, /*shared_memory=*/true, pipeline);
  ModelState initial = InitialState(plan, {UpdateMode::kSync, kWorkers, {.learning_rate = 1}});
  ASSERT_THAT(bytes_client->Init(initial), IsOk());
  ASSERT_THAT(bytes_client->WaitReady(absl::Seconds(30), true), IsOk());

  std::atomic<int> failures{0};
  std::vector<std::vector<std::vector<float>>> finals(kWorkers);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      PsClient& client = w == 0 ? *bytes_client : *shm_client;
      auto params = Buffers(plan);
      auto pulled = client.Pull(Spans(params));
      if (!pulled.ok()) return void(++failures);
      Version v = *pulled;
      for (int s = 0; s < kSteps; ++s) {
        auto grads = Buffers(plan, float(w + 1) * float(s + 1));
        std::vector<std::span<const float>> spans(grads.begin(), grads.end());
        const Version next = v.Next();
        auto exchanged = client.PushAndPull(spans, v, Spans(params), &next);
        if (!exchanged.ok() || exchanged->stale != 0 || exchanged->version.steps != next.steps) {
          ADD_FAILURE() << "worker " << w << " step " << s << ": " << exchanged.status();
          return void(++failures);
        }
        v = exchanged->version;
      }
      finals[w] = std::move(params);
    });
  }
  for (auto& t : workers) t.join();
  ASSERT_EQ(failures, 0);

  const float total = 2 * (1 + 2 + 3 + 4);
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_EQ(finals[w], finals[0]) << "worker " << w;
  }
  for (size_t v = 0; v < finals[0].size(); ++v) {
    for (size_t i = 0; i < finals[0][v].size(); i += 101) {
      ASSERT_EQ(finals[0][v][i], float(i % 7) - total)
          << plan.variables()[v].name << "[" << i << "]";
    }
  }
  for (int ps = 0; ps < kPs; ++ps) {
    const auto calls = [&](const char* method) {
      return Sample(cluster.registry(ps), "kubetrain_ps_requests_total",
                    {{"method", method}, {"code", "OK"}});
    };
    if (!pipeline) {
      EXPECT_EQ(calls("PushAndPull"), kWorkers * kSteps);
      // No step pushed or pulled on its own: one round trip per step.
      EXPECT_EQ(calls("Push"), -1);
      continue;
    }
    const size_t pieces = plan.Pieces(ps, uint64_t{1} << 20, 8).size();
    ASSERT_GE(pieces, 3u) << "ps " << ps;
    EXPECT_EQ(calls("PushAndPull"), -1);
    EXPECT_EQ(calls("Push"), kWorkers * kSteps * pieces);
    EXPECT_EQ(calls("Pull"), kWorkers * (1 + kSteps * pieces));  // and each worker's first pull
  }
  EXPECT_GT(cluster.Total("kubetrain_ps_shared_memory_bytes_total"), 0);

  // A push computed at a step the ps have moved past is stale: dropped, and said so, and the
  // call answers at once with the current values.
  auto grads = Buffers(plan, 1000);
  std::vector<std::span<const float>> spans(grads.begin(), grads.end());
  auto params = Buffers(plan);
  const Version old{std::vector<int64_t>(kPs, 0), std::vector<std::string>(kPs, "run-1")};
  auto late = shm_client->PushAndPull(spans, old, Spans(params));
  ASSERT_THAT(late, IsOk());
  EXPECT_EQ(late->stale, kPs);
  EXPECT_EQ(late->version.steps, std::vector<int64_t>(kPs, kSteps));
  EXPECT_EQ(params, finals[0]);
}

TEST(PsService, PushAndPullTrainsSynchronouslyInOneCallPerStep) {
  TrainWithPushAndPull(/*pipeline=*/false);
}

TEST(PsService, PushAndPullInPiecesTrainsTheSameSteps) { TrainWithPushAndPull(/*pipeline=*/true); }

TEST(PsService, ElasticWorkersJoinEveryPsAndALeaverEndsTheStep) {
  constexpr int kPs = 2;
  Cluster cluster(kPs);
  PlacementPlan plan = Plan(kPs);
  auto client_for = [&](uint32_t worker) {
    auto client = PsClient::Create(
        {cluster.server(0).address(), cluster.server(1).address()}, plan,
        {.rpc_timeout = absl::Seconds(60), .pull_timeout = absl::Seconds(60), .worker = worker});
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  };
  auto w0 = client_for(0), w1 = client_for(1), w2 = client_for(2);
  TrainingConfig config{UpdateMode::kSync, 2, {.learning_rate = 1}};
  config.elastic = true;
  ASSERT_THAT(w0->Init(InitialState(plan, config)), IsOk());
  for (auto* c : {w0.get(), w1.get(), w2.get()}) ASSERT_THAT(c->Join(false), IsOk());
  auto view = w0->Join(false);
  ASSERT_THAT(view, IsOk());
  EXPECT_EQ(view->members, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(view->quota, 3);
  for (int ps = 0; ps < kPs; ++ps) EXPECT_EQ(cluster.server(ps).store().Status().members, 3u);

  auto params = Buffers(plan);
  auto v = w0->Pull(Spans(params));
  ASSERT_THAT(v, IsOk());
  for (auto* c : {w0.get(), w1.get()}) {
    auto grads = Buffers(plan, 2);
    std::vector<std::span<const float>> spans(grads.begin(), grads.end());
    ASSERT_THAT(c->Push(spans, *v), IsOk());
  }
  // Worker 2 leaves instead of pushing: the step completes with the two it has, on every ps.
  ASSERT_THAT(w2->Join(/*leave=*/true), IsOk());
  Version next = v->Next();
  auto after = w0->Pull(Spans(params), &next);
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(after->steps, std::vector<int64_t>(kPs, 1));
  EXPECT_EQ(after->gradients_applied(), 2);
  EXPECT_EQ(params[2][0], 0.0f - 2);  // dense/bias: value i % 7 = 0, minus the average 2
  auto exported = w0->Export();
  ASSERT_THAT(exported, IsOk());
  EXPECT_EQ(exported->gradients_applied, 2);
  EXPECT_TRUE(exported->config.elastic);
}

TEST(PsService, ExportThenInitRestoresAFreshClusterExactly) {
  constexpr int kPs = 2;
  PlacementPlan plan = Plan(kPs);
  TrainingConfig config{UpdateMode::kSync,
                        1,
                        {.kind = OptimizerKind::kMomentum, .learning_rate = 0.5, .momentum = 0.5}};
  ModelState exported;
  {
    Cluster cluster(kPs);
    auto client = cluster.Client(plan);
    ASSERT_THAT(client->Init(InitialState(plan, config)), IsOk());
    auto params = Buffers(plan);
    auto v = client->Pull(Spans(params));
    ASSERT_THAT(v, IsOk());
    for (int s = 0; s < 2; ++s) {
      auto grads = Buffers(plan, float(s + 1));
      std::vector<std::span<const float>> spans(grads.begin(), grads.end());
      auto pushed = client->Push(spans, *v);
      ASSERT_TRUE(pushed.ok()) << pushed.status();
      v = pushed->version;
    }
    auto state = client->Export();
    ASSERT_TRUE(state.ok()) << state.status();
    exported = *std::move(state);
  }
  EXPECT_EQ(exported.global_step, 2);
  ASSERT_EQ(exported.variables.size(), plan.variables().size());
  // momentum after g=1 then g=2 with mu 0.5: 0.5 * 1 + 2 = 2.5; values moved by 0.5 * (1 + 2.5).
  EXPECT_EQ(exported.variables[0].slots.at("momentum")[123], 2.5f);
  EXPECT_EQ(exported.variables[0].values[3], 3.0f - 1.75f);

  Cluster fresh(kPs);  // new processes: empty until the chief restores them
  auto client = fresh.Client(plan);
  ASSERT_THAT(client->Init(exported), IsOk());
  auto again = client->Export();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->global_step, exported.global_step);
  EXPECT_EQ(again->run_id, exported.run_id);
  EXPECT_EQ(again->config.optimizer.momentum, 0.5);
  for (size_t v = 0; v < exported.variables.size(); ++v) {
    EXPECT_EQ(again->variables[v].name, exported.variables[v].name);
    EXPECT_TRUE(again->variables[v].values == exported.variables[v].values);
    EXPECT_TRUE(again->variables[v].slots == exported.variables[v].slots);
  }
}

TEST(PsService, RestartedShardIsRefilledAlone) {
  constexpr int kPs = 2;
  Cluster cluster(kPs);
  PlacementPlan plan = Plan(kPs);
  auto client = cluster.Client(plan);
  ModelState state = InitialState(plan, {UpdateMode::kAsync, 1, {.learning_rate = 1}});
  ASSERT_THAT(client->InitShard(1, state), IsOk());
  auto infos = client->Status();
  ASSERT_THAT(infos, IsOk());
  EXPECT_FALSE((*infos)[0].initialized);
  EXPECT_TRUE((*infos)[1].initialized);
  EXPECT_EQ((*infos)[1].parameter_bytes, plan.BytesOn(1));
  ASSERT_THAT(client->InitShard(0, state), IsOk());
  EXPECT_THAT(client->WaitReady(absl::Seconds(30), true), IsOk());
}

TEST(PsService, WaitReadyRetriesAnUnreachablePsAndLogsEachRetry) {
  PlacementPlan plan = Plan(1);
  std::string dead_address;
  {
    Cluster cluster(1);
    dead_address = cluster.server(0).address();
  }  // stopped: the port now refuses connections
  auto client = PsClient::Create(
      {dead_address}, plan,
      {.rpc_timeout = absl::Seconds(5),
       .wait_ready_backoff = {.initial = absl::Milliseconds(50), .max = absl::Milliseconds(100)}});
  ASSERT_THAT(client, IsOk());
  absl::Mutex mu;
  int retries = 0;
  log::SetSink([&](absl::string_view line) {
    absl::MutexLock lock(&mu);
    if (line.find("Waiting for parameter servers") != absl::string_view::npos) ++retries;
  });
  absl::Status status = (*client)->WaitReady(absl::Milliseconds(500), false);
  log::SetSink(nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  absl::MutexLock lock(&mu);
  EXPECT_GE(retries, 1);
}

TEST(PsService, ShutdownRpcStopsTheServiceAndWakesPulls) {
  Cluster cluster(1);
  PlacementPlan plan = Plan(1);
  auto client = cluster.Client(plan);
  ASSERT_THAT(client->Init(InitialState(plan, {UpdateMode::kSync, 1, {}})), IsOk());
  absl::Status blocked;
  std::thread puller([&] {
    auto params = Buffers(plan);
    Version far{{100}, {}};
    blocked = client->Pull(Spans(params), &far).status();
  });
  ASSERT_THAT(client->Shutdown("training finished"), IsOk());
  puller.join();
  EXPECT_EQ(blocked.code(), absl::StatusCode::kUnavailable) << blocked;
  EXPECT_TRUE(cluster.server(0).service().WaitForShutdownRequest(absl::Seconds(30)));
  EXPECT_EQ(client->WaitReady(absl::Seconds(30), false).code(), absl::StatusCode::kCancelled);
}

// Push and Pull are coded by hand on both ends (ps/tensor_coding.h); a peer using the generated
// protobuf stub must still be understood, with the same bytes and the same errors.
TEST(PsService, GeneratedProtobufStubInteroperatesWithTensorCodedServer) {
  Cluster cluster(1);
  PlacementPlan plan = Plan(1);
  auto client = cluster.Client(plan);
  ASSERT_THAT(client->Init(InitialState(
                  plan, {.mode = UpdateMode::kAsync,
                         .optimizer = {.kind = OptimizerKind::kSgd, .learning_rate = 1.0}})),
              IsOk());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);  // the pull answer (12.8 MB) is over gRPC's 4 MiB default
  auto stub = v1::ParameterServer::NewStub(grpc::CreateCustomChannel(
      cluster.server(0).address(), grpc::InsecureChannelCredentials(), args));

  v1::PushRequest push;
  push.set_run_id("run-1");
  const PartitionSpec& bias = plan.partitions().back();  // dense/bias, 256 floats
  for (const PartitionSpec& spec : plan.partitions()) {
    v1::Partition* g = push.add_gradients();
    g->mutable_key()->set_variable(spec.key.variable);
    g->mutable_key()->set_index(spec.key.index);
    g->set_offset(spec.offset);
    g->set_length(spec.length);
    g->set_values(std::string(spec.bytes(), '\0'));
  }
  std::vector<float> ones(bias.length, 1.0f);
  push.mutable_gradients()->rbegin()->set_values(
      std::string(reinterpret_cast<const char*>(ones.data()), bias.bytes()));
  {
    grpc::ClientContext context;
    v1::PushResponse response;
    ASSERT_THAT(stub->Push(&context, push, &response), IsOk());
    EXPECT_EQ(response.global_step(), 1);
  }
  {
    grpc::ClientContext context;
    v1::PullResponse response;
    ASSERT_THAT(stub->Pull(&context, v1::PullRequest(), &response), IsOk());
    EXPECT_EQ(response.global_step(), 1);
    EXPECT_EQ(response.run_id(), "run-1");
    ASSERT_EQ(response.values_size(), static_cast<int>(plan.partitions().size()));
    const v1::Partition& last = *response.values().rbegin();
    EXPECT_EQ(last.key().variable(), "dense/bias");
    ASSERT_EQ(last.values().size(), bias.bytes());
    std::vector<float> got(bias.length);
    std::memcpy(got.data(), last.values().data(), bias.bytes());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], float(i % 7) - 1.0f) << i;
  }
  {
    // PushAndPull: the same push again, answered by a pull of the values it led to.
    push.set_step(1);
    push.set_pull_min_step(2);
    grpc::ClientContext context;
    v1::PullResponse response;
    ASSERT_THAT(stub->PushAndPull(&context, push, &response), IsOk());
    EXPECT_EQ(response.global_step(), 2);
    EXPECT_FALSE(response.push_stale());
    const v1::Partition& last = *response.values().rbegin();
    ASSERT_EQ(last.values().size(), bias.bytes());
    std::vector<float> got(bias.length);
    std::memcpy(got.data(), last.values().data(), bias.bytes());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], float(i % 7) - 2.0f) << i;
  }
  {
    push.mutable_gradients()->rbegin()->set_values(std::string(12, '\0'));  // 3 floats, not 256
    grpc::ClientContext context;
    v1::PushResponse response;
    const grpc::Status status = stub->Push(&context, push, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("12 value bytes for 256 floats"), std::string::npos)
        << status.error_message();
  }
}

}  // namespace
}  // namespace kubetrain::ps

namespace kubetrain::ps {
namespace {

// Without the job's secret a client can neither replace the parameters nor stop the ps; with it,
// the whole push/pull cycle works as before.
TEST(PsJobSecret, OnlyTheJobsClientsMayInitPullOrShutDown) {
  const std::string secret = "job-secret-0123456789abcdef";
  prometheus::Registry registry;
  PsMetrics metrics(registry);
  auto server =
      PsServer::Start({.address = "127.0.0.1:0", .service = {.secret = secret}}, &metrics);
  ASSERT_TRUE(server.ok()) << server.status();
  PlacementPlan plan = Plan(1);
  const ModelState state = InitialState(plan, TrainingConfig{});

  auto stranger =
      PsClient::Create({(*server)->address()}, plan, {.rpc_timeout = absl::Seconds(30)});
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  absl::Status init = (*stranger)->Init(state);
  EXPECT_EQ(init.code(), absl::StatusCode::kUnauthenticated) << init;
  EXPECT_NE(init.message().find("KUBETRAIN_JOB_SECRET"), std::string::npos) << init;
  EXPECT_EQ((*stranger)->Shutdown("not yours").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_FALSE((*server)->service().shutdown_requested());
  EXPECT_EQ(Sample(registry, "kubetrain_ps_requests_total",
                   {{"method", "Init"}, {"code", "UNAUTHENTICATED"}}),
            1);

  auto member = PsClient::Create({(*server)->address()}, plan,
                                 {.rpc_timeout = absl::Seconds(30), .secret = secret});
  ASSERT_TRUE(member.ok()) << member.status();
  ASSERT_THAT((*member)->Init(state), IsOk());
  std::vector<std::vector<float>> values = Buffers(plan);
  auto pulled = (*member)->Pull(Spans(values));
  ASSERT_TRUE(pulled.ok()) << pulled.status();
  EXPECT_EQ(values[2][3], 3.0f);
}

}  // namespace
}  // namespace kubetrain::ps
