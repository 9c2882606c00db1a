// The ps's gRPC service (see service.h): method registration, request dispatch,
// authentication, refusal logs and metrics, and the Init/Push/Export/Status/Shutdown/Join/Attach
// handlers. The pull path, which parks pulls until their step, is in service_pulls.cc.
#include "ps/service.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "ps/wire.h"

namespace kubetrain::ps {
namespace {

// Codes a healthy cluster produces routinely (waiting for the chief, slow peers, workers that
// stop) are not logged.
bool Routine(absl::StatusCode code) {
  return code == absl::StatusCode::kOk || code == absl::StatusCode::kFailedPrecondition ||
         code == absl::StatusCode::kDeadlineExceeded || code == absl::StatusCode::kUnavailable ||
         code == absl::StatusCode::kCancelled;
}

// At most this many refusals are logged per window; the rest are counted into the next line.
constexpr int kLogLinesPerWindow = 10;
constexpr absl::Duration kLogWindow = absl::Seconds(10);

std::vector<PartitionKey> KeysOf(const v1::PullRequest& request) {
  std::vector<PartitionKey> keys;
  keys.reserve(request.keys_size());
  for (const v1::PartitionKey& key : request.keys()) keys.push_back(FromProto(key));
  return keys;
}

template <typename Message>
absl::Status ParseRequest(absl::string_view method, const grpc::ByteBuffer& request,
                          Message& message) {
  if (request.Length() == 0) return absl::OkStatus();  // proto3: every field at its default
  grpc::ByteBuffer copy(request);                      // shares the slices, copies no bytes
  grpc::ProtoBufferReader reader(&copy);
  if (!reader.status().ok() || !message.ParseFromZeroCopyStream(&reader)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed ", method, " request: ", request.Length(), " bytes that are not a ",
        message.GetTypeName(), " message (is the client built from this ps's ps.proto?)"));
  }
  return absl::OkStatus();
}

template <typename Message>
absl::Status SerializeResponse(const Message& message, grpc::ByteBuffer& out, size_t& bytes) {
  bool own_buffer = false;
  const grpc::Status s =
      grpc::GenericSerialize<grpc::ProtoBufferWriter, Message>(message, &out, &own_buffer);
  if (!s.ok()) return absl::InternalError(absl::StrCat("encoding the answer: ", s.error_message()));
  bytes = out.Length();
  return absl::OkStatus();
}

}  // namespace

ParameterServerService::ParameterServerService(ShardStore& store, PsMetrics* metrics,
                                               ServiceOptions options)
    : store_(store),
      metrics_(metrics),
      options_(options),
      verifier_(options_.secret),
      shm_(options_.max_shm_regions) {
  RegisterMethods();
  StartPullThreads();
}

ParameterServerService::~ParameterServerService() { StopPullThreads(); }

void ParameterServerService::AddRaw(
    const char* path,
    std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*, const grpc::ByteBuffer*,
                                            grpc::ByteBuffer*)>
        reactor) {
  AddMethod(
      new grpc::internal::RpcServiceMethod(path, grpc::internal::RpcMethod::NORMAL_RPC, nullptr));
  MarkMethodCallback(methods_added_++,
                     new grpc::internal::CallbackUnaryHandler<grpc::ByteBuffer, grpc::ByteBuffer>(
                         std::move(reactor)));
}

void ParameterServerService::AddUnary(const char* path, absl::string_view name, Handler handler) {
  AddRaw(path, [this, name, handler](grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response) {
    return Dispatch(name, handler, context, request, response);
  });
}

