// PsClient (see client.h): one channel per ps task, the fan-out that runs every call against
// all of them at once, readiness polling, and the public methods, whose per-method requests and
// answers are coded in client_calls.h.
#include "ps/client.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_secret.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "ps/client_calls.h"
#include "ps/wire.h"

namespace kubetrain::ps {
namespace {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address,
                                           const ClientOptions& options) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  const int backoff_ms = static_cast<int>(absl::ToInt64Milliseconds(options.reconnect_backoff));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, backoff_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, backoff_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
  // A recreated ps pod keeps its name and gets a new IP (docs/decisions/0001): the name is
  // looked up again after a failed connection at most this often, not gRPC's default of every
  // 30 s, which stalled every worker that long after a ps was evicted or restarted.
  args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, backoff_ms);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a Pull parks for minutes
  return CreateJobChannel(address, args, options.secret);
}

// The element counts of the caller's buffers, for PsClient::CheckBuffers.
template <typename T>
std::vector<size_t> SizesOf(std::span<const std::span<T>> buffers) {
  std::vector<size_t> sizes;
  sizes.reserve(buffers.size());
  for (const auto& b : buffers) sizes.push_back(b.size());
  return sizes;
}

// INVALID_ARGUMENT unless `at` (a push's version) has one entry per ps task.
absl::Status CheckVersion(const Version& at, size_t num_ps) {
  if (at.steps.size() != num_ps || (!at.run_ids.empty() && at.run_ids.size() != num_ps)) {
    return absl::InvalidArgumentError("version has the wrong number of ps entries");
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless `min_version` (what a pull waits for), if any, has a step per ps task.
absl::Status CheckMinVersion(const Version* min_version, size_t num_ps) {
  if (min_version != nullptr && min_version->steps.size() != num_ps) {
    return absl::InvalidArgumentError("min_version has the wrong number of ps steps");
  }
  return absl::OkStatus();
}

}  // namespace

int64_t Version::step() const {
  if (steps.empty()) return 0;
  return *std::min_element(steps.begin(), steps.end());
}

int64_t Version::gradients_applied() const {
  if (applied.empty()) return 0;
  return *std::min_element(applied.begin(), applied.end());
}

Version Version::Next() const {
  Version next = *this;
  for (int64_t& s : next.steps) ++s;
  return next;
}

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(std::vector<std::string> addresses,
                                                           PlacementPlan plan,
                                                           ClientOptions options) {
  if (static_cast<int>(addresses.size()) != plan.num_ps()) {
    return absl::InvalidArgumentError(absl::StrCat(
        addresses.size(), " ps addresses for a plan over ", plan.num_ps(), " ps tasks"));
  }
  for (const std::string& a : addresses) {
    if (a.empty()) return absl::InvalidArgumentError("empty ps address");
  }
  return std::unique_ptr<PsClient>(new PsClient(std::move(addresses), std::move(plan), options));
}

PsClient::PsClient(std::vector<std::string> addresses, PlacementPlan plan, ClientOptions options)
    : addresses_(std::move(addresses)), plan_(std::move(plan)), options_(options) {
  for (const std::string& address : addresses_) {
    std::shared_ptr<grpc::Channel> channel = MakeChannel(address, options_);
    stubs_.push_back(
        {v1::ParameterServer::NewStub(channel), std::make_unique<grpc::GenericStub>(channel)});
  }
  for (size_t p = 0; p < plan_.partitions().size(); ++p) index_[plan_.partitions()[p].key] = p;
  for (int ps = 0; ps < plan_.num_ps(); ++ps) {
    pieces_.push_back(options_.pipeline
                          ? plan_.Pieces(ps, options_.min_piece_bytes, options_.max_pieces)
                          : std::vector<std::vector<size_t>>{plan_.PartitionsOn(ps)});
    in_pieces_ = in_pieces_ || pieces_.back().size() > 1;
    std::vector<uint64_t>& bytes = piece_bytes_.emplace_back();
    for (const std::vector<size_t>& piece : pieces_.back()) {
      uint64_t sum = 0;
      for (size_t p : piece) sum += plan_.partitions()[p].bytes();
      bytes.push_back(sum);
    }
  }
  auto attach = [this](int ps, const v1::AttachRequest& offer) -> absl::StatusOr<uint64_t> {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
    v1::AttachResponse answer;
    RETURN_IF_ERROR(FromGrpc(stubs_[ps].typed->Attach(&context, offer, &answer)));
    return answer.region();
  };
  auto detach = [this](int ps, uint64_t region, absl::Time deadline) {
    grpc::ClientContext context;  // best effort: a ps that is gone has forgotten it anyway
    context.set_deadline(absl::ToChronoTime(deadline));
    v1::AttachRequest request;
    request.set_detach(region);
    v1::AttachResponse answer;
    (void)stubs_[ps].typed->Attach(&context, request, &answer);
  };
  shm_ = std::make_unique<ShmLinks>(plan_, options_.worker, options_.shared_memory, attach, detach);
}

std::vector<int> PsClient::AllPs() const {
  std::vector<int> all(plan_.num_ps());
  for (int i = 0; i < plan_.num_ps(); ++i) all[i] = i;
  return all;
}

calls::PullCall PsClient::MakePullCall(std::span<const std::span<float>> values,
                                       const Version* min_version,
                                       const std::vector<ShmLinks::Lease>& leases) const {
  const int n = plan_.num_ps();
  return {plan_,
          values,
          min_version,
          [this](const PartitionKey& key) { return Find(key); },
          leases,
          {std::vector<int64_t>(n), std::vector<std::string>(n), std::vector<int64_t>(n)},
          calls::Coverage(plan_.partitions().size()),
          0,
          options_.compression};
}

absl::StatusOr<size_t> PsClient::Find(const PartitionKey& key) const {
  auto it = index_.find(key);
  if (it == index_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ps holds partition ", key.variable, "/", key.index, " that the plan lacks"));
  }
  return it->second;
}

absl::Status PsClient::CheckBuffers(size_t count, const std::vector<size_t>& sizes) const {
  if (count != plan_.variables().size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " buffers for ", plan_.variables().size(), " variables"));
  }
  for (size_t v = 0; v < count; ++v) {
    if (sizes[v] != plan_.variables()[v].elements) {
      return absl::InvalidArgumentError(absl::StrCat("buffer for ", plan_.variables()[v].name,
                                                     " has ", sizes[v], " elements, want ",
                                                     plan_.variables()[v].elements));
    }
  }
  return absl::OkStatus();
}

