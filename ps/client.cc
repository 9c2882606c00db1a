// Over 500 lines on purpose: every PsClient RPC as a Call struct beside the FanOut that runs it.
#include "ps/client.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_secret.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "ps/tensor_coding.h"
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
  return CreateJobChannel(address, args, options.secret);
}

// The variables of `state` in plan order; INVALID_ARGUMENT if one is missing or mis-sized.
absl::StatusOr<std::vector<const VariableState*>> MatchVariables(const PlacementPlan& plan,
                                                                 const ModelState& state) {
  std::vector<const VariableState*> out(plan.variables().size(), nullptr);
  for (const VariableState& v : state.variables) {
    const int i = plan.FindVariable(v.name);
    if (i < 0) return absl::InvalidArgumentError(absl::StrCat("variable ", v.name, " not in plan"));
    const uint64_t want = plan.variables()[i].elements;
    if (v.values.size() != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", v.name, " has ", v.values.size(), " elements, want ", want));
    }
    for (const auto& [slot, values] : v.slots) {
      if (values.size() != want) {
        return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " of ", v.name, " has ",
                                                       values.size(), " elements, want ", want));
      }
    }
    out[i] = &v;
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("state lacks variable ", plan.variables()[i].name));
    }
  }
  return out;
}

// Fills `out` with the partition `spec` of variable `v`: values and every slot.
void FillPartition(const PartitionSpec& spec, const VariableState& v, v1::PartitionState* out) {
  v1::Partition* p = out->mutable_partition();
  *p->mutable_key() = ToProto(spec.key);
  p->set_offset(spec.offset);
  p->set_length(spec.length);
  const std::span<const float> values(v.values);
  SetFloats(values.subspan(spec.offset, spec.length), p->mutable_values());
  for (const auto& [name, slot] : v.slots) {
    v1::Slot* s = out->add_slots();
    s->set_name(name);
    SetFloats(std::span<const float>(slot).subspan(spec.offset, spec.length), s->mutable_values());
  }
}

