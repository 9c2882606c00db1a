// The per-method halves of PsClient's calls (ps/client.h): how each RPC's request is built from
// the caller's buffers and the plan, and how each ps task's answer is merged back. PsClient runs
// one of these structs against every ps task at once (PsClient::FanOut), which asks each for
//   using Request, Response;
//   void Build(int ps, Request&);
//   static unique_ptr<ClientAsyncResponseReader<Response>> Start(stubs, context, request, cq);
//   absl::Status Done(int ps, Response&);
// Not thread-safe: FanOut calls Build and Done from its own thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/support/async_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "kubetrain/v1/ps.grpc.pb.h"
#include "ps/client.h"
#include "ps/partition.h"
#include "ps/shared_memory.h"
#include "ps/store.h"
#include "ps/tensor_coding.h"

namespace kubetrain::ps::calls {

template <typename Response>
using Reader = std::unique_ptr<grpc::ClientAsyncResponseReader<Response>>;

// The Init request for ps task `ps`: its partitions of `state`. INVALID_ARGUMENT if `state`
// lacks a variable of the plan or sizes differ.
absl::StatusOr<v1::InitRequest> MakeInitRequest(const PlacementPlan& plan, int ps,
                                                const ModelState& state);

// Checks that a response carried each partition of its ps exactly once.
class Coverage {
 public:
  explicit Coverage(size_t partitions) : seen_(partitions, false) {}
  absl::Status Mark(size_t partition, const PartitionSpec& spec, int ps);
  absl::Status Complete(const PlacementPlan& plan, const std::vector<int>& targets) const;

 private:
  std::vector<bool> seen_;
};

// Pull and Push move the tensors, so they go through the generic stub with ps/tensor_coding.h
// doing the (de)serialisation straight between the caller's buffers and gRPC's slices.
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
  int stale = 0;                         // PushAndPull: ps tasks that dropped its push as stale
  WireFloat wire = WireFloat::kFloat32;  // how the values are to travel (ClientOptions)

  void Build(int ps, Request& request) const { BuildFor(ps, {}, request); }
  // A pull of only `partitions` (indices into plan.partitions(), all on `ps`; empty: all of them).
  void BuildFor(int ps, std::span<const size_t> partitions, Request& request) const;
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
  absl::Status Done(int ps, Response& response);
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
  PushResult result;                     // Push's answers; PushAndPull's are decoded by PullCall
  const Version* pull_min = nullptr;     // PushAndPull: the version its pull waits for
  WireFloat wire = WireFloat::kFloat32;  // how gradients and PushAndPull's values travel

  void Build(int ps, Request& request) const { BuildFor(ps, plan.PartitionsOn(ps), request); }
  // A push of only `partitions` (indices into plan.partitions(), all on `ps`).
  void BuildFor(int ps, std::span<const size_t> partitions, Request& request) const;
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
  absl::Status Done(int ps, const Response& response);
};

// A push built as PushCall builds it, answered as PullCall decodes a pull.
struct PushAndPullCall {
  using Request = grpc::ByteBuffer;
  using Response = grpc::ByteBuffer;
  PushCall push;
  PullCall pull;

  void Build(int ps, Request& request) const { push.Build(ps, request); }
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
  absl::Status Done(int ps, Response& response) { return pull.Done(ps, response); }
};

struct InitCall {
  using Request = v1::InitRequest;
  using Response = v1::InitResponse;
  std::vector<v1::InitRequest> requests;  // by ps task, moved out as the calls start

  void Build(int ps, Request& request) { request = std::move(requests[ps]); }
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
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
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
  absl::Status Done(int ps, const Response& response);
};

struct StatusCall {
  using Request = v1::StatusRequest;
  using Response = v1::StatusResponse;
  const std::vector<std::string>& addresses;
  std::vector<ShardInfo> infos;

  void Build(int, Request&) const {}
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
  absl::Status Done(int ps, const Response& r);
};

struct JoinCall {
  using Request = v1::MemberRequest;
  using Response = v1::MemberResponse;
  uint32_t worker;
  bool leave;
  Membership view;  // ps 0's

  void Build(int, Request& request) const;
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
  absl::Status Done(int ps, const Response& r);
};

struct ShutdownCall {
  using Request = v1::ShutdownRequest;
  using Response = v1::ShutdownResponse;
  std::string reason;

  void Build(int, Request& request) const { request.set_reason(reason); }
  static Reader<Response> Start(PsStubs& stubs, grpc::ClientContext* context,
                                const Request& request, grpc::CompletionQueue* cq);
  absl::Status Done(int, const Response&) { return absl::OkStatus(); }
};

}  // namespace kubetrain::ps::calls
