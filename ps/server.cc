// PsServer (see server.h): one ps task's gRPC server around its store and service: listening
// address, message limits, keepalive and idle-connection settings, and the graceful stop.
#include "ps/server.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/server_builder.h"

namespace kubetrain::ps {

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const ServerOptions& options,
                                                          PsMetrics* metrics) {
  std::unique_ptr<PsServer> server(new PsServer());
  server->host_ = options.address.substr(0, options.address.rfind(':'));
  server->store_ = std::make_unique<ShardStore>(metrics);
  ServiceOptions service_options = options.service;
  service_options.max_response_bytes =
      std::min<uint64_t>(service_options.max_response_bytes, options.max_message_bytes);
  server->service_ =
      std::make_unique<ParameterServerService>(*server->store_, metrics, service_options);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(
                                 std::min(options.max_connection_idle, absl::Hours(24)))));
  // Probe quiet connections so a peer that vanished (pod deleted, node lost) is noticed and
  // its parked pulls cancelled, and let clients' own keepalive pings through.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("ps: cannot listen on ", options.address,
                     " (is the port in use? choose another with --port)"));
  }
  return server;
}

PsServer::~PsServer() { Stop(absl::ZeroDuration()); }

std::string PsServer::address() const {
  const bool wildcard = host_.empty() || host_ == "0.0.0.0" || host_ == "[::]";
  return absl::StrCat(wildcard ? "127.0.0.1" : host_, ":", port_);
}

void PsServer::Stop(absl::Duration grace) {
  {
    absl::MutexLock lock(&stop_mu_);
    if (stopped_ || server_ == nullptr) return;
    stopped_ = true;
  }
  // Close first: parked pulls are answered now instead of being cancelled after the grace.
  service_->RequestShutdown("server stopping");
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace kubetrain::ps
