// A shared-memory rank in a process of its own, for collective_test: it joins the coordinator at
// 127.0.0.1:PORT as rank RANK of SIZE, connects the shared-memory communicator in DIR, takes part
// in one barrier, prints "ready" and then waits to be killed (collective_test kills it with
// SIGKILL, so nothing of its own says it left).
//
//   shm_rank_helper PORT RANK SIZE DIR
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/collective/coordinator.h"
#include "worker/collective/shm_communicator.h"

int main(int argc, char** argv) {
  using namespace kubetrain::worker;
  if (argc != 5) {
    std::fprintf(stderr, "usage: shm_rank_helper PORT RANK SIZE DIR\n");
    return 2;
  }
  const int rank = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  auto store = CoordinatorClient::Connect({.address = std::string("127.0.0.1:") + argv[1],
                                           .rank = rank,
                                           .world_size = size,
                                           .connect_timeout = absl::Seconds(20)});
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  auto comm = ShmCommunicator::TryCreate(
      **store, {.rank = rank, .size = size, .timeout = absl::Seconds(20), .directory = argv[4]});
  if (!comm.ok() || *comm == nullptr) {
    std::fprintf(stderr, "no shared-memory communicator: %s\n",
                 comm.ok() ? "none" : comm.status().ToString().c_str());
    return 1;
  }
  if (absl::Status s = (*comm)->Barrier(); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  for (int i = 0; i < 600; ++i) ::sleep(1);  // bounded: collective_test kills it long before
  return 0;
}
