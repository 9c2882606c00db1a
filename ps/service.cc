#include "ps/service.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/method_handler.h"
#include "ps/wire.h"

namespace kubetrain::ps {
namespace {

// Codes a healthy cluster produces routinely (waiting for the chief, slow peers) are not logged.
bool Routine(absl::StatusCode code) {
  return code == absl::StatusCode::kOk || code == absl::StatusCode::kFailedPrecondition ||
         code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable;
}

std::vector<PartitionKey> KeysOf(const v1::PullRequest& request) {
  std::vector<PartitionKey> keys;
  keys.reserve(request.keys_size());
  for (const v1::PartitionKey& key : request.keys()) keys.push_back(FromProto(key));
  return keys;
}

}  // namespace

ParameterServerService::ParameterServerService(ShardStore& store, PsMetrics* metrics,
                                               ServiceOptions options)
    : store_(store), metrics_(metrics), options_(options) {
  RegisterMethods();
}

namespace {

// One protobuf-coded unary method: `Fn` is a member of ParameterServerService.
template <typename Request, typename Response,
          grpc::Status (ParameterServerService::*Fn)(grpc::ServerContext*, const Request*,
                                                     Response*)>
grpc::internal::RpcServiceMethod* ProtoMethod(const char* path, ParameterServerService* service) {
  using MessageLite = grpc::protobuf::MessageLite;
  return new grpc::internal::RpcServiceMethod(
      path, grpc::internal::RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<ParameterServerService, Request, Response, MessageLite,
                                           MessageLite>(
          [](ParameterServerService* s, grpc::ServerContext* context, const Request* request,
             Response* response) { return (s->*Fn)(context, request, response); },
          service));
}

}  // namespace

void ParameterServerService::RegisterMethods() {
  using grpc::internal::RpcMethod;
  using grpc::internal::RpcMethodHandler;
  using grpc::internal::RpcServiceMethod;
  using MessageLite = grpc::protobuf::MessageLite;
  using Self = ParameterServerService;
  AddMethod(ProtoMethod<v1::InitRequest, v1::InitResponse, &Self::Init>(
      "/kubetrain.v1.ParameterServer/Init", this));
  AddMethod(new RpcServiceMethod(
      kPushMethod, RpcMethod::NORMAL_RPC,
      new RpcMethodHandler<Self, PushFrame, v1::PushResponse, PushFrame, MessageLite>(
          [](Self* service, grpc::ServerContext* context, const PushFrame* request,
             v1::PushResponse* response) {
            return service->PushTensors(context, request, response);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      kPullMethod, RpcMethod::NORMAL_RPC,
      new RpcMethodHandler<Self, v1::PullRequest, PullFrame, MessageLite, PullFrame>(
          [](Self* service, grpc::ServerContext* context, const v1::PullRequest* request,
             PullFrame* response) { return service->PullTensors(context, request, response); },
          this)));
  AddMethod(ProtoMethod<v1::ExportRequest, v1::ExportResponse, &Self::Export>(
      "/kubetrain.v1.ParameterServer/Export", this));
  AddMethod(ProtoMethod<v1::StatusRequest, v1::StatusResponse, &Self::Status>(
      "/kubetrain.v1.ParameterServer/Status", this));
  AddMethod(ProtoMethod<v1::ShutdownRequest, v1::ShutdownResponse, &Self::Shutdown>(
      "/kubetrain.v1.ParameterServer/Shutdown", this));
}

grpc::Status ParameterServerService::Finish(absl::string_view method, const absl::Status& status,
                                            const google::protobuf::Message& request,
                                            const google::protobuf::Message& response) {
  return Finish(method, status, request.ByteSizeLong(), response.ByteSizeLong());
}

grpc::Status ParameterServerService::Finish(absl::string_view method, const absl::Status& status,
                                            size_t request_bytes, size_t response_bytes) {
  if (metrics_ != nullptr) {
    metrics_->CountRequest(method, absl::StatusCodeToString(status.code()));
    metrics_->AddReceivedBytes(request_bytes);
    if (status.ok()) metrics_->AddSentBytes(response_bytes);
  }
  if (!Routine(status.code())) {
    log::Warn("Refused request", {{"method", method}, {"error", status}});
  }
  return ToGrpc(status);
}

grpc::Status ParameterServerService::Init(grpc::ServerContext*, const v1::InitRequest* request,
                                          v1::InitResponse* response) {
  absl::Status status;
  if (auto state = ShardStateFromInit(*request); !state.ok()) {
    status = state.status();
  } else {
    status = store_.Init(*std::move(state));
  }
  if (status.ok()) {
    const StoreStatus s = store_.Status();
    log::Info("Initialised shard", {{"global_step", s.global_step},
                                    {"partitions", s.partitions},
                                    {"parameter_bytes", s.parameter_bytes},
                                    {"run_id", s.run_id}});
  }
  return Finish("Init", status, *request, *response);
}

absl::Status ParameterServerService::DoPush(const PushFrame& request, v1::PushResponse& response) {
  ASSIGN_OR_RETURN(PushOutcome outcome, store_.Push(request.args()));
  response.set_global_step(outcome.global_step);
  response.set_stale(outcome.stale);
  return absl::OkStatus();
}

grpc::Status ParameterServerService::PushTensors(grpc::ServerContext*, const PushFrame* request,
                                                 v1::PushResponse* response) {
  return Finish("Push", DoPush(*request, *response), request->byte_size(),
                response->ByteSizeLong());
}

absl::Status ParameterServerService::DoPull(grpc::ServerContext& context,
                                            const v1::PullRequest& request, PullFrame& response) {
  const absl::Time deadline =
      std::min(absl::FromChrono(context.deadline()), absl::Now() + options_.max_pull_wait);
  const std::vector<PartitionKey> keys = KeysOf(request);
  auto visit = [&response](const PartitionKey& key, uint64_t offset,
                           std::span<const float> values) {
    response.Add(key, offset, values);  // copies under the store's lock: pushes may follow
  };
  ASSIGN_OR_RETURN(PullOutcome outcome, store_.Pull(keys, request.min_step(), deadline, visit));
  response.Finish(outcome.global_step, std::move(outcome.run_id));
  return absl::OkStatus();
}

grpc::Status ParameterServerService::PullTensors(grpc::ServerContext* context,
                                                 const v1::PullRequest* request,
                                                 PullFrame* response) {
  absl::Status status = DoPull(*context, *request, *response);
  if (!status.ok()) response->Clear();  // a failed visit may have filled part of it
  return Finish("Pull", status, request->ByteSizeLong(), response->byte_size());
}

grpc::Status ParameterServerService::Export(grpc::ServerContext*, const v1::ExportRequest* request,
                                            v1::ExportResponse* response) {
  auto state = store_.Export();
  if (state.ok()) ShardStateToExport(*state, response);
  return Finish("Export", state.status(), *request, *response);
}

grpc::Status ParameterServerService::Status(grpc::ServerContext*, const v1::StatusRequest* request,
                                            v1::StatusResponse* response) {
  const StoreStatus s = store_.Status();
  response->set_initialized(s.initialized);
  response->set_global_step(s.global_step);
  response->set_parameter_bytes(s.parameter_bytes);
  response->set_run_id(s.run_id);
  response->set_shutting_down(s.closed || shutdown_requested());
  response->set_partitions(static_cast<uint32_t>(s.partitions));
  return Finish("Status", absl::OkStatus(), *request, *response);
}

grpc::Status ParameterServerService::Shutdown(grpc::ServerContext*,
                                              const v1::ShutdownRequest* request,
                                              v1::ShutdownResponse* response) {
  RequestShutdown(request->reason().empty() ? "Shutdown RPC" : request->reason());
  return Finish("Shutdown", absl::OkStatus(), *request, *response);
}

void ParameterServerService::RequestShutdown(absl::string_view reason) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_requested_) return;
    shutdown_requested_ = true;
  }
  log::Info("Shutting down", {{"reason", reason}});
  store_.Close();
}

bool ParameterServerService::shutdown_requested() const {
  absl::MutexLock lock(&mu_);
  return shutdown_requested_;
}

bool ParameterServerService::WaitForShutdownRequest(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&shutdown_requested_), timeout);
}

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const ServerOptions& options,
                                                          PsMetrics* metrics) {
  std::unique_ptr<PsServer> server(new PsServer());
  server->host_ = options.address.substr(0, options.address.rfind(':'));
  server->store_ = std::make_unique<ShardStore>(metrics);
  server->service_ =
      std::make_unique<ParameterServerService>(*server->store_, metrics, options.service);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &server->port_);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
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
  // Close first: a pull blocked on a step would otherwise hold Shutdown for the whole grace.
  service_->RequestShutdown("server stopping");
  server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  server_->Wait();
}

}  // namespace kubetrain::ps