// Starts one call per target on a private completion queue, so the transfers to all ps tasks
// overlap, then handles the answers in completion order. `call` provides Request/Response types,
// Build(ps, Request&), Start(stub, context, request, cq) and Done(ps, Response&) -> Status. The
// first failure cancels the calls still in flight: a pull blocked on a step would otherwise sit
// out its whole deadline after another ps already said it was restarted.
template <typename Call>
absl::Status PsClient::FanOut(absl::string_view method, const std::vector<int>& targets,
                              absl::Duration timeout, Call& call) {
  using Request = typename Call::Request;
  using Response = typename Call::Response;
  struct Pending {
    grpc::ClientContext context;
    Request request;
    Response response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
  };
  grpc::CompletionQueue cq;
  std::vector<std::unique_ptr<Pending>> pending;
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  for (size_t i = 0; i < targets.size(); ++i) {
    auto p = std::make_unique<Pending>();
    p->context.set_deadline(deadline);
    call.Build(targets[i], p->request);
    p->reader = call.Start(stubs_[targets[i]], &p->context, p->request, &cq);
    p->reader->Finish(&p->response, &p->status, reinterpret_cast<void*>(i));
    pending.push_back(std::move(p));
  }
  absl::Status first;
  bool cancelled = false;
  for (size_t done = 0; done < pending.size();) {
    void* tag = nullptr;
    bool ok = false;
    // Short waits, so a stop request cancels what is in flight instead of waiting it out.
    const grpc::CompletionQueue::NextStatus next = NextEvent(cq, &tag, &ok);
    if (next == grpc::CompletionQueue::SHUTDOWN) break;
    if (next == grpc::CompletionQueue::TIMEOUT) {
      if (!cancelled && Stopped()) {
        cancelled = true;
        if (first.ok()) first = absl::CancelledError(absl::StrCat(method, ": stopped"));
        for (auto& p : pending) p->context.TryCancel();
      }
      continue;
    }
    ++done;
    const size_t i = reinterpret_cast<size_t>(tag);
    absl::Status status = FromGrpc(pending[i]->status);
    if (status.ok()) status = call.Done(targets[i], pending[i]->response);
    if (status.ok() || !first.ok()) continue;
    first = Annotate(status,
                     absl::StrCat(method, " ps ", targets[i], " (", addresses_[targets[i]], ")"));
    for (auto& p : pending) p->context.TryCancel();
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  return first;
}

grpc::CompletionQueue::NextStatus PsClient::NextEvent(grpc::CompletionQueue& cq, void** tag,
                                                      bool* ok) const {
  if (options_.stop == nullptr) {
    return cq.Next(tag, ok) ? grpc::CompletionQueue::GOT_EVENT : grpc::CompletionQueue::SHUTDOWN;
  }
  return cq.AsyncNext(
      tag, ok, std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.stop_poll));
}

