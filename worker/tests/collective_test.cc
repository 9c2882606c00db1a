// The all-reduce rendezvous and Gloo collectives over real loopback TCP: a coordinator server on
// 127.0.0.1, one thread per rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/gloo_communicator.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

std::unique_ptr<CoordinatorServer> StartCoordinator(int world_size, int port = 0) {
  auto server = CoordinatorServer::Start({"127.0.0.1:" + std::to_string(port), world_size});
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

std::unique_ptr<CoordinatorClient> Join(int port, int rank, int world_size) {
  auto client = CoordinatorClient::Connect({.address = "127.0.0.1:" + std::to_string(port),
                                            .rank = rank,
                                            .world_size = world_size,
                                            .connect_timeout = absl::Seconds(10)});
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

TEST(Coordinator, GetWaitsForAValueAnotherRankSetsLater) {
  auto server = StartCoordinator(2);
  auto a = Join(server->port(), 0, 2);
  auto b = Join(server->port(), 1, 2);
  ASSERT_EQ(a->session(), b->session());
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_THAT(a->Set("nccl/unique_id", std::string("\0\1\2", 3)), IsOk());
  });
  absl::Time t0 = absl::Now();
  absl::StatusOr<std::string> got = b->Get("nccl/unique_id", absl::Seconds(10));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("\0\1\2", 3));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(250));
}

TEST(Coordinator, GetOfAKeyNobodySetsTimesOutNamingIt) {
  auto server = StartCoordinator(1);
  auto client = Join(server->port(), 0, 1);
  absl::StatusOr<std::string> got = client->Get("rank/7", absl::Milliseconds(300));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("rank/7"), std::string::npos) << got.status();
}

TEST(Coordinator, ARankCountingAnotherWorldSizeIsRefusedWithTheFix) {
  auto server = StartCoordinator(2);
  auto client = CoordinatorClient::Connect(
      {.address = "127.0.0.1:" + std::to_string(server->port()), .rank = 0, .world_size = 3});
  ASSERT_EQ(client.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(client.status().message().find("TF_CONFIG"), std::string::npos) << client.status();
}

TEST(Coordinator, AStrangerWithoutTheJobSecretIsRefused) {
  const std::string secret = "0123456789abcdef0123456789abcdef";
  auto server =
      CoordinatorServer::Start({.address = "127.0.0.1:0", .world_size = 1, .secret = secret});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto stranger = CoordinatorClient::Connect(
      {.address = address, .rank = 0, .world_size = 1, .connect_timeout = absl::Seconds(10)});
  ASSERT_EQ(stranger.status().code(), absl::StatusCode::kUnauthenticated) << stranger.status();
  EXPECT_NE(stranger.status().message().find("KUBETRAIN_JOB_SECRET"), std::string::npos);
  auto member = CoordinatorClient::Connect({.address = address,
                                            .rank = 0,
                                            .world_size = 1,
                                            .connect_timeout = absl::Seconds(10),
                                            .secret = secret});
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_THAT((*member)->Set("k", "v"), IsOk());
}

TEST(Coordinator, TheRendezvousStoreIsBounded) {
  auto server = CoordinatorServer::Start(
      {.address = "127.0.0.1:0", .world_size = 1, .max_store_bytes = 1000});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = Join((*server)->port(), 0, 1);
  ASSERT_THAT(client->Set("a", std::string(600, 'x')), IsOk());
  ASSERT_TRUE(client->Set("a", std::string(900, 'y')).ok()) << "replacing a value frees its bytes";
  absl::Status full = client->Set("b", std::string(200, 'z'));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("limit of 1000"), std::string::npos) << full;
  absl::StatusOr<std::string> kept = client->Get("a", absl::Seconds(5));
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->size(), 900u);
}

TEST(Coordinator, ARestartedChiefTellsOldRanksToRendezvousAgain) {
  auto server = StartCoordinator(2);
  const int port = server->port();
  auto client = Join(port, 1, 2);
  server.reset();
  server = StartCoordinator(2, port);
  ASSERT_NE(server, nullptr);
  absl::Status s = client->Set("k", "v");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("rendezvous again"), std::string::npos) << s;
}

TEST(Coordinator, ConnectWaitsForAChiefThatStartsLate) {
  int port;
  {
    auto probe = StartCoordinator(1);  // learn a free port, then free it
    port = probe->port();
  }
  std::unique_ptr<CoordinatorServer> server;
  std::thread chief([&] {
    absl::SleepFor(absl::Milliseconds(700));
    server = StartCoordinator(2, port);
  });
  auto client = Join(port, 1, 2);
  chief.join();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->session(), server->session());
}