void ParameterServerService::RegisterMethods() {
  using Self = ParameterServerService;
  AddUnary("/kubetrain.v1.ParameterServer/Init", "Init", &Self::Init);
  AddUnary(kPushMethod, "Push", &Self::Push);
  AddRaw(kPullMethod,
         [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                grpc::ByteBuffer* response) { return Pull(context, request, response); });
  AddRaw(kPushAndPullMethod,
         [this](grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                grpc::ByteBuffer* response) { return PushAndPull(context, request, response); });
  AddUnary("/kubetrain.v1.ParameterServer/Export", "Export", &Self::Export);
  AddUnary("/kubetrain.v1.ParameterServer/Status", "Status", &Self::Status);
  AddUnary("/kubetrain.v1.ParameterServer/Shutdown", "Shutdown", &Self::Shutdown);
  AddUnary("/kubetrain.v1.ParameterServer/Join", "Join", &Self::Join);
  AddUnary("/kubetrain.v1.ParameterServer/Attach", "Attach", &Self::Attach);
}

grpc::ServerUnaryReactor* ParameterServerService::Dispatch(absl::string_view method,
                                                           Handler handler,
                                                           grpc::CallbackServerContext* context,
                                                           const grpc::ByteBuffer* request,
                                                           grpc::ByteBuffer* response) {
  size_t response_bytes = 0;
  absl::Status status;
  // gRPC would answer an escaped exception with a bare UNKNOWN and log nothing.
  try {
    status = Authenticate(*context);
    if (status.ok()) status = (this->*handler)(*context, *request, *response, response_bytes);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError(
        absl::StrCat(method, ": out of memory handling a ", request->Length(), "-byte request"));
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat(method, ": ", e.what()));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(Conclude(method, status, request->Length(), response_bytes));
  return reactor;
}

grpc::Status ParameterServerService::Conclude(absl::string_view method, const absl::Status& status,
                                              size_t request_bytes, size_t response_bytes) {
  if (metrics_ != nullptr) {
    metrics_->CountRequest(method, absl::StatusCodeToString(status.code()));
    metrics_->AddReceivedBytes(request_bytes);
    if (status.ok()) metrics_->AddSentBytes(response_bytes);
  }
  if (!Routine(status.code())) {
    int64_t suppressed = -1;
    {
      absl::MutexLock lock(&log_mu_);
      const absl::Time now = absl::Now();
      if (now - log_window_start_ >= kLogWindow) {
        log_window_start_ = now;
        logged_in_window_ = 0;
      }
      if (logged_in_window_ < kLogLinesPerWindow) {
        ++logged_in_window_;
        suppressed = std::exchange(suppressed_, 0);
      } else {
        ++suppressed_;
      }
    }
    const std::string code = absl::StatusCodeToString(status.code());
    if (suppressed == 0) {
      log::Warn("Refused request", {{"method", method}, {"code", code}, {"error", status}});
    } else if (suppressed > 0) {
      log::Warn("Refused request", {{"method", method},
                                    {"code", code},
                                    {"error", status},
                                    {"refusals_not_logged", suppressed}});
    }
  }
  return ToGrpc(status);
}

absl::Status ParameterServerService::Authenticate(
    const grpc::CallbackServerContext& context) const {
  grpc::Status s = verifier_.Check(context);
  return s.ok() ? absl::OkStatus() : absl::UnauthenticatedError(s.error_message());
}

absl::Status ParameterServerService::Init(grpc::CallbackServerContext&,
                                          const grpc::ByteBuffer& request,
                                          grpc::ByteBuffer& response, size_t& response_bytes) {
  v1::InitRequest init;
  RETURN_IF_ERROR(ParseRequest("Init", request, init));
  ASSIGN_OR_RETURN(ShardState state, ShardStateFromInit(init));
  init.Clear();  // the store takes a copy; do not hold the request's twice
  RETURN_IF_ERROR(store_.Init(std::move(state)));
  pull_cache_.Clear();  // partitions may be gone; the new ones have new revisions anyway
  const StoreStatus s = store_.Status();
  log::Info("Initialised shard", {{"global_step", s.global_step},
                                  {"partitions", s.partitions},
                                  {"parameter_bytes", s.parameter_bytes},
                                  {"run_id", s.run_id}});
  return SerializeResponse(v1::InitResponse(), response, response_bytes);
}

