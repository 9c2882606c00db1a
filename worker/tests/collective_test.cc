// The all-reduce rendezvous and Gloo collectives over real loopback TCP: a coordinator server on
// 127.0.0.1, one thread per rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "common/status.h"
#include "common/testing/status_matchers.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/cpu_binding.h"
#include "worker/collective/elastic_group.h"
#include "worker/collective/gloo_communicator.h"
#include "worker/collective/shm_communicator.h"
#include "worker/collective/tcp_ring.h"

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

// Runs `body(rank, store)` on `n` threads, each a rank joined to one coordinator's store.
void OnRanks(int n, const std::function<void(int, KeyValueStore&)>& body) {
  auto server = StartCoordinator(n);
  ASSERT_NE(server, nullptr);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto store = Join(server->port(), rank, n);
      ASSERT_NE(store, nullptr);
      body(rank, *store);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(Coordinator, GetWaitsForAValueAnotherRankSetsLater) {
  auto server = StartCoordinator(2);
  auto a = Join(server->port(), 0, 2);
  auto b = Join(server->port(), 1, 2);
  ASSERT_EQ(a->session(), b->session());
  std::thread setter([&] {
    // A value set while the other rank already waits for it (the behaviour under test).
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

std::unique_ptr<CoordinatorClient> Member(int port, int member) {
  auto client = CoordinatorClient::Connect({.address = "127.0.0.1:" + std::to_string(port),
                                            .rank = member,
                                            .world_size = 2,
                                            .elastic = true,
                                            .connect_timeout = absl::Seconds(10)});
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// Reforms every client of `members` at once; their answers, in the same order.
std::vector<absl::StatusOr<Generation>> ReformAll(std::vector<CoordinatorClient*> members) {
  std::vector<absl::StatusOr<Generation>> out(members.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < members.size(); ++i) {
    threads.emplace_back([&, i] { out[i] = members[i]->Reform(false, absl::Seconds(20)); });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Elastic all-reduce membership (docs/architecture.md §5.10): a generation forms once every
// live member asks; a newcomer, a leaver and a member gone silent each make the others reform.
TEST(Coordinator, ElasticGenerationsFollowJoinsLeavesAndSilence) {
  auto server = CoordinatorServer::Start({.address = "127.0.0.1:0",
                                          .world_size = 2,
                                          .min_members = 1,
                                          .member_timeout = absl::Seconds(3)});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto chief = Member(port, 0), worker = Member(port, 1), late = Member(port, 5);

  auto first = ReformAll({chief.get(), worker.get()});
  for (const auto& g : first) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->number, 1);
    EXPECT_EQ(g->members, (std::vector<int>{0, 1}));
  }
  EXPECT_EQ(chief->Heartbeat().value_or(true), false);

  // A newcomer waits in Reform; the others learn it from their heartbeat and join it.
  absl::StatusOr<Generation> joined = absl::UnknownError("not run");
  std::thread newcomer([&] { joined = late->Reform(false, absl::Seconds(20)); });
  absl::Time until = absl::Now() + absl::Seconds(10);
  while (!chief->Heartbeat().value_or(false) && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  auto second = ReformAll({chief.get(), worker.get()});
  newcomer.join();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->number, 2);
  EXPECT_EQ(joined->members, (std::vector<int>{0, 1, 5}));
  for (const auto& g : second) ASSERT_TRUE(g.ok() && g->number == 2) << g.status();

  // One leaves: the rest reform without it.
  ASSERT_THAT(worker->Reform(/*leave=*/true, absl::Seconds(5)).status(), IsOk());
  EXPECT_EQ(chief->Heartbeat().value_or(false), true);
  auto third = ReformAll({chief.get(), late.get()});
  for (const auto& g : third) {
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->number, 3);
    EXPECT_EQ(g->members, (std::vector<int>{0, 5}));
  }

  // One goes silent (its pod was killed): after the timeout the chief reforms alone.
  absl::StatusOr<Generation> alone = chief->Reform(false, absl::Seconds(20));
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->number, 4);
  EXPECT_EQ(alone->members, (std::vector<int>{0}));
}

// The chief ends training: a member waiting for a generation, and one that asks later (a worker
// whose pod started as the run ended), are told so instead of forming a group of their own.
TEST(Coordinator, ElasticReformAfterTheChiefFinishedSaysTrainingIsOver) {
  auto server = CoordinatorServer::Start({.address = "127.0.0.1:0", .world_size = 2});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  auto chief = Member(port, 0), worker = Member(port, 1), late = Member(port, 2);
  for (const auto& g : ReformAll({chief.get(), worker.get()})) ASSERT_TRUE(g.ok()) << g.status();

  absl::StatusOr<Generation> waiting = absl::UnknownError("not run");
  std::thread newcomer([&] { waiting = late->Reform(false, absl::Seconds(20)); });
  absl::Time until = absl::Now() + absl::Seconds(10);
  while (!chief->Heartbeat().value_or(false) && absl::Now() < until) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_THAT(chief->Finish(), IsOk());
  newcomer.join();
  EXPECT_TRUE(ElasticGroup::TrainingIsOver(waiting.status())) << waiting.status();
  absl::StatusOr<Generation> after = worker->Reform(false, absl::Seconds(5));
  EXPECT_TRUE(ElasticGroup::TrainingIsOver(after.status())) << after.status();
}

TEST(Coordinator, ElasticReformWaitsForTheFirstGenerationsFullSize) {
  auto server = CoordinatorServer::Start({.address = "127.0.0.1:0", .world_size = 2});
  ASSERT_TRUE(server.ok()) << server.status();
  auto chief = Member((*server)->port(), 0);
  absl::StatusOr<Generation> g = chief->Reform(false, absl::Milliseconds(600));
  EXPECT_EQ(g.status().code(), absl::StatusCode::kDeadlineExceeded) << g.status();
  EXPECT_NE(g.status().message().find("1 of 1 asked"), std::string::npos) << g.status();
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
    // A coordinator that starts after its ranks dial it (the behaviour under test).
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
    // A stop that arrives while the dial is retrying (the behaviour under test).
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
  OnRanks(n, [&](int rank, KeyValueStore& store) {
    auto comm = GlooCommunicator::Create(
        store, {.rank = rank, .size = n, .hostname = "127.0.0.1", .timeout = timeout});
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ((*comm)->rank(), rank);
    EXPECT_EQ((*comm)->size(), n);
    body(rank, **comm);
    (void)(*comm)->Close();
  });
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

// A peer that leaves once the group is formed: the survivor's next collective fails within its
// timeout. (The leaver waits for the survivor's rendezvous to end: leaving during it fails the
// rendezvous instead, another test's subject.)
TEST(Gloo, APeerThatGoesAwayIsAnErrorNotAHang) {
  auto server = StartCoordinator(2);
  absl::Notification formed;
  std::thread leaver([&] {
    auto store = Join(server->port(), 1, 2);
    auto comm =
        GlooCommunicator::Create(*store, {.rank = 1, .size = 2, .timeout = absl::Seconds(3)});
    EXPECT_TRUE(comm.ok()) << comm.status();
    formed.WaitForNotificationWithTimeout(absl::Seconds(10));
    // Leaves without taking part: its sockets close.
  });
  auto store = Join(server->port(), 0, 2);
  auto comm = GlooCommunicator::Create(*store, {.rank = 0, .size = 2, .timeout = absl::Seconds(3)});
  formed.Notify();
  leaver.join();
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data(1000, 1.0f);
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE((*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum).ok());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
}

CommunicatorFactory GlooFactory() {
  return [](KeyValueStore& store, int rank,
            int size) -> absl::StatusOr<std::unique_ptr<Communicator>> {
    ASSIGN_OR_RETURN(
        std::unique_ptr<GlooCommunicator> gloo,
        GlooCommunicator::Create(
            store,
            {.rank = rank, .size = size, .hostname = "127.0.0.1", .timeout = absl::Seconds(20)}));
    return std::unique_ptr<Communicator>(std::move(gloo));
  };
}

// An elastic all-reduce group over Gloo (docs/architecture.md §5.10): members 0 and 1 sum their
// ids; member 7 joins and the group reforms with three; member 1 leaves and the rest reform
// with two. Each generation's sum counts exactly its members.
TEST(ElasticGroup, ReformsWithANewcomerAndWithoutALeaver) {
  auto server = CoordinatorServer::Start(
      {.address = "127.0.0.1:0", .world_size = 2, .member_timeout = absl::Seconds(10)});
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  std::atomic<bool> member_1_leaves{false};
  std::atomic<int> sums_of_three{0}, sums_of_two_without_1{0};
  std::atomic<int> rounds{0};  // rounds the members have run, all together
  auto run = [&](int member) {
    auto client = Member(port, member);
    ASSERT_NE(client, nullptr);
    ElasticGroup group(*client, GlooFactory(), absl::Seconds(30));
    absl::StatusOr<Communicator*> comm = group.Reform();
    ASSERT_TRUE(comm.ok()) << comm.status();
    group.StartHeartbeat(absl::Milliseconds(50));
    int pairs = 0;  // sums this member saw in the generation of 0 and 7
    for (int round = 0; round < 400; ++round) {
      // The member's id and a "members changed" flag, summed: every rank sees the same flag.
      float data[2] = {static_cast<float>(member), group.change_pending() ? 1.0f : 0.0f};
      if (member == 1 && member_1_leaves.load() && group.generation().members.size() == 3) {
        group.Leave();
        return;
      }
      absl::Status s = (*comm)->AllReduce(data, 2, ReduceOp::kSum);
      if (s.ok() && data[0] == 0 + 1 + 7) {
        ++sums_of_three;
        member_1_leaves = true;
      }
      if (s.ok() && data[0] == 0 + 7 && group.generation().members.size() == 2) {
        ++sums_of_two_without_1;
        // Both see the same sums in the same rounds, so both stop after the same one, and say
        // goodbye first: a rank that drops its connections while the other still reads the
        // last sum would fail that sum (Communicator::Close; its own error, a goodbye cut
        // short, loses nothing).
        if (++pairs == 2) {
          (*comm)->Close().IgnoreError();
          return;
        }
      }
      if (!s.ok() || data[1] > 0) {
        comm = group.Reform();
        ASSERT_TRUE(comm.ok()) << comm.status();
      }
      ++rounds;
      absl::SleepFor(absl::Milliseconds(10));  // paces the rounds, so a joiner finds the group busy
    }
  };
  std::thread m0(run, 0), m1(run, 1);
  // Member 7 joins a group that is already summing.
  for (absl::Time end = absl::Now() + absl::Seconds(30); rounds < 4 && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::thread m7(run, 7);
  m0.join();
  m1.join();
  m7.join();
  EXPECT_GE(sums_of_three.load(), 3);          // all three summed at least once each
  EXPECT_EQ(sums_of_two_without_1.load(), 4);  // members 0 and 7, twice each, without 1
}

TEST(Gloo, AWildcardListenAddressIsRefused) {
  auto server = StartCoordinator(2);
  auto store = Join(server->port(), 0, 2);
  auto comm = GlooCommunicator::Create(*store, {.rank = 0, .size = 2, .hostname = "0.0.0.0"});
  ASSERT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("--bind-address"), std::string::npos);
}

// Every rank's last collective succeeds although one rank is done and closes first: Close
// waits until every rank has finished before the connections go (Gloo fails a wait on a closed
// connection even when its data has arrived). A peer that is slow to get there holds the others.
TEST(Gloo, CloseLetsEveryRankFinishItsLastCollective) {
  for (int round = 0; round < 60; ++round) {
    std::vector<absl::Status> last(2);
    absl::Duration rank0_closing;
    OnRanks(2, [&](int rank, KeyValueStore& store) {
      auto comm = GlooCommunicator::Create(store, {.rank = rank, .size = 2});
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::vector<float> data(16, static_cast<float>(rank));
      // Rank 0 comes last, so rank 1 is already waiting when the final message arrives.
      if (rank == 0) absl::SleepFor(absl::Milliseconds(5));  // the order under test, see above
      last[rank] = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kMax);
      // A peer still busy when the other closes (the behaviour under test).
      if (rank == 1 && round == 0) absl::SleepFor(absl::Milliseconds(300));
      const absl::Time t0 = absl::Now();
      (void)(*comm)->Close();
      if (rank == 0) rank0_closing = absl::Now() - t0;
    });
    EXPECT_THAT(last[0], IsOk()) << "round " << round;
    EXPECT_THAT(last[1], IsOk()) << "round " << round;
    if (round == 0) {
      EXPECT_GE(rank0_closing, absl::Milliseconds(250));
    }
  }
}

// A peer that is gone (it stopped without a goodbye) does not hold Close for long.
TEST(Gloo, CloseDoesNotWaitForAPeerThatIsGone) {
  auto server = StartCoordinator(2);
  absl::Notification formed;
  std::thread leaver([&] {
    auto store = Join(server->port(), 1, 2);
    auto comm = GlooCommunicator::Create(*store, {.rank = 1, .size = 2});
    EXPECT_TRUE(comm.ok()) << comm.status();
    formed.WaitForNotificationWithTimeout(absl::Seconds(10));
  });
  auto store = Join(server->port(), 0, 2);
  auto comm = GlooCommunicator::Create(*store, {.rank = 0, .size = 2});
  formed.Notify();
  leaver.join();
  ASSERT_TRUE(comm.ok()) << comm.status();
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE((*comm)->Close().ok());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

// The CPUs the calling thread may run on, in order.
std::vector<int> ThisThreadsCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

void KeepThisThreadTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(set), &set), 0);
}

// Waits with `wait` while a thread sets `stop` after 200 ms (when `by_stop`): the wait ends
// CANCELLED then, else DEADLINE_EXCEEDED at its timeout, either way well within 1.5 s.
void ExpectTheWaitEnds(bool by_stop, std::atomic<bool>& stop,
                       const std::function<absl::Status()>& wait) {
  std::thread stopper([&] {
    if (!by_stop) return;
    // A stop that arrives while the call waits (the behaviour under test).
    absl::SleepFor(absl::Milliseconds(200));
    stop = true;
  });
  const absl::Time t0 = absl::Now();
  absl::Status s = wait();
  EXPECT_EQ(s.code(), by_stop ? absl::StatusCode::kCancelled : absl::StatusCode::kDeadlineExceeded)
      << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1.5));
  stopper.join();
}