absl::StatusOr<Version> PsClient::Pull(std::span<const std::span<float>> values,
                                       const Version* min_version) {
  RETURN_IF_ERROR(CheckBuffers(values.size(), SizesOf(values)));
  RETURN_IF_ERROR(CheckMinVersion(min_version, plan_.num_ps()));
  const std::vector<int> all = AllPs();
  const absl::Duration timeout =
      min_version != nullptr ? options_.pull_timeout : options_.rpc_timeout;
  for (int attempt = 1;; ++attempt) {
    std::vector<ShmLinks::Lease> leases = shm_->AcquireAll(all);
    calls::PullCall call = MakePullCall(values, min_version, leases);
    absl::Status status = FanOut("Pull", all, timeout, call);
    if (status.ok()) status = call.coverage.Complete(plan_, all);
    if (status.ok()) return std::move(call.version);
    bool shared = false;
    for (ShmLinks::Lease& lease : leases) {
      if (lease.region() == 0) continue;
      shared = true;
      lease.Discard();  // a ps may still write into it: the next pull offers a fresh buffer
    }
    // A ps that restarted does not know the region (ABORTED; a pull is never aborted
    // otherwise): pulling is idempotent, so once more with a fresh buffer.
    if (!shared || !absl::IsAborted(status) || attempt > 1) return status;
  }
}

absl::StatusOr<PushResult> PsClient::Push(std::span<const std::span<const float>> gradients,
                                          const Version& at) {
  RETURN_IF_ERROR(CheckBuffers(gradients.size(), SizesOf(gradients)));
  RETURN_IF_ERROR(CheckVersion(at, plan_.num_ps()));
  SlicePins pins;  // declared first: waits, when destroyed, for gRPC to let go of `gradients`
  std::vector<ShmLinks::Lease> leases = shm_->AcquireAll(AllPs());
  calls::PushCall call{plan_,  gradients, at,      options_.worker,     pins,
                       leases, {at, 0},   nullptr, options_.compression};
  absl::Status status = FanOut("Push", AllPs(), options_.rpc_timeout, call);
  pins.WaitUntilReleased();
  if (!status.ok()) {
    // A ps may still be reading a cancelled push's gradients: never write that buffer again.
    for (ShmLinks::Lease& lease : leases) lease.Discard();
    return status;
  }
  return std::move(call.result);
}

absl::StatusOr<PushResult> PsClient::PushAndPull(std::span<const std::span<const float>> gradients,
                                                 const Version& at,
                                                 std::span<const std::span<float>> values,
                                                 const Version* min_version) {
  RETURN_IF_ERROR(CheckBuffers(gradients.size(), SizesOf(gradients)));
  RETURN_IF_ERROR(CheckBuffers(values.size(), SizesOf(values)));
  RETURN_IF_ERROR(CheckVersion(at, plan_.num_ps()));
  RETURN_IF_ERROR(CheckMinVersion(min_version, plan_.num_ps()));
  if (min_version != nullptr && in_pieces_) {
    return PushAndPullInPieces(gradients, at, values, *min_version);
  }
  const std::vector<int> all = AllPs();
  SlicePins pins;  // declared first: waits, when destroyed, for gRPC to let go of `gradients`
  std::vector<ShmLinks::Lease> leases = shm_->AcquireAll(all);
  calls::PushAndPullCall call{calls::PushCall{plan_,
                                              gradients,
                                              at,
                                              options_.worker,
                                              pins,
                                              leases,
                                              {},
                                              min_version,
                                              options_.compression},
                              MakePullCall(values, min_version, leases)};
  const absl::Duration timeout =
      min_version != nullptr ? options_.pull_timeout : options_.rpc_timeout;
  absl::Status status = FanOut("PushAndPull", all, timeout, call);
  if (status.ok()) status = call.pull.coverage.Complete(plan_, all);
  pins.WaitUntilReleased();
  if (!status.ok()) {
    // A ps may still be reading the gradients or writing the values: never use that buffer again.
    for (ShmLinks::Lease& lease : leases) lease.Discard();
    return status;
  }
  return PushResult{std::move(call.pull.version), call.pull.stale};
}