// Checks that a response carried each partition of its ps exactly once.
class Coverage {
 public:
  explicit Coverage(size_t partitions) : seen_(partitions, false) {}
  absl::Status Mark(size_t partition, const PartitionSpec& spec, int ps) {
    if (spec.ps != ps) {
      return absl::FailedPreconditionError(absl::StrCat(
          "partition ", spec.key.variable, "/", spec.key.index, " came from ps ", ps,
          " but the plan puts it on ps ", spec.ps, "; do all tasks use the same plan?"));
    }
    if (seen_[partition]) return absl::InternalError("partition answered twice");
    seen_[partition] = true;
    return absl::OkStatus();
  }
  absl::Status Complete(const PlacementPlan& plan, const std::vector<int>& targets) const {
    for (int ps : targets) {
      for (size_t p : plan.PartitionsOn(ps)) {
        if (!seen_[p]) {
          return absl::FailedPreconditionError(absl::StrCat(
              "ps ", ps, " did not return partition ", plan.partitions()[p].key.variable, "/",
              plan.partitions()[p].key.index, "; do all tasks use the same plan?"));
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  std::vector<bool> seen_;
};

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
    grpc::CompletionQueue::NextStatus next;
    if (options_.stop == nullptr) {
      next =
          cq.Next(&tag, &ok) ? grpc::CompletionQueue::GOT_EVENT : grpc::CompletionQueue::SHUTDOWN;
    } else {
      next = cq.AsyncNext(
          &tag, &ok,
          std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.stop_poll));
    }
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

namespace {

// Pull and Push move the tensors, so they go through the generic stub with ps/tensor_coding.h
// doing the (de)serialisation straight between the caller's buffers and gRPC's slices.
std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> StartRaw(
    PsStubs& stubs, const char* method, grpc::ClientContext* context,
    const grpc::ByteBuffer& request, grpc::CompletionQueue* cq) {
  auto reader = stubs.generic->PrepareUnaryCall(context, method, request, cq);
  reader->StartCall();
  return reader;
}

struct PullCall {
  using Request = grpc::ByteBuffer;
  using Response = grpc::ByteBuffer;
  const PlacementPlan& plan;
  std::span<const std::span<float>> values;
  const Version* min_version;
  std::function<absl::StatusOr<size_t>(const PartitionKey&)> find;
  const std::vector<ShmLinks::Lease>& leases;  // per ps: its shared-memory buffer, if any
  Version version;
  Coverage coverage;
  int stale = 0;  // PushAndPull: ps tasks that dropped its push as stale

  void Build(int ps, Request& request) const {
    v1::PullRequest pull;
    if (min_version != nullptr) pull.set_min_step(min_version->steps[ps]);
    pull.set_shm_region(leases[ps].region());
    const std::string bytes = pull.SerializeAsString();
    grpc::Slice slice(bytes);
    request = grpc::ByteBuffer(&slice, 1);
  }
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return StartRaw(stubs, kPullMethod, context, request, cq);
  }
  absl::Status Done(int ps, Response& response) {
    auto destination = [&](const PartitionKey& key, uint64_t offset,
                           uint64_t length) -> absl::StatusOr<std::span<float>> {
      ASSIGN_OR_RETURN(size_t index, find(key));
      const PartitionSpec& spec = plan.partitions()[index];
      RETURN_IF_ERROR(coverage.Mark(index, spec, ps));
      if (offset != spec.offset || length != spec.length) {
        return absl::FailedPreconditionError(
            absl::StrCat("partition ", key.variable, "/", key.index, " holds elements [", offset,
                         ", +", length, ") but the plan says [", spec.offset, ", +", spec.length,
                         "); do all tasks use the same plan?"));
      }
      return values[spec.variable].subspan(spec.offset, spec.length);
    };
    const ShmBuffer* buffer = leases[ps].buffer();
    auto from_buffer = [&](const PartitionKey& key,
                           uint64_t) -> absl::StatusOr<std::span<const float>> {
      const int slot = buffer->Find(key);
      if (slot < 0) return absl::InternalError("the ps answered a partition the buffer lacks");
      return buffer->values(slot);
    };
    std::optional<PullSource> shared;
    if (buffer != nullptr) shared.emplace(from_buffer);
    ASSIGN_OR_RETURN(PullHeader header, DecodePullResponse(response, destination, shared));
    version.steps[ps] = header.global_step;
    version.run_ids[ps] = std::move(header.run_id);
    version.applied[ps] = header.gradients_applied;
    if (header.push_stale) ++stale;
    return absl::OkStatus();
  }
};

struct PushCall {
  using Request = grpc::ByteBuffer;
  using Response = grpc::ByteBuffer;
  const PlacementPlan& plan;
  std::span<const std::span<const float>> gradients;
  const Version& at;
  uint32_t worker;
  SlicePins& pins;  // the gradient memory gRPC references until the calls are done
  const std::vector<ShmLinks::Lease>& leases;  // per ps: its shared-memory buffer, if any
  PushResult result;                  // Push's answers; PushAndPull's are decoded by PullCall
  const Version* pull_min = nullptr;  // PushAndPull: the version its pull waits for

  void Build(int ps, Request& request) const {
    ShmBuffer* buffer = leases[ps].buffer();
    PushHeader header{at.run_ids.empty() ? std::string() : at.run_ids[ps], worker, at.steps[ps],
                      leases[ps].region(), pull_min != nullptr ? pull_min->steps[ps] : 0};
    std::vector<PartitionView> views;
    views.reserve(plan.PartitionsOn(ps).size());
    for (size_t index : plan.PartitionsOn(ps)) {
      const PartitionSpec& spec = plan.partitions()[index];
      std::span<const float> gradient = gradients[spec.variable].subspan(spec.offset, spec.length);
      if (buffer != nullptr) {  // the one copy this push makes; the ps reads it in place
        const std::span<float> slot = buffer->gradient(buffer->Find(spec.key));
        std::copy(gradient.begin(), gradient.end(), slot.begin());
        gradient = slot;
      }
      views.push_back({&spec.key, spec.offset, gradient});
    }
    request = EncodePushRequest(header, views, pins);
  }
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return StartRaw(stubs, kPushMethod, context, request, cq);
  }
  absl::Status Done(int ps, const Response& response) {
    grpc::Slice bytes;
    v1::PushResponse push;
    if (!response.DumpToSingleSlice(&bytes).ok() ||
        !push.ParseFromArray(bytes.begin(), static_cast<int>(bytes.size()))) {
      return absl::InternalError("malformed PushResponse");
    }
    result.version.steps[ps] = push.global_step();
    if (push.stale()) ++result.stale;
    return absl::OkStatus();
  }
};

// A push built as PushCall builds it, answered as PullCall decodes a pull.
struct PushAndPullCall {
  using Request = grpc::ByteBuffer;
  using Response = grpc::ByteBuffer;
  PushCall push;
  PullCall pull;

  void Build(int ps, Request& request) const { push.Build(ps, request); }
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return StartRaw(stubs, kPushAndPullMethod, context, request, cq);
  }
  absl::Status Done(int ps, Response& response) { return pull.Done(ps, response); }
};

struct InitCall {
  using Request = v1::InitRequest;
  using Response = v1::InitResponse;
  std::vector<v1::InitRequest> requests;  // by ps task, moved out as the calls start