// ---- the TCP ring (GlooCommunicator's all-reduce) ---------------------------------------------

// Runs `body(rank, ring)` on `n` threads after the ring connects; `adjust` changes a rank's
// options first and `before` runs on its thread before it connects.
void WithRing(int n, const std::function<void(int, TcpRing&)>& body,
              const std::function<void(int, TcpRingOptions&)>& adjust = nullptr,
              const std::function<void(int, KeyValueStore&)>& before = nullptr) {
  OnRanks(n, [&](int rank, KeyValueStore& store) {
    if (before) before(rank, store);
    TcpRingOptions options{.rank = rank, .size = n, .timeout = absl::Seconds(20)};
    if (adjust) adjust(rank, options);
    auto ring = TcpRing::Connect(store, options);
    ASSERT_TRUE(ring.ok()) << ring.status();
    body(rank, **ring);
  });
}

// Sums, minima and maxima of small integers (exact in any order) for 2, 3 and 5 ranks, counts
// smaller than the ring (some parts empty) and larger than one segment; sums that do not add
// exactly come out bit for bit the same on every rank.
TEST(TcpRing, EveryRankGetsTheSameReductionForAnyCountAndRanks) {
  for (int n : {2, 3, 5}) {
    const size_t segment = TcpRing::kPartBytes / sizeof(float) * static_cast<size_t>(n);
    std::vector<size_t> counts = {1, 3, 1000};
    if (n <= 3) counts.push_back(segment + 7);
    // Four segments, the last short: the streams run on from one segment into the next.
    if (n == 2) counts.push_back(3 * segment + 5);
    std::vector<std::vector<float>> inexact(n);
    WithRing(n, [&](int rank, TcpRing& ring) {
      for (size_t count : counts) {
        std::vector<float> sum(count), lo(count), hi(count);
        for (size_t i = 0; i < count; ++i) sum[i] = static_cast<float>(rank * 7 + i % 11);
        lo = hi = sum;
        ASSERT_THAT(ring.AllReduce(sum.data(), count, ReduceOp::kSum), IsOk());
        ASSERT_THAT(ring.AllReduce(lo.data(), count, ReduceOp::kMin), IsOk());
        ASSERT_THAT(ring.AllReduce(hi.data(), count, ReduceOp::kMax), IsOk());
        const float ranks = static_cast<float>(n * (n - 1) / 2);
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(sum[i], 7 * ranks + n * static_cast<float>(i % 11)) << n << " ranks, " << i;
          ASSERT_EQ(lo[i], static_cast<float>(i % 11)) << n << " ranks, " << i;
          ASSERT_EQ(hi[i], static_cast<float>((n - 1) * 7 + i % 11)) << n << " ranks, " << i;
        }
      }
      std::vector<float> values(10007);
      for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * (i % 13) + 0.37f * rank;
      ASSERT_THAT(ring.AllReduce(values.data(), values.size(), ReduceOp::kSum), IsOk());
      inexact[rank] = values;
    });
    for (int r = 1; r < n; ++r) EXPECT_EQ(inexact[r], inexact[0]) << n << " ranks, rank " << r;
  }
}

