// PsServer: one ps task's gRPC server around its store and service (ps/service.h).
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "ps/metrics.h"
#include "ps/service.h"
#include "ps/store.h"

namespace kubetrain::ps {

struct ServerOptions {
  std::string address = "0.0.0.0:2222";  // port 0 picks a free port (tests)
  // gRPC refuses messages over 4 MiB by default; a pull of a whole shard is far larger.
  int max_message_bytes = 256 << 20;
  // Connections with no call for this long are closed, so clients that vanished without closing
  // their sockets do not accumulate.
  absl::Duration max_connection_idle = absl::Minutes(5);
  ServiceOptions service;
};

// One ps task: owns its store, service and gRPC server. Thread-safe.
class PsServer {
 public:
  // `metrics` may be null; otherwise it must outlive the server. UNAVAILABLE if the address
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const ServerOptions& options,
                                                         PsMetrics* metrics);
  ~PsServer();

  int port() const { return port_; }
  std::string address() const;  // "127.0.0.1:<port>" when bound to a wildcard or loopback
  ShardStore& store() { return *store_; }
  ParameterServerService& service() { return *service_; }

  // Stops taking calls, answers parked pulls, and waits up to `grace` for calls in flight
  // (cancelling those still running then).
  void Stop(absl::Duration grace = absl::Seconds(1));

 private:
  PsServer() = default;

  std::string host_;
  int port_ = 0;
  std::unique_ptr<ShardStore> store_;
  std::unique_ptr<ParameterServerService> service_;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex stop_mu_;
  bool stopped_ ABSL_GUARDED_BY(stop_mu_) = false;
};

}  // namespace kubetrain::ps