  void Build(int ps, Request& request) { request = std::move(requests[ps]); }
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return stubs.typed->AsyncInit(context, request, cq);
  }
  absl::Status Done(int, const Response&) { return absl::OkStatus(); }
};

struct ExportCall {
  using Request = v1::ExportRequest;
  using Response = v1::ExportResponse;
  const PlacementPlan& plan;
  std::function<absl::StatusOr<size_t>(const v1::PartitionKey&)> find;
  ModelState state;
  Coverage coverage;
  bool first = true;

  void Build(int, Request&) const {}
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return stubs.typed->AsyncExport(context, request, cq);
  }
  absl::Status Done(int ps, const Response& response) {
    if (first) {
      ASSIGN_OR_RETURN(state.config, FromProto(response.config()));
      state.run_id = response.run_id();
      state.global_step = response.global_step();
      state.gradients_applied = response.gradients_applied();
      first = false;
    }
    state.global_step = std::min(state.global_step, response.global_step());
    state.gradients_applied = std::min(state.gradients_applied, response.gradients_applied());
    for (const v1::PartitionState& p : response.partitions()) {
      ASSIGN_OR_RETURN(size_t index, find(p.partition().key()));
      const PartitionSpec& spec = plan.partitions()[index];
      RETURN_IF_ERROR(coverage.Mark(index, spec, ps));
      VariableState& v = state.variables[spec.variable];
      RETURN_IF_ERROR(CopyFloats(p.partition().values(),
                                 std::span<float>(v.values).subspan(spec.offset, spec.length)));
      for (const v1::Slot& slot : p.slots()) {
        std::vector<float>& whole = v.slots[slot.name()];
        whole.resize(v.values.size());
        RETURN_IF_ERROR(
            CopyFloats(slot.values(), std::span<float>(whole).subspan(spec.offset, spec.length)));
      }
    }
    return absl::OkStatus();
  }
};

struct StatusCall {
  using Request = v1::StatusRequest;
  using Response = v1::StatusResponse;
  const std::vector<std::string>& addresses;
  std::vector<ShardInfo> infos;

  void Build(int, Request&) const {}
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return stubs.typed->AsyncStatus(context, request, cq);
  }
  absl::Status Done(int ps, const Response& r) {
    infos[ps] = {addresses[ps], r.initialized(),   r.global_step(), r.parameter_bytes(),
                 r.run_id(),    r.shutting_down(), r.partitions()};
    return absl::OkStatus();
  }
};

struct JoinCall {
  using Request = v1::MemberRequest;
  using Response = v1::MemberResponse;
  uint32_t worker;
  bool leave;
  Membership view;  // ps 0's

  void Build(int, Request& request) const {
    request.set_worker(worker);
    request.set_leave(leave);
  }
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return stubs.typed->AsyncJoin(context, request, cq);
  }
  absl::Status Done(int ps, const Response& r) {
    if (ps != 0) return absl::OkStatus();
    view.members.assign(r.members().begin(), r.members().end());
    view.version = r.membership_version();
    view.quota = static_cast<int>(r.quota());
    view.global_step = r.global_step();
    view.gradients_applied = r.gradients_applied();
    return absl::OkStatus();
  }
};

struct ShutdownCall {
  using Request = v1::ShutdownRequest;
  using Response = v1::ShutdownResponse;
  std::string reason;

  void Build(int, Request& request) const { request.set_reason(reason); }
  static auto Start(PsStubs& stubs, grpc::ClientContext* context, const Request& request,
                    grpc::CompletionQueue* cq) {
    return stubs.typed->AsyncShutdown(context, request, cq);
  }
  absl::Status Done(int, const Response&) { return absl::OkStatus(); }
};

}  // namespace