// A connection to a rank's ring port that does not bring the nonce the store gave out is
// closed, and the ring still forms.
TEST(TcpRing, AConnectionWithoutTheNonceIsTurnedAway) {
  std::thread stranger;
  std::atomic<bool> turned_away{false};
  WithRing(
      2,
      [](int rank, TcpRing& ring) {
        float x = static_cast<float>(rank + 1);
        ASSERT_THAT(ring.AllReduce(&x, 1, ReduceOp::kSum), IsOk());
        EXPECT_EQ(x, 3.0f);
      },
      nullptr,
      [&](int rank, KeyValueStore& store) {
        if (rank != 1) return;
        absl::StatusOr<std::string> said = store.Get("ring/0", absl::Seconds(10));
        ASSERT_TRUE(said.ok()) << said.status();
        std::vector<std::string> parts = absl::StrSplit(*said, ' ');
        ASSERT_EQ(parts.size(), 3u);
        const int port = std::stoi(parts[1]);
        // Greets rank 0 as rank 1 with a wrong nonce, while rank 1 connects for real.
        stranger = std::thread([&turned_away, port] {
          const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
          sockaddr_in to{};
          to.sin_family = AF_INET;
          to.sin_port = htons(static_cast<uint16_t>(port));
          to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
          if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
            // Rank 0 took rank 1's real connection and closed its listener first.
            turned_away = errno == ECONNREFUSED;
            ::close(fd);
            return;
          }
          std::string hello = "ktring1 1 00000000000000000000000000000000\n";
          hello.resize(64, ' ');
          ASSERT_EQ(::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), 64);
          // Closed by rank 0: after reading the wrong nonce, or, when rank 0 took rank 1's real
          // connection first, reset with the listener that still queued this one.
          char byte;
          const ssize_t got = ::recv(fd, &byte, 1, 0);
          turned_away = got == 0 || (got < 0 && errno == ECONNRESET);
          ::close(fd);
        });
      });
  stranger.join();
  EXPECT_TRUE(turned_away);
}

