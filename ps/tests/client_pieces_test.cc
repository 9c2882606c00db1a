// PsClient's sync step in pieces (ps/client_pieces.cc): how far a worker's pushes run ahead of
// the rounds (ClientOptions::push_window_bytes), and that holding pieces back changes no value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "common/testing/status_matchers.h"
#include "ps/client.h"
#include "ps/tests/ps_cluster.h"

namespace kubetrain::ps {
namespace {

using ::kubetrain::testing::IsOk;
using testing::Buffers;
using testing::Cluster;
using testing::Sample;
using testing::Spans;

constexpr uint64_t kPiece = uint64_t{4} << 20;

// One ps holding a 16 MiB variable: four 4 MiB partitions, pushed as four pieces a step.
PlacementPlan Plan() {
  auto plan = PlacementPlan::Build({{"embedding", 4 * kPiece / sizeof(float)}}, 1);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

ModelState InitialState(const PlacementPlan& plan, int workers) {
  return testing::InitialState(plan, {UpdateMode::kSync, workers, {.learning_rate = 1}}, 7);
}

double Pushes(Cluster& cluster) {
  return Sample(cluster.registry(0), "kubetrain_ps_requests_total",
                {{"method", "Push"}, {"code", "OK"}});
}

ClientOptions Options(uint64_t window, absl::Duration pull_timeout,
                      const std::atomic<bool>* stop = nullptr) {
  return {.rpc_timeout = absl::Seconds(60),
          .pull_timeout = pull_timeout,
          .stop = stop,
          .shared_memory = false,
          .push_window_bytes = window};
}

// One step of a lone worker whose peer never pushes, so no round completes: the step's result.
absl::Status LoneStep(PsClient& client, const PlacementPlan& plan) {
  auto params = Buffers(plan);
  auto pulled = client.Pull(Spans(params));
  if (!pulled.ok()) return pulled.status();
  auto grads = Buffers(plan, 1);
  std::vector<std::span<const float>> spans(grads.begin(), grads.end());
  const Version next = pulled->Next();
  return client.PushAndPull(spans, *pulled, Spans(params), &next).status();
}

TEST(PsClientPieces, AWorkerPushesNoFurtherThanItsWindowAheadOfTheRounds) {
  const PlacementPlan plan = Plan();
  ASSERT_EQ(plan.Pieces(0, uint64_t{1} << 20, 8).size(), 4u);

  // With a window of one piece, the worker pushes pieces 0 and 1 and then waits for piece 0's
  // round, which its absent peer holds up, until the step's deadline.
  Cluster windowed(1);
  auto client = windowed.Client(plan, Options(kPiece, absl::Seconds(5)));
  ASSERT_THAT(client->Init(InitialState(plan, 2)), IsOk());
  const absl::Status step = LoneStep(*client, plan);
  EXPECT_TRUE(absl::IsDeadlineExceeded(step)) << step;
  EXPECT_EQ(Pushes(windowed), 2);

  // Without a window it pushes all four while the rounds wait; it gives up when told to stop.
  Cluster unlimited(1);
  std::atomic<bool> stop{false};
  auto eager = unlimited.Client(plan, Options(0, absl::Seconds(60), &stop));
  ASSERT_THAT(eager->Init(InitialState(plan, 2)), IsOk());
  absl::Status eager_step;
  std::thread worker([&] { eager_step = LoneStep(*eager, plan); });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (Pushes(unlimited) < 4 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  stop = true;
  worker.join();
  EXPECT_EQ(Pushes(unlimited), 4);
  EXPECT_TRUE(absl::IsCancelled(eager_step)) << eager_step;
}

// Three workers, each at most one piece ahead of the rounds (so every piece but the first two
// waits for a round), take three sync steps and end at the values the gradients sum to.
TEST(PsClientPieces, HeldBackPiecesTrainTheSameSteps) {
  constexpr int kWorkers = 3, kSteps = 3;
  const PlacementPlan plan = Plan();
  Cluster cluster(1);
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int w = 0; w < kWorkers; ++w) {
    ClientOptions options = Options(/*window=*/1, absl::Seconds(60));
    options.worker = static_cast<uint32_t>(w);
    clients.push_back(cluster.Client(plan, options));
  }
  ASSERT_THAT(clients[0]->Init(InitialState(plan, kWorkers)), IsOk());

  std::vector<std::vector<std::vector<float>>> finals(kWorkers);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      auto params = Buffers(plan);
      auto v = clients[w]->Pull(Spans(params));
      ASSERT_THAT(v, IsOk());
      for (int s = 0; s < kSteps; ++s) {
        auto grads = Buffers(plan, float(w + 1) * float(s + 1));
        std::vector<std::span<const float>> spans(grads.begin(), grads.end());
        const Version next = v->Next();
        auto exchanged = clients[w]->PushAndPull(spans, *v, Spans(params), &next);
        ASSERT_THAT(exchanged, IsOk());
        ASSERT_EQ(exchanged->version.steps, next.steps) << "worker " << w << " step " << s;
        *v = exchanged->version;
      }
      finals[w] = std::move(params);
    });
  }
  for (auto& t : workers) t.join();
  // Step s moves every value by the workers' mean gradient, -2(s+1): 2 + 4 + 6 over three steps.
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_EQ(finals[w].size(), 1u) << "worker " << w;
    for (size_t i = 0; i < finals[w][0].size(); i += 4099) {
      ASSERT_EQ(finals[w][0][i], float(i % 7) - 12) << "worker " << w << " [" << i << "]";
    }
  }
  EXPECT_EQ(Pushes(cluster), kWorkers * kSteps * 4);
}

}  // namespace
}  // namespace kubetrain::ps