absl::StatusOr<PushOutcome> ParameterServerService::ApplyPush(
    const grpc::ByteBuffer& request, PushFrame& frame, std::shared_ptr<const ShmRegion>& region) {
  grpc::ByteBuffer copy(request);  // the frame takes the slices' references, not their bytes
  RETURN_IF_ERROR(frame.Parse(copy));
  if (frame.shm_region() != 0) {
    ASSIGN_OR_RETURN(region, shm_.Find(frame.shm_region()));
    RETURN_IF_ERROR(frame.BindRegion(*region));
  }
  ASSIGN_OR_RETURN(PushOutcome outcome, store_.Push(frame.args()));
  if (region != nullptr && metrics_ != nullptr) {
    uint64_t bytes = 0;
    for (const GradientRef& g : frame.args().gradients) bytes += g.values.wire_bytes();
    metrics_->AddSharedMemoryBytes(bytes);  // a few bytes of them may have come in the request
  }
  return outcome;
}

absl::Status ParameterServerService::Push(grpc::CallbackServerContext&,
                                          const grpc::ByteBuffer& request,
                                          grpc::ByteBuffer& response, size_t& response_bytes) {
  PushFrame frame;
  std::shared_ptr<const ShmRegion> region;  // held until the store has applied the gradients
  ASSIGN_OR_RETURN(PushOutcome outcome, ApplyPush(request, frame, region));
  v1::PushResponse answer;
  answer.set_global_step(outcome.global_step);
  answer.set_stale(outcome.stale);
  return SerializeResponse(answer, response, response_bytes);
}

grpc::ServerUnaryReactor* ParameterServerService::Pull(grpc::CallbackServerContext* context,
                                                       const grpc::ByteBuffer* request,
                                                       grpc::ByteBuffer* response) {
  return DispatchPull("Pull", context, request, response, [&]() -> absl::StatusOr<PullTarget> {
    v1::PullRequest pull;
    RETURN_IF_ERROR(ParseRequest("Pull", *request, pull));
    std::shared_ptr<const ShmRegion> region;
    if (pull.shm_region() != 0) {
      ASSIGN_OR_RETURN(region, shm_.Find(pull.shm_region()));
    }
    if (pull.encoding() < 0 || pull.encoding() > static_cast<int>(WireFloat::kBFloat16)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Pull: value encoding ", pull.encoding(),
          " is not one this ps build knows (float32, fp16, bf16); run every task of the job "
          "from one image"));
    }
    return PullTarget{"Pull",          KeysOf(pull),
                      pull.min_step(), std::move(region),
                      false,           static_cast<WireFloat>(pull.encoding())};
  });
}

grpc::ServerUnaryReactor* ParameterServerService::PushAndPull(grpc::CallbackServerContext* context,
                                                              const grpc::ByteBuffer* request,
                                                              grpc::ByteBuffer* response) {
  return DispatchPull(
      "PushAndPull", context, request, response, [&]() -> absl::StatusOr<PullTarget> {
        PushFrame frame;
        std::shared_ptr<const ShmRegion> region;  // the push's, where the pull writes too
        ASSIGN_OR_RETURN(PushOutcome pushed, ApplyPush(*request, frame, region));
        return PullTarget{"PushAndPull",     {},           frame.pull_min_step(),
                          std::move(region), pushed.stale, frame.pull_wire()};
      });
}

absl::Status ParameterServerService::Export(grpc::CallbackServerContext&,
                                            const grpc::ByteBuffer& request,
                                            grpc::ByteBuffer& response, size_t& response_bytes) {
  v1::ExportRequest export_request;
  RETURN_IF_ERROR(ParseRequest("Export", request, export_request));
  ASSIGN_OR_RETURN(ShardState state, store_.Export());
  v1::ExportResponse answer;
  ShardStateToExport(state, &answer);
  if (answer.ByteSizeLong() > options_.max_response_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("export is ", answer.ByteSizeLong(), " bytes, over the ",
                     options_.max_response_bytes, "-byte message limit; raise --max-message-mb"));
  }
  return SerializeResponse(answer, response, response_bytes);
}