// A peer that closes fails the others' next all-reduce at once and for good; a stop request
// ends a wait; a peer that never comes ends it at the timeout.
TEST(TcpRing, APeerThatLeavesOrStallsAndAStopRequestEndTheWait) {
  WithRing(2, [](int rank, TcpRing& ring) {
    if (rank == 1) {
      ring.Shutdown();
      return;
    }
    std::vector<float> data(1 << 20, 1.0f);
    const absl::Time t0 = absl::Now();
    absl::Status s = ring.AllReduce(data.data(), data.size(), ReduceOp::kSum);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
    EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
    EXPECT_FALSE(ring.AllReduce(data.data(), 1, ReduceOp::kSum).ok()) << "broken stays broken";
  });
  std::atomic<bool> stop{false};
  for (bool by_stop : {true, false}) {
    stop = false;
    WithRing(
        2,
        [&](int rank, TcpRing& ring) {
          if (rank == 1) {
            absl::SleepFor(absl::Seconds(2));  // a peer that never takes part (under test)
            return;
          }
          float x = 1;
          ExpectTheWaitEnds(by_stop, stop, [&] { return ring.AllReduce(&x, 1, ReduceOp::kSum); });
        },
        [&](int, TcpRingOptions& o) {
          o.stop = &stop;
          if (!by_stop) o.timeout = absl::Milliseconds(300);
        });
  }
}

