// `n` ranks in one test process, each on a thread of its own, joined through a coordinator on
// 127.0.0.1 and a Gloo communicator over loopback TCP: the set-up the all-reduce tests share.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/collective/communicator.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/gloo_communicator.h"

namespace kubetrain::worker::testing {

// Runs `body(rank, communicator)` on each rank once all have met, and returns each rank's status:
// its rendezvous's where that failed, else its body's. `timeout` bounds each collective. The
// threads share the cores as they come (bind_cpus off).
inline std::vector<absl::Status> RunGlooRanks(
    int n, const std::function<absl::Status(int rank, Communicator& comm)>& body,
    absl::Duration timeout = absl::Seconds(30)) {
  auto server = CoordinatorServer::Start({"127.0.0.1:0", n});
  if (!server.ok()) return std::vector<absl::Status>(n, server.status());
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  std::vector<absl::Status> results(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      auto store = CoordinatorClient::Connect({.address = address,
                                               .rank = rank,
                                               .world_size = n,
                                               .connect_timeout = absl::Seconds(20)});
      if (!store.ok()) return void(results[rank] = store.status());
      auto comm = GlooCommunicator::Create(
          **store, {.rank = rank, .size = n, .timeout = timeout, .bind_cpus = false});
      if (!comm.ok()) return void(results[rank] = comm.status());
      results[rank] = body(rank, **comm);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace kubetrain::worker::testing
