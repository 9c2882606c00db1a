// The chief's rendezvous service for all-reduce training, and the client every rank uses.
//
//   chief:   ASSIGN_OR_RETURN(auto server, CoordinatorServer::Start({"10.0.0.5:2222", 4}));
//   any rank: ASSIGN_OR_RETURN(auto store, CoordinatorClient::Connect({chief, rank, 4, ...}));
//            GlooCommunicator::Create(*store, ...)   // Set/Get through the chief
//
// The server keeps keys in memory for one session (a random id made at start); a rank that
// joined an earlier session of a restarted chief is told to rendezvous again.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/rendezvous.h"

namespace grpc {
class Server;
}

namespace kubetrain::worker {

struct CoordinatorServerOptions {
  std::string address;  // host:port to listen on; port 0 picks a free one
  int world_size = 1;
  // The job's shared secret (common/job_secret.h): calls without it are UNAUTHENTICATED.
  // Empty accepts every caller.
  std::string secret;
  // What the rendezvous may hold in all (keys and values), so a misbehaving rank cannot grow
  // the chief without bound; Gloo's rendezvous needs a few KiB per rank.
  int64_t max_store_bytes = 64 << 20;
  // Elastic jobs (Reform, Heartbeat): the first generation forms once world_size members ask,
  // later ones once every live member asks and there are at least min_members; a member
  // silent for member_timeout has left.
  int min_members = 1;
  absl::Duration member_timeout = absl::Seconds(10);
};

// A generation of an elastic job: the members that train together, ascending (a member's rank
// is its index).
struct Generation {
  int64_t number = 0;
  std::vector<int> members;
};

class CoordinatorServer {
 public:
  // INVALID_ARGUMENT for a bad world size; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const CoordinatorServerOptions& options);
  ~CoordinatorServer();  // wakes every waiting Get and stops the server

  int port() const { return port_; }
  const std::string& session() const { return session_; }

 private:
  class Service;
  CoordinatorServer() = default;

  std::string session_;
  int port_ = 0;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

struct CoordinatorClientOptions {
  std::string address;  // the chief's coordinator, host:port
  int rank = 0;
  int world_size = 1;
  // An elastic job's member: `rank` is its task's stable id (docs/architecture.md §5.10).
  bool elastic = false;
  // How long Connect keeps trying while the chief is not up yet.
  absl::Duration connect_timeout = absl::Minutes(5);
  absl::Duration rpc_timeout = absl::Seconds(30);  // Join and Set; Get waits its own timeout
  // When set and true, Connect stops waiting for the chief (CANCELLED): a signal arrived.
  const std::atomic<bool>* stop = nullptr;
  std::string secret;  // the job's shared secret, sent on every call
};

// A KeyValueStore over the chief's coordinator. Thread-safe.
class CoordinatorClient final : public KeyValueStore {
 public:
  // Joins the chief's current session, retrying with backoff while it is unreachable.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const CoordinatorClientOptions& options);
  ~CoordinatorClient() override;

  const std::string& session() const { return session_; }
  // This task's rank, or (elastic) its stable member id.
  int member() const { return options_.rank; }

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;

  // Elastic jobs: waits (up to `timeout`, giving up once options.stop is set) for the next
  // generation, which this member joins; with `leave`, leaves at once.
  // ABORTED "training is over" once the chief has called Finish.
  absl::StatusOr<Generation> Reform(bool leave, absl::Duration timeout);
  // Elastic jobs, the chief at the end of training: answers every Reform, waiting or to come,
  // with ABORTED "training is over".
  absl::Status Finish();
  // Elastic jobs: this member is alive. True when the members changed since the newest
  // generation: every rank reforms after the same step.
  absl::StatusOr<bool> Heartbeat();

 private:
  class Stub;
  CoordinatorClient() = default;

  CoordinatorClientOptions options_;
  std::string session_;
  std::unique_ptr<Stub> stub_;
  // The newest generation Reform returned: the next one waits for a newer one.
  std::atomic<int64_t> generation_{0};
};

}  // namespace kubetrain::worker