// Ranks on one host whose threads may use the same CPUs keep to shares of their own, in rank
// order (Gloo's ranks too); a rank with other CPUs (its own cpuset) stays where it is and does
// not count among them. Closing gives the CPUs back.
TEST(CpuBinding, RanksThatShareCpusSplitThemAndOthersStay) {
  const std::vector<int> all = ThisThreadsCpus();
  if (all.size() < 2) GTEST_SKIP() << "needs two CPUs, this thread may use " << all.size();
  std::vector<std::vector<int>> seen(2), after(2);
  WithRanks(2, [&](int rank, Communicator& comm) {
    seen[rank] = ThisThreadsCpus();
    EXPECT_THAT(comm.Close(), IsOk());
    after[rank] = ThisThreadsCpus();
  });
  std::vector<int> both = seen[0];
  both.insert(both.end(), seen[1].begin(), seen[1].end());
  EXPECT_EQ(both, all);
  EXPECT_FALSE(seen[0].empty());
  EXPECT_FALSE(seen[1].empty());
  EXPECT_EQ(after[0], all);
  EXPECT_EQ(after[1], all);

  seen.assign(3, {});
  OnRanks(3, [&](int rank, KeyValueStore& store) {
    if (rank == 1) KeepThisThreadTo({all.front()});
    absl::StatusOr<CpuBinding> binding =
        CpuBinding::Bind(store, "test/", rank, 3, absl::Seconds(10), /*enabled=*/true);
    ASSERT_TRUE(binding.ok()) << binding.status();
    seen[rank] = ThisThreadsCpus();
    EXPECT_EQ(binding->Describe(), rank == 1 ? "no" : absl::StrJoin(seen[rank], ","));
  });
  EXPECT_EQ(seen[1], std::vector<int>{all.front()});
  both = seen[0];
  both.insert(both.end(), seen[2].begin(), seen[2].end());
  EXPECT_EQ(both, all) << "ranks 0 and 2 split the CPUs as the only two there";
}