absl::Status ParameterServerService::Status(grpc::CallbackServerContext&,
                                            const grpc::ByteBuffer& request,
                                            grpc::ByteBuffer& response, size_t& response_bytes) {
  v1::StatusRequest status_request;
  RETURN_IF_ERROR(ParseRequest("Status", request, status_request));
  const StoreStatus s = store_.Status();
  v1::StatusResponse answer;
  answer.set_initialized(s.initialized);
  answer.set_global_step(s.global_step);
  answer.set_parameter_bytes(s.parameter_bytes);
  answer.set_run_id(s.run_id);
  answer.set_shutting_down(s.closed || shutdown_requested());
  answer.set_partitions(static_cast<uint32_t>(s.partitions));
  return SerializeResponse(answer, response, response_bytes);
}

absl::Status ParameterServerService::Shutdown(grpc::CallbackServerContext&,
                                              const grpc::ByteBuffer& request,
                                              grpc::ByteBuffer& response, size_t& response_bytes) {
  v1::ShutdownRequest shutdown;
  RETURN_IF_ERROR(ParseRequest("Shutdown", request, shutdown));
  RequestShutdown(shutdown.reason().empty() ? "Shutdown RPC" : shutdown.reason());
  return SerializeResponse(v1::ShutdownResponse(), response, response_bytes);
}

absl::Status ParameterServerService::Join(grpc::CallbackServerContext&,
                                          const grpc::ByteBuffer& request,
                                          grpc::ByteBuffer& response, size_t& response_bytes) {
  v1::MemberRequest join;
  RETURN_IF_ERROR(ParseRequest("Join", request, join));
  ASSIGN_OR_RETURN(Membership m, store_.Join(join.worker(), join.leave()));
  if (m.changed) {
    log::Info(join.leave() ? "Worker left" : "Membership changed",
              {{"worker", join.worker()},
               {"members", m.members.size()},
               {"quota", m.quota},
               {"global_step", m.global_step}});
  }
  v1::MemberResponse answer;
  for (uint32_t member : m.members) answer.add_members(member);
  answer.set_membership_version(m.version);
  answer.set_quota(static_cast<uint32_t>(m.quota));
  answer.set_global_step(m.global_step);
  answer.set_gradients_applied(m.gradients_applied);
  return SerializeResponse(answer, response, response_bytes);
}

absl::Status ParameterServerService::Attach(grpc::CallbackServerContext&,
                                            const grpc::ByteBuffer& request,
                                            grpc::ByteBuffer& response, size_t& response_bytes) {
  v1::AttachRequest attach;
  RETURN_IF_ERROR(ParseRequest("Attach", request, attach));
  v1::AttachResponse answer;
  if (attach.detach() != 0) {
    shm_.Remove(attach.detach());
    if (metrics_ != nullptr) metrics_->SetSharedMemoryRegions(shm_.size());
    return SerializeResponse(answer, response, response_bytes);
  }
  if (!options_.shared_memory) {
    return absl::FailedPreconditionError(
        "this ps runs with --shared-memory=false: pushes and pulls use gRPC bytes");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const ShmRegion> region, ShmRegion::Attach(attach));
  const uint64_t bytes = region->bytes();
  answer.set_region(shm_.Add(std::move(region)));
  if (metrics_ != nullptr) metrics_->SetSharedMemoryRegions(shm_.size());
  log::Info("Mapped a worker's shared memory",
            {{"worker", attach.worker()}, {"bytes", bytes}, {"regions", shm_.size()}});
  return SerializeResponse(answer, response, response_bytes);
}

void ParameterServerService::RequestShutdown(absl::string_view reason) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_requested_) return;
    shutdown_requested_ = true;
  }
  log::Info("Shutting down", {{"reason", reason}});
  store_.Close();  // answers every parked pull through OnStoreChange
}

bool ParameterServerService::shutdown_requested() const {
  absl::MutexLock lock(&mu_);
  return shutdown_requested_;
}

bool ParameterServerService::WaitForShutdownRequest(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(&shutdown_requested_), timeout);
}

}  // namespace kubetrain::ps