absl::StatusOr<Version> PsClient::Pull(std::span<const std::span<float>> values,
                                       const Version* min_version) {
  std::vector<size_t> sizes;
  for (const auto& v : values) sizes.push_back(v.size());
  RETURN_IF_ERROR(CheckBuffers(values.size(), sizes));
  if (min_version != nullptr && static_cast<int>(min_version->steps.size()) != plan_.num_ps()) {
    return absl::InvalidArgumentError("min_version has the wrong number of ps steps");
  }
  const int n = plan_.num_ps();
  const std::vector<int> all = AllPs();
  const absl::Duration timeout =
      min_version != nullptr ? options_.pull_timeout : options_.rpc_timeout;
  for (int attempt = 1;; ++attempt) {
    std::vector<ShmLinks::Lease> leases;
    for (int ps : all) leases.push_back(shm_->Acquire(ps));
    PullCall call{plan_,
                  values,
                  min_version,
                  [this](const PartitionKey& key) { return Find(key); },
                  leases,
                  {std::vector<int64_t>(n), std::vector<std::string>(n), std::vector<int64_t>(n)},
                  Coverage(plan_.partitions().size())};
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
  std::vector<size_t> sizes;
  for (const auto& g : gradients) sizes.push_back(g.size());
  RETURN_IF_ERROR(CheckBuffers(gradients.size(), sizes));
  const size_t n = plan_.num_ps();
  if (at.steps.size() != n || (!at.run_ids.empty() && at.run_ids.size() != n)) {
    return absl::InvalidArgumentError("version has the wrong number of ps entries");
  }
  SlicePins pins;  // declared first: waits, when destroyed, for gRPC to let go of `gradients`
  std::vector<ShmLinks::Lease> leases;
  for (int ps : AllPs()) leases.push_back(shm_->Acquire(ps));
  PushCall call{plan_, gradients, at, options_.worker, pins, leases, {at, 0}};
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
  std::vector<size_t> sizes;
  for (const auto& g : gradients) sizes.push_back(g.size());
  RETURN_IF_ERROR(CheckBuffers(gradients.size(), sizes));
  sizes.clear();
  for (const auto& v : values) sizes.push_back(v.size());
  RETURN_IF_ERROR(CheckBuffers(values.size(), sizes));
  const int n = plan_.num_ps();
  if (static_cast<int>(at.steps.size()) != n ||
      (!at.run_ids.empty() && static_cast<int>(at.run_ids.size()) != n)) {
    return absl::InvalidArgumentError("version has the wrong number of ps entries");
  }
  if (min_version != nullptr && static_cast<int>(min_version->steps.size()) != n) {
    return absl::InvalidArgumentError("min_version has the wrong number of ps steps");
  }
  const std::vector<int> all = AllPs();
  SlicePins pins;  // declared first: waits, when destroyed, for gRPC to let go of `gradients`
  std::vector<ShmLinks::Lease> leases;
  for (int ps : all) leases.push_back(shm_->Acquire(ps));
  PushAndPullCall call{
      PushCall{plan_, gradients, at, options_.worker, pins, leases, {}, min_version},
      PullCall{plan_,
               values,
               min_version,
               [this](const PartitionKey& key) { return Find(key); },
               leases,
               {std::vector<int64_t>(n), std::vector<std::string>(n), std::vector<int64_t>(n)},
               Coverage(plan_.partitions().size())}};
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

absl::StatusOr<v1::InitRequest> PsClient::MakeInit(int ps, const ModelState& state) const {
  ASSIGN_OR_RETURN(std::vector<const VariableState*> vars, MatchVariables(plan_, state));
  v1::InitRequest request;
  *request.mutable_config() = ToProto(state.config);
  request.set_global_step(state.global_step);
  request.set_run_id(state.run_id);
  request.set_gradients_applied(state.gradients_applied);
  for (size_t index : plan_.PartitionsOn(ps)) {
    const PartitionSpec& spec = plan_.partitions()[index];
    FillPartition(spec, *vars[spec.variable], request.add_partitions());
  }
  return request;
}

absl::Status PsClient::InitAll(const std::vector<int>& targets, const ModelState& state) {
  InitCall call{std::vector<v1::InitRequest>(plan_.num_ps())};
  for (int ps : targets) {
    ASSIGN_OR_RETURN(call.requests[ps], MakeInit(ps, state));
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
  ExportCall call{plan_,
                  [this](const v1::PartitionKey& key) { return Find(FromProto(key)); },
                  {},
                  Coverage(plan_.partitions().size())};
  for (const VariableSpec& v : plan_.variables()) {
    call.state.variables.push_back({v.name, std::vector<float>(v.elements), {}});
  }
  const std::vector<int> all = AllPs();
  RETURN_IF_ERROR(FanOut("Export", all, options_.rpc_timeout, call));
  RETURN_IF_ERROR(call.coverage.Complete(plan_, all));
  return std::move(call.state);
}

absl::StatusOr<std::vector<ShardInfo>> PsClient::Status() {
  StatusCall call{addresses_, std::vector<ShardInfo>(plan_.num_ps())};
  RETURN_IF_ERROR(FanOut("Status", AllPs(), options_.rpc_timeout, call));
  return std::move(call.infos);
}

absl::StatusOr<Membership> PsClient::Join(bool leave) {
  JoinCall call{options_.worker, leave, {}};
  RETURN_IF_ERROR(FanOut("Join", AllPs(), options_.rpc_timeout, call));
  return std::move(call.view);
}

absl::Status PsClient::Shutdown(absl::string_view reason) {
  ShutdownCall call{std::string(reason)};
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