// ---- the shared-memory communicator ----------------------------------------------------------

// A directory of this test's own standing in for /dev/shm (a tmpfs where there is one).
std::string ShmDir(const std::string& name) {
  const std::filesystem::path base = std::filesystem::exists("/dev/shm")
                                         ? std::filesystem::path("/dev/shm")
                                         : std::filesystem::temp_directory_path();
  std::filesystem::path dir = base / ("kubetrain-test-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Runs `body(rank, communicator)` on `n` threads after a shared-memory rendezvous; `adjust`
// changes a rank's options first.
void WithShmRanks(int n, const std::function<void(int, ShmCommunicator*)>& body,
                  const std::function<void(int, ShmOptions&)>& adjust = nullptr) {
  const std::string dir = ShmDir("ranks");
  OnRanks(n, [&](int rank, KeyValueStore& store) {
    ShmOptions options{.rank = rank, .size = n, .timeout = absl::Seconds(20), .directory = dir};
    if (adjust) adjust(rank, options);
    auto comm = ShmCommunicator::TryCreate(store, options);
    ASSERT_TRUE(comm.ok()) << comm.status();
    body(rank, comm->get());
  });
  std::filesystem::remove_all(dir);
}

TEST(Shm, AllReduceSumsMinsAndMaxesExactlyOnEveryRank) {
  WithShmRanks(3, [](int rank, ShmCommunicator* comm) {
    ASSERT_NE(comm, nullptr) << "ranks in one process share memory";
    EXPECT_EQ(comm->name(), "shm");
    EXPECT_EQ(comm->rank(), rank);
    EXPECT_EQ(comm->size(), 3);
    std::vector<float> data(1001);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(rank * 1000 + i % 97);
    std::vector<float> lo = data, hi = data;
    ASSERT_THAT(comm->AllReduce(data.data(), data.size(), ReduceOp::kSum), IsOk());
    ASSERT_THAT(comm->AllReduce(lo.data(), lo.size(), ReduceOp::kMin), IsOk());
    ASSERT_THAT(comm->AllReduce(hi.data(), hi.size(), ReduceOp::kMax), IsOk());
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], static_cast<float>(3000 + 3 * (i % 97))) << i;
      ASSERT_EQ(lo[i], static_cast<float>(i % 97)) << i;
      ASSERT_EQ(hi[i], static_cast<float>(2000 + i % 97)) << i;
    }
    EXPECT_THAT(comm->Close(), IsOk());
  });
}

// Buffers larger than a chunk go through in pieces, the last one short; sums of values that
// do not add exactly still come out bit-identical on every rank; a broadcast from rank 1. Two
// ranks (each reduces whole chunks) and six (each reduces its share).
TEST(Shm, BuffersLargerThanAChunkAndBroadcastFromANonZeroRoot) {
  for (int n : {2, 6}) {
    std::vector<std::vector<float>> sums(n);
    WithShmRanks(
        n,
        [&](int rank, ShmCommunicator* comm) {
          ASSERT_NE(comm, nullptr);
          std::vector<float> data(10007);
          for (size_t i = 0; i < data.size(); ++i) data[i] = 0.1f * (i % 13) + 0.37f * rank;
          for (int call = 0; call < 3; ++call) {  // every call, not only the first
            std::vector<float> copy = data;
            ASSERT_THAT(comm->AllReduce(copy.data(), copy.size(), ReduceOp::kSum), IsOk());
            if (call == 0) sums[rank] = copy;
            ASSERT_EQ(copy, sums[rank]) << "call " << call;
          }
          float expect = 0;
          for (int r = 0; r < n; ++r) expect += 0.1f * 5 + 0.37f * r;
          EXPECT_NEAR(sums[rank][5], expect, 1e-4);
          std::vector<float> values(3000, static_cast<float>(rank));
          ASSERT_THAT(comm->Broadcast(values.data(), values.size(), /*root=*/1), IsOk());
          EXPECT_EQ(values, std::vector<float>(3000, 1.0f));
          EXPECT_THAT(comm->Barrier(), IsOk());
          EXPECT_EQ(comm->Broadcast(values.data(), values.size(), n).code(),
                    absl::StatusCode::kInvalidArgument);
        },
        [](int, ShmOptions& o) { o.chunk_bytes = 4096; });
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(sums[r].size(), sums[0].size());
      for (size_t i = 0; i < sums[0].size(); ++i) {
        ASSERT_EQ(sums[r][i], sums[0][i]) << n << " ranks, rank " << r << ", element " << i;
      }
    }
  }
}