absl::Status PsClient::InitAll(const std::vector<int>& targets, const ModelState& state) {
  calls::InitCall call{std::vector<v1::InitRequest>(plan_.num_ps())};
  for (int ps : targets) {
    ASSIGN_OR_RETURN(call.requests[ps], calls::MakeInitRequest(plan_, ps, state));
  }
  return FanOut("Init", targets, options_.rpc_timeout, call);
}

absl::Status PsClient::Init(const ModelState& state) { return InitAll(AllPs(), state); }

absl::Status PsClient::InitShard(int ps, const ModelState& state) {
  if (ps < 0 || ps >= plan_.num_ps()) {
    return absl::InvalidArgumentError(absl::StrCat("no ps task ", ps));
  }
  return InitAll({ps}, state);
}

absl::StatusOr<ModelState> PsClient::Export() {
  calls::ExportCall call{plan_,
                         [this](const v1::PartitionKey& key) { return Find(FromProto(key)); },
                         {},
                         calls::Coverage(plan_.partitions().size())};
  for (const VariableSpec& v : plan_.variables()) {
    call.state.variables.push_back({v.name, std::vector<float>(v.elements), {}});
  }
  const std::vector<int> all = AllPs();
  RETURN_IF_ERROR(FanOut("Export", all, options_.rpc_timeout, call));
  RETURN_IF_ERROR(call.coverage.Complete(plan_, all));
  return std::move(call.state);
}

absl::StatusOr<std::vector<ShardInfo>> PsClient::Status() {
  calls::StatusCall call{addresses_, std::vector<ShardInfo>(plan_.num_ps())};
  RETURN_IF_ERROR(FanOut("Status", AllPs(), options_.rpc_timeout, call));
  return std::move(call.infos);
}

absl::StatusOr<Membership> PsClient::Join(bool leave) {
  calls::JoinCall call{options_.worker, leave, {}};
  RETURN_IF_ERROR(FanOut("Join", AllPs(), options_.rpc_timeout, call));
  return std::move(call.view);
}

absl::Status PsClient::Shutdown(absl::string_view reason) {
  calls::ShutdownCall call{std::string(reason)};
  return FanOut("Shutdown", AllPs(), options_.rpc_timeout, call);
}

namespace {

// Why the cluster is not ready yet ("" = ready), or a status that retrying cannot fix.
absl::StatusOr<std::string> NotReadyReason(const absl::StatusOr<std::vector<ShardInfo>>& infos,
                                           const PlacementPlan& plan, bool require_initialized) {
  if (!infos.ok()) {
    const absl::StatusCode code = infos.status().code();
    if (code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded) {
      return std::string(infos.status().message());
    }
    return infos.status();
  }
  for (size_t ps = 0; ps < infos->size(); ++ps) {
    const ShardInfo& info = (*infos)[ps];
    if (info.shutting_down) {
      return absl::CancelledError(
          absl::StrCat("ps ", ps, " (", info.address, ") is shutting down"));
    }
    if (!require_initialized) continue;
    if (!info.initialized) {
      return absl::StrCat("ps ", ps, " (", info.address, ") not initialised");
    }
    if (info.partitions != plan.PartitionsOn(static_cast<int>(ps)).size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ps ", ps, " (", info.address, ") holds ", info.partitions, " partitions, the plan ",
          plan.PartitionsOn(static_cast<int>(ps)).size(), "; do all tasks use the same plan?"));
    }
  }
  return std::string();
}

}  // namespace

absl::Status PsClient::WaitReady(absl::Duration timeout, bool require_initialized) {
  Backoff backoff(options_.wait_ready_backoff);
  const absl::Time give_up = absl::Now() + timeout;
  for (int attempt = 1;; ++attempt) {
    if (Stopped()) return absl::CancelledError("stopped while waiting for parameter servers");
    ASSIGN_OR_RETURN(std::string reason, NotReadyReason(Status(), plan_, require_initialized));
    if (reason.empty()) return absl::OkStatus();
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat("parameter servers not ready after ",
                                                      absl::FormatDuration(timeout), ": ", reason));
    }
    const absl::Duration delay = std::min(backoff.Next(), left);
    log::Info("Waiting for parameter servers",
              {{"attempt", attempt}, {"reason", reason}, {"retry_in", delay}});
    const absl::Time wake = absl::Now() + delay;
    for (absl::Time now = absl::Now(); now < wake; now = absl::Now()) {
      if (Stopped()) return absl::CancelledError("stopped while waiting for parameter servers");
      absl::SleepFor(std::min(wake - now, options_.stop_poll));
    }
  }
}

}  // namespace kubetrain::ps