TEST(Coordinator, ConnectStopsWaitingOnASignal) {
  int port;
  {
    auto probe = StartCoordinator(1);  // a port nothing listens on once it is freed
    port = probe->port();
  }
  std::atomic<bool> stop{false};
  std::thread signal([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stop = true;
  });
  absl::Time t0 = absl::Now();
  auto client = CoordinatorClient::Connect({.address = "127.0.0.1:" + std::to_string(port),
                                            .rank = 1,
                                            .world_size = 2,
                                            .connect_timeout = absl::Minutes(5),
                                            .stop = &stop});
  signal.join();
  EXPECT_EQ(client.status().code(), absl::StatusCode::kCancelled) << client.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

// Runs `body(rank, communicator)` on `n` threads after a Gloo rendezvous through a coordinator.
void WithRanks(int n, const std::function<void(int, Communicator&)>& body,
               absl::Duration timeout = absl::Seconds(20)) {
  auto server = StartCoordinator(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto store = Join(server->port(), rank, n);
      ASSERT_NE(store, nullptr);
      auto comm = GlooCommunicator::Create(
          *store, {.rank = rank, .size = n, .hostname = "127.0.0.1", .timeout = timeout});
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->rank(), rank);
      EXPECT_EQ((*comm)->size(), n);
      body(rank, **comm);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(Gloo, AllReduceSumsMinsAndMaxesExactlyOnEveryRank) {
  constexpr int kRanks = 3;
  WithRanks(kRanks, [](int rank, Communicator& comm) {
    // Small integers: float sums are exact in any order, so every rank must agree bit for bit.
    std::vector<float> data(1001);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank * 1000 + i % 97);
    std::vector<float> lo = data, hi = data;
    ASSERT_THAT(comm.AllReduce(data.data(), data.size(), ReduceOp::kSum), IsOk());
    ASSERT_THAT(comm.AllReduce(lo.data(), lo.size(), ReduceOp::kMin), IsOk());
    ASSERT_THAT(comm.AllReduce(hi.data(), hi.size(), ReduceOp::kMax), IsOk());
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], static_cast<float>(3000 + 3 * (i % 97))) << i;
      ASSERT_EQ(lo[i], static_cast<float>(i % 97)) << i;
      ASSERT_EQ(hi[i], static_cast<float>(2000 + i % 97)) << i;
    }
  });
}

TEST(Gloo, AllReduceOfALargeBufferAndBroadcastFromANonZeroRoot) {
  WithRanks(2, [](int rank, Communicator& comm) {
    std::vector<float> big(3 << 20, static_cast<float>(rank + 1));  // 12 MiB
    ASSERT_THAT(comm.AllReduce(big.data(), big.size(), ReduceOp::kSum), IsOk());
    EXPECT_EQ(big.front(), 3.0f);
    EXPECT_EQ(big.back(), 3.0f);
    std::vector<float> values(5, static_cast<float>(rank));
    ASSERT_THAT(comm.Broadcast(values.data(), values.size(), /*root=*/1), IsOk());
    EXPECT_EQ(values, std::vector<float>(5, 1.0f));
    EXPECT_THAT(comm.Barrier(), IsOk());
    EXPECT_EQ(comm.Broadcast(values.data(), values.size(), 2).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

TEST(Gloo, APeerThatGoesAwayIsAnErrorNotAHang) {
  auto server = StartCoordinator(2);
  absl::Status survivor;
  std::thread leaver([&] {
    auto store = Join(server->port(), 1, 2);
    auto comm =
        GlooCommunicator::Create(*store, {.rank = 1, .size = 2, .timeout = absl::Seconds(3)});
    ASSERT_TRUE(comm.ok()) << comm.status();
    // Leaves without taking part: its sockets close.
  });
  auto store = Join(server->port(), 0, 2);
  auto comm = GlooCommunicator::Create(*store, {.rank = 0, .size = 2, .timeout = absl::Seconds(3)});
  ASSERT_TRUE(comm.ok()) << comm.status();
  leaver.join();
  std::vector<float> data(1000, 1.0f);
  absl::Time t0 = absl::Now();
  survivor = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum);
  EXPECT_FALSE(survivor.ok());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
}

TEST(Gloo, AWildcardListenAddressIsRefused) {
  auto server = StartCoordinator(2);
  auto store = Join(server->port(), 0, 2);
  auto comm = GlooCommunicator::Create(*store, {.rank = 0, .size = 2, .hostname = "0.0.0.0"});
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("--bind-address"), std::string::npos);
}

}  // namespace
}  // namespace kubetrain::worker