// Chunks past the small-chunk bound are shared out among the ranks (each reduces its part): the
// sums are the ones reduced in rank order, bit for bit, on every rank, for two and three ranks,
// a buffer of a whole 4 MiB chunk and a short one, every call alike.
TEST(Shm, SharedOutChunksSumInRankOrderOnEveryRank) {
  for (int n : {2, 3}) {
    const size_t count = (size_t{4} << 20) / sizeof(float) + 37;
    auto value = [](int rank, size_t i) { return 0.1f * (i % 13) + 0.37f * rank + 1e-7f * i; };
    std::vector<float> expect(count);
    for (size_t i = 0; i < count; ++i) {
      expect[i] = value(0, i);
      for (int r = 1; r < n; ++r) expect[i] += value(r, i);
    }
    WithShmRanks(n, [&](int rank, ShmCommunicator* comm) {
      ASSERT_NE(comm, nullptr);
      std::vector<float> data(count);
      for (int call = 0; call < 2; ++call) {
        for (size_t i = 0; i < count; ++i) data[i] = value(rank, i);
        ASSERT_THAT(comm->AllReduce(data.data(), data.size(), ReduceOp::kSum), IsOk());
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[i], expect[i]) << n << " ranks, rank " << rank << ", element " << i;
        }
      }
      EXPECT_THAT(comm->Close(), IsOk());
    });
  }
}

// Ranks that do not see the same shared memory (another host, a pod of its own) all get none,
// so every one of them goes on with TCP; the segment's file never outlives the rendezvous.
TEST(Shm, RanksThatDoNotShareMemoryAllGetNone) {
  const std::string other = ShmDir("other");
  WithShmRanks(
      2, [](int, ShmCommunicator* comm) { EXPECT_EQ(comm, nullptr); },
      [&](int rank, ShmOptions& o) {
        if (rank == 1) o.directory = other;
      });
  EXPECT_TRUE(std::filesystem::is_empty(other));
  std::filesystem::remove_all(other);
}

TEST(Shm, TheSegmentLeavesNoFileBehind) {
  std::vector<std::string> dirs(2);  // each rank's own: the rank threads share no variable
  WithShmRanks(
      2,
      [&](int rank, ShmCommunicator* comm) {
        ASSERT_NE(comm, nullptr);
        EXPECT_THAT(comm->Barrier(), IsOk());
        EXPECT_TRUE(std::filesystem::is_empty(dirs[rank]));
      },
      [&](int rank, ShmOptions& o) { dirs[rank] = o.directory; });
}

// Ranks that may all use the same CPUs, at least one each, keep to shares of their own while
// connected (two ranks never wait on each other on one CPU while another idles), rank 0 the
// first: together every CPU, none twice. Closing gives each its CPUs back.
TEST(Shm, EachRankKeepsToItsOwnShareOfTheCpusUntilItCloses) {
  const std::vector<int> all = ThisThreadsCpus();
  if (all.size() < 2) GTEST_SKIP() << "needs two CPUs, this thread may use " << all.size();
  std::vector<std::vector<int>> shares(2), after(2);
  WithShmRanks(2, [&](int rank, ShmCommunicator* comm) {
    ASSERT_NE(comm, nullptr);
    shares[rank] = ThisThreadsCpus();
    std::vector<float> data(1 << 18, 1.0f);  // shared out: both barriers
    ASSERT_THAT(comm->AllReduce(data.data(), data.size(), ReduceOp::kSum), IsOk());
    EXPECT_EQ(data[12345], 2.0f);
    EXPECT_THAT(comm->Close(), IsOk());
    after[rank] = ThisThreadsCpus();
  });
  ASSERT_FALSE(shares[0].empty());
  ASSERT_FALSE(shares[1].empty());
  std::vector<int> both = shares[0];
  both.insert(both.end(), shares[1].begin(), shares[1].end());
  EXPECT_EQ(both, all) << "rank 0 the first half of the CPUs, rank 1 the rest";
  EXPECT_EQ(after[0], all);
  EXPECT_EQ(after[1], all);
}

