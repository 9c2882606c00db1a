// The kubetrain.v1.ParameterServer gRPC service over one ShardStore, and PsServer, which runs it.
#pragma once

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/server.h"
#include "kubetrain/v1/ps.grpc.pb.h"
#include "ps/metrics.h"
#include "ps/store.h"
#include "ps/tensor_coding.h"

namespace kubetrain::ps {

struct ServiceOptions {
  // Upper bound on how long a Pull waits for its min_step, whatever the client's deadline, so a
  // vanished client cannot pin a server thread for long.
  absl::Duration max_pull_wait = absl::Minutes(10);
};

// Translates RPCs to ShardStore calls and counts them. Owns nothing but the shutdown flag; the
// store and metrics must outlive it. Thread-safe (gRPC calls it from many threads).
//
// Implements kubetrain.v1.ParameterServer by registering its methods itself (as generated code
// does) rather than deriving from the generated Service: Push and Pull carry the tensors, so
// their request (push) and response (pull) are coded by ps/tensor_coding.h straight between
// gRPC's slices and the store, with the same bytes on the wire; the others use protobuf.
class ParameterServerService final : public grpc::Service {
 public:
  ParameterServerService(ShardStore& store, PsMetrics* metrics, ServiceOptions options = {});

  grpc::Status Init(grpc::ServerContext* context, const v1::InitRequest* request,
                    v1::InitResponse* response);
  grpc::Status PushTensors(grpc::ServerContext* context, const PushFrame* request,
                           v1::PushResponse* response);
  grpc::Status PullTensors(grpc::ServerContext* context, const v1::PullRequest* request,
                           PullFrame* response);
  grpc::Status Export(grpc::ServerContext* context, const v1::ExportRequest* request,
                      v1::ExportResponse* response);
  grpc::Status Status(grpc::ServerContext* context, const v1::StatusRequest* request,
                      v1::StatusResponse* response);
  grpc::Status Shutdown(grpc::ServerContext* context, const v1::ShutdownRequest* request,
                        v1::ShutdownResponse* response);

  // Closes the store (waking blocked pulls) and marks shutdown as requested. Idempotent.
  void RequestShutdown(absl::string_view reason);
  bool shutdown_requested() const;
  // True once shutdown was requested, false if `timeout` passed first.
  bool WaitForShutdownRequest(absl::Duration timeout) const;

 private:
  // Adds the six methods in ps.proto's order.
  void RegisterMethods();
  absl::Status DoPush(const PushFrame& request, v1::PushResponse& response);
  absl::Status DoPull(grpc::ServerContext& context, const v1::PullRequest& request,
                      PullFrame& response);
  grpc::Status Finish(absl::string_view method, const absl::Status& status, size_t request_bytes,
                      size_t response_bytes);
  grpc::Status Finish(absl::string_view method, const absl::Status& status,
                      const google::protobuf::Message& request,
                      const google::protobuf::Message& response);

  ShardStore& store_;
  PsMetrics* const metrics_;
  const ServiceOptions options_;
  mutable absl::Mutex mu_;
  bool shutdown_requested_ ABSL_GUARDED_BY(mu_) = false;
};

struct ServerOptions {
  std::string address = "0.0.0.0:2222";  // port 0 picks a free port (tests)
  // gRPC refuses messages over 4 MiB by default; a pull of a whole shard is far larger.
  int max_message_bytes = 256 << 20;
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

  // Stops taking calls, wakes blocked pulls, and waits up to `grace` for calls in flight.
  void Stop(absl::Duration grace = absl::Seconds(5));

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
