// The per-method halves of PsClient's calls (see client_calls.h).
#include "ps/client_calls.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "grpcpp/generic/generic_stub.h"
#include "ps/wire.h"

namespace kubetrain::ps::calls {
namespace {

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

std::unique_ptr<grpc::ClientAsyncResponseReader<grpc::ByteBuffer>> StartRaw(
    PsStubs& stubs, const char* method, grpc::ClientContext* context,
    const grpc::ByteBuffer& request, grpc::CompletionQueue* cq) {
  auto reader = stubs.generic->PrepareUnaryCall(context, method, request, cq);
  reader->StartCall();
  return reader;
}

}  // namespace

absl::StatusOr<v1::InitRequest> MakeInitRequest(const PlacementPlan& plan, int ps,
                                                const ModelState& state) {
  ASSIGN_OR_RETURN(std::vector<const VariableState*> vars, MatchVariables(plan, state));
  v1::InitRequest request;
  *request.mutable_config() = ToProto(state.config);
  request.set_global_step(state.global_step);
  request.set_run_id(state.run_id);
  request.set_gradients_applied(state.gradients_applied);
  for (size_t index : plan.PartitionsOn(ps)) {
    const PartitionSpec& spec = plan.partitions()[index];
    FillPartition(spec, *vars[spec.variable], request.add_partitions());
  }
  return request;
}

absl::Status Coverage::Mark(size_t partition, const PartitionSpec& spec, int ps) {
  if (spec.ps != ps) {
    return absl::FailedPreconditionError(
        absl::StrCat("partition ", spec.key.variable, "/", spec.key.index, " came from ps ", ps,
                     " but the plan puts it on ps ", spec.ps, "; do all tasks use the same plan?"));
  }
  if (seen_[partition]) return absl::InternalError("partition answered twice");
  seen_[partition] = true;
  return absl::OkStatus();
}

absl::Status Coverage::Complete(const PlacementPlan& plan, const std::vector<int>& targets) const {
  for (int ps : targets) {
    for (size_t p : plan.PartitionsOn(ps)) {
      if (!seen_[p]) {
        return absl::FailedPreconditionError(
            absl::StrCat("ps ", ps, " did not return partition ", plan.partitions()[p].key.variable,
                         "/", plan.partitions()[p].key.index, "; do all tasks use the same plan?"));
      }
    }
  }
  return absl::OkStatus();
}

void PullCall::BuildFor(int ps, std::span<const size_t> partitions, Request& request) const {
  v1::PullRequest pull;
  for (size_t index : partitions) *pull.add_keys() = ToProto(plan.partitions()[index].key);
  if (min_version != nullptr) pull.set_min_step(min_version->steps[ps]);
  pull.set_shm_region(leases[ps].region());
  pull.set_encoding(static_cast<v1::ValueEncoding>(wire));
  const std::string bytes = pull.SerializeAsString();
  grpc::Slice slice(bytes);
  request = grpc::ByteBuffer(&slice, 1);
}

Reader<PullCall::Response> PullCall::Start(PsStubs& stubs, grpc::ClientContext* context,
                                           const Request& request, grpc::CompletionQueue* cq) {
  return StartRaw(stubs, kPullMethod, context, request, cq);
}

absl::Status PullCall::Done(int ps, Response& response) {
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

void PushCall::BuildFor(int ps, std::span<const size_t> partitions, Request& request) const {
  ShmBuffer* buffer = leases[ps].buffer();
  PushHeader header{at.run_ids.empty() ? std::string() : at.run_ids[ps],
                    worker,
                    at.steps[ps],
                    leases[ps].region(),
                    pull_min != nullptr ? pull_min->steps[ps] : 0,
                    wire};
  std::vector<PartitionView> views;
  views.reserve(partitions.size());
  for (size_t index : partitions) {
    const PartitionSpec& spec = plan.partitions()[index];
    std::span<const float> gradient = gradients[spec.variable].subspan(spec.offset, spec.length);
    if (buffer != nullptr) {  // the one copy this push makes; the ps reads it in place
      const std::span<float> slot = buffer->gradient(buffer->Find(spec.key));
      std::copy(gradient.begin(), gradient.end(), slot.begin());
      gradient = slot;
    }
    views.push_back({&spec.key, spec.offset, gradient, wire});
  }
  request = EncodePushRequest(header, views, pins);
}

Reader<PushCall::Response> PushCall::Start(PsStubs& stubs, grpc::ClientContext* context,
                                           const Request& request, grpc::CompletionQueue* cq) {
  return StartRaw(stubs, kPushMethod, context, request, cq);
}

absl::Status PushCall::Done(int ps, const Response& response) {
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

Reader<PushAndPullCall::Response> PushAndPullCall::Start(PsStubs& stubs,
                                                         grpc::ClientContext* context,
                                                         const Request& request,
                                                         grpc::CompletionQueue* cq) {
  return StartRaw(stubs, kPushAndPullMethod, context, request, cq);
}

Reader<InitCall::Response> InitCall::Start(PsStubs& stubs, grpc::ClientContext* context,
                                           const Request& request, grpc::CompletionQueue* cq) {
  return stubs.typed->AsyncInit(context, request, cq);
}

Reader<ExportCall::Response> ExportCall::Start(PsStubs& stubs, grpc::ClientContext* context,
                                               const Request& request, grpc::CompletionQueue* cq) {
  return stubs.typed->AsyncExport(context, request, cq);
}

absl::Status ExportCall::Done(int ps, const Response& response) {
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

Reader<StatusCall::Response> StatusCall::Start(PsStubs& stubs, grpc::ClientContext* context,
                                               const Request& request, grpc::CompletionQueue* cq) {
  return stubs.typed->AsyncStatus(context, request, cq);
}

absl::Status StatusCall::Done(int ps, const Response& r) {
  infos[ps] = {addresses[ps], r.initialized(),   r.global_step(), r.parameter_bytes(),
               r.run_id(),    r.shutting_down(), r.partitions()};
  return absl::OkStatus();
}

void JoinCall::Build(int, Request& request) const {
  request.set_worker(worker);
  request.set_leave(leave);
}

Reader<JoinCall::Response> JoinCall::Start(PsStubs& stubs, grpc::ClientContext* context,
                                           const Request& request, grpc::CompletionQueue* cq) {
  return stubs.typed->AsyncJoin(context, request, cq);
}

absl::Status JoinCall::Done(int ps, const Response& r) {
  if (ps != 0) return absl::OkStatus();
  view.members.assign(r.members().begin(), r.members().end());
  view.version = r.membership_version();
  view.quota = static_cast<int>(r.quota());
  view.global_step = r.global_step();
  view.gradients_applied = r.gradients_applied();
  return absl::OkStatus();
}

Reader<ShutdownCall::Response> ShutdownCall::Start(PsStubs& stubs, grpc::ClientContext* context,
                                                   const Request& request,
                                                   grpc::CompletionQueue* cq) {
  return stubs.typed->AsyncShutdown(context, request, cq);
}

}  // namespace kubetrain::ps::calls