// Where the ranks may not use the same CPUs (a cpuset each), where there are fewer CPUs than
// ranks, or where binding is turned off, every rank stays where it was.
TEST(Shm, RanksStayWhereTheyAreWhenTheirCpusDifferAreTooFewOrBindingIsOff) {
  const std::vector<int> all = ThisThreadsCpus();
  if (all.size() < 2) GTEST_SKIP() << "needs two CPUs, this thread may use " << all.size();
  const std::vector<int> first = {all.front()};
  std::vector<std::vector<int>> seen(2);
  WithShmRanks(
      2,
      [&](int rank, ShmCommunicator* comm) {
        ASSERT_NE(comm, nullptr);
        seen[rank] = ThisThreadsCpus();
        EXPECT_THAT(comm->Barrier(), IsOk());
      },
      [&](int rank, ShmOptions&) {
        if (rank == 1) KeepThisThreadTo(first);
      });
  EXPECT_EQ(seen[0], all);
  EXPECT_EQ(seen[1], first);

  WithShmRanks(
      2,
      [&](int rank, ShmCommunicator* comm) {
        ASSERT_NE(comm, nullptr);
        seen[rank] = ThisThreadsCpus();
      },
      [&](int, ShmOptions& o) { o.bind_cpus = false; });
  EXPECT_EQ(seen[0], all);
  EXPECT_EQ(seen[1], all);

  const int n = static_cast<int>(all.size()) + 1;
  if (n > 8) return;  // more ranks than CPUs: only where that is few threads
  seen.assign(n, {});
  WithShmRanks(n, [&](int rank, ShmCommunicator* comm) {
    ASSERT_NE(comm, nullptr);
    seen[rank] = ThisThreadsCpus();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], all) << "rank " << r;
}

// A peer that stops (or fails) fails the others' next collective at once, not at the timeout;
// a stop request ends a wait; a peer that never comes ends it at the timeout.
TEST(Shm, APeerThatLeavesOrStallsAndAStopRequestEndTheWait) {
  std::atomic<bool> stop{false};
  WithShmRanks(
      3,
      [&](int rank, ShmCommunicator* comm) {
        ASSERT_NE(comm, nullptr);
        std::vector<float> data(100, 1.0f);
        if (rank == 2) return;  // leaves: its communicator goes
        absl::Time t0 = absl::Now();
        absl::Status first = comm->AllReduce(data.data(), data.size(), ReduceOp::kSum);
        EXPECT_EQ(first.code(), absl::StatusCode::kUnavailable) << first;
        EXPECT_NE(first.message().find(" left"), std::string::npos) << first;
        EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
        EXPECT_FALSE(comm->Barrier().ok()) << "a broken communicator stays broken";
      },
      [&](int, ShmOptions& o) { o.stop = &stop; });

  // Two ranks, one of which never calls: the other's stop request, then its timeout.
  for (bool by_stop : {true, false}) {
    stop = false;
    WithShmRanks(
        2,
        [&](int rank, ShmCommunicator* comm) {
          ASSERT_NE(comm, nullptr);
          if (rank == 1) {
            absl::SleepFor(absl::Seconds(2));  // a peer that never takes part (under test)
            return;
          }
          ExpectTheWaitEnds(by_stop, stop, [&] { return comm->Barrier(); });
        },
        [&](int, ShmOptions& o) {
          o.stop = &stop;
          if (!by_stop) o.timeout = absl::Milliseconds(300);
        });
  }
}

// A peer whose process is killed (SIGKILL: no goodbye) fails the others' next collective within
// moments: the kernel drops the lock the rank held on the segment's file.
TEST(Shm, APeerWhoseProcessIsKilledIsAnErrorNotAHang) {
  auto server = StartCoordinator(2);
  const std::string dir = ShmDir("killed");
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const std::string port = std::to_string(server->port());
  std::vector<std::string> args = {KUBETRAIN_SHM_RANK_HELPER, port, "1", "2", dir};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = -1;
  ASSERT_EQ(posix_spawn(&child, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);

  auto store = Join(server->port(), 0, 2);
  ASSERT_NE(store, nullptr);
  auto comm = ShmCommunicator::TryCreate(
      *store, {.rank = 0, .size = 2, .timeout = absl::Seconds(20), .directory = dir});
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_NE(*comm, nullptr);
  ASSERT_THAT((*comm)->Barrier(), IsOk());
  char said[16] = {};
  EXPECT_GT(::read(out[0], said, sizeof(said) - 1), 0);
  EXPECT_STREQ(said, "ready\n");
  ::close(out[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);

  absl::Time t0 = absl::Now();
  absl::Status s = (*comm)->Barrier();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 1's process ended"), std::string::npos) << s;
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kubetrain::worker
