// Talks to every ps task of a job on behalf of a worker or the chief (docs/architecture.md §5.5).
//
// Worker, sync mode:
//   PsClient client(addresses, plan);
//   RETURN_IF_ERROR(client.WaitReady(absl::Minutes(30), /*require_initialized=*/true));
//   ASSIGN_OR_RETURN(Version v, client.Pull(params));               // now
//   for (;;) {
//     ComputeGradients(params, grads);
//     ASSIGN_OR_RETURN(PushResult pushed, client.Push(grads, v));   // computed at v
//     ASSIGN_OR_RETURN(v, client.Pull(params, v.Next()));           // blocks for the next step
//   }
// or, in one round trip per step, PushAndPull(grads, v, params, v.Next()).
// Async mode pulls without a minimum version. Buffers are spans over the caller's memory, one
// per variable in plan.variables() order, each variables()[i].elements long.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/backoff.h"
#include "grpcpp/generic/generic_stub.h"
#include "kubetrain/v1/ps.grpc.pb.h"
#include "ps/half_float.h"
#include "ps/partition.h"
#include "ps/shared_memory.h"
#include "ps/store.h"

namespace kubetrain::ps {
namespace calls {
struct PullCall;  // ps/client_calls.h
}

struct ClientOptions {
  absl::Duration rpc_timeout = absl::Seconds(30);  // every call except a Pull that waits
  // A Pull with a minimum version waits for the slowest worker of the step; DEADLINE_EXCEEDED
  // after this, and the caller may simply pull again.
  absl::Duration pull_timeout = absl::Minutes(5);
  int max_message_bytes = 256 << 20;
  // gRPC's default reconnect backoff grows to ~2 min; a restarted ps must be found within ~1 s.
  absl::Duration reconnect_backoff = absl::Seconds(1);
  // A ps whose node was lost or cut off answers nothing, not even a reset: a keepalive ping sent
  // after keepalive_time of a call in flight (a Pull parked for a step included) and unanswered
  // for keepalive_timeout fails the calls on that connection UNAVAILABLE, and the channel
  // reconnects, to the ps's new address once it is recreated elsewhere. Without it every call
  // sat out its deadline on the dead connection (minutes for a Pull) until TCP gave up. The ps
  // lets client pings through every 10 s (server.cc).
  absl::Duration keepalive_time = absl::Seconds(15);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  BackoffOptions wait_ready_backoff{.initial = absl::Milliseconds(500), .max = absl::Seconds(10)};
  uint32_t worker = 0;  // sent with pushes, for the ps's logs
  // When set, every call in flight (a Pull waiting for a step included) and every WaitReady
  // gives up within about stop_poll once it turns true, with CANCELLED "stopped": a worker
  // told to stop must not sit out a deadline of minutes.
  const std::atomic<bool>* stop = nullptr;
  absl::Duration stop_poll = absl::Milliseconds(50);
  // The job's shared secret (common/job_secret.h), sent with every call; empty sends none.
  std::string secret;
  // Offer each ps a shared-memory buffer (ps/shared_memory.h) on first use; where it maps it
  // (same host), pushes and pulls move their tensors through it instead of the socket.
  bool shared_memory = true;
  // How pushed gradients and pulled values cross the socket (--gradient-compression): float32,
  // or 16-bit floats the ps widen to float32 (gradients) and code from their float32 values
  // (pulls). Tensors moved through shared memory stay float32.
  WireFloat compression = WireFloat::kFloat32;
  // A sync PushAndPull (one with a min_version) moves each ps task's share in pieces
  // (PlacementPlan::Pieces): it pushes a piece, and once the ps has taken it, pulls that piece
  // (answered as soon as that piece's round completes) while pushing the next. The ps keeps a
  // round per partition, so the first piece's values travel back while the last piece's
  // gradients are still on their way, as BytePS pipelines push and pull (docs/architecture.md
  // §5.5). A ps task holding less than twice min_piece_bytes is one piece, moved in one
  // PushAndPull as before.
  bool pipeline = true;
  uint64_t min_piece_bytes = uint64_t{1} << 20;
  int max_pieces = 8;
  // How far a worker's pieces may run ahead of the rounds it has seen complete: it pushes a
  // piece to a ps only while the earlier pieces that ps has taken but whose values have not come
  // back hold at most this many bytes, counted as float32 whatever the wire (one such piece is
  // always allowed); 0: no limit. Without it, the workers whose pushes TCP favours push every
  // piece while the rounds wait for the others', and the rounds then complete in a bunch, so a
  // single ps's links take turns instead of carrying pushes and answers at once
  // (docs/architecture.md §5.5, docs/network-benchmark.md).
  uint64_t push_window_bytes = uint64_t{16} << 20;
};

// The per-ps global steps (and run ids) of the values a worker holds; what a Push is computed
// at. Every ps keeps its own step; they move in lockstep in sync mode, but one restored from an
// older checkpoint may lag, so the client never assumes they are equal.
struct Version {
  std::vector<int64_t> steps;  // one per ps task
  std::vector<std::string> run_ids;
  std::vector<int64_t> applied;  // Pull: gradients applied into the values, per ps task

  // For logs and progress: the smallest step over the ps tasks.
  int64_t step() const;
  // The smallest count of gradients applied over the ps tasks (0 before a pull).
  int64_t gradients_applied() const;
  // What the pull after a sync push waits for: every ps one step further.
  Version Next() const;
};

struct PushResult {
  Version version;  // steps after the push (PushAndPull: the pulled values' version)
  int stale = 0;    // ps tasks that dropped this push as stale (sync mode)
};

// One variable's values and optimizer slots, whole (checkpoints do not depend on the ps count).
struct VariableState {
  std::string name;
  std::vector<float> values;
  std::map<std::string, std::vector<float>> slots;  // empty: the optimizer's initial slots
};

// A whole model as the chief initialises, exports and restores it.
struct ModelState {
  TrainingConfig config;
  int64_t global_step = 0;  // Export: the smallest over ps tasks
  std::string run_id;
  int64_t gradients_applied = 0;         // Export: the smallest over ps tasks
  std::vector<VariableState> variables;  // any order; matched to the plan by name
};

struct ShardInfo {
  std::string address;
  bool initialized = false;
  int64_t global_step = 0;
  uint64_t parameter_bytes = 0;
  std::string run_id;
  bool shutting_down = false;
  uint32_t partitions = 0;
};

// The stubs of one ps task, sharing its channel: generated for the control calls, generic (raw
// byte buffers) for Push and Pull, whose tensors ps/tensor_coding.h codes without extra copies.
struct PsStubs {
  std::unique_ptr<v1::ParameterServer::Stub> typed;
  std::unique_ptr<grpc::GenericStub> generic;
};

// Owns one channel and stub per ps task. Thread-safe: calls from several threads proceed in
// parallel (each call uses its own completion queue). Every call fans out to all ps tasks
// concurrently; its status is the first failure, naming the ps task and address.
class PsClient {
 public:
  // INVALID_ARGUMENT unless there is one address per ps task of the plan.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(std::vector<std::string> addresses,
                                                          PlacementPlan plan,
                                                          ClientOptions options = {});

  const PlacementPlan& plan() const { return plan_; }
  const std::vector<std::string>& addresses() const { return addresses_; }

  // Pulls every variable into `values`. With `min_version`, each ps first waits until its step
  // reaches min_version->steps[ps] (bounded by pull_timeout).
  absl::StatusOr<Version> Pull(std::span<const std::span<float>> values,
                               const Version* min_version = nullptr);
  // Pushes every variable's gradient, each ps getting its partitions and its step from `at`.
  // The gradient bytes are sent from `gradients` without a copy; Push returns only once gRPC no
  // longer references them, so the caller may reuse the buffers as soon as it returns.
  absl::StatusOr<PushResult> Push(std::span<const std::span<const float>> gradients,
                                  const Version& at);
  // Push, then Pull into `values`, in one call per ps (PushAndPull): what a worker does every
  // step, one round trip instead of two. The result's version is the pulled values'; `stale`
  // counts the ps tasks that dropped the push (or part of it). With `min_version`, each ps waits
  // as Pull does (bounded by pull_timeout); DEADLINE_EXCEEDED then comes after the push was
  // applied, and the caller pulls again. With `min_version` and options.pipeline, a ps task's
  // share may move in pieces (ClientOptions::pipeline), one Push and one Pull call each.
  // UNIMPLEMENTED from a ps that predates the call: nothing was pushed to it, and Push and Pull
  // still work.
  absl::StatusOr<PushResult> PushAndPull(std::span<const std::span<const float>> gradients,
                                         const Version& at,
                                         std::span<const std::span<float>> values,
                                         const Version* min_version = nullptr);

  // Chief: replaces the state of every ps (initialisation or restore), or of one ps that came
  // back empty. INVALID_ARGUMENT if `state` lacks a variable of the plan or sizes differ.
  absl::Status Init(const ModelState& state);
  absl::Status InitShard(int ps, const ModelState& state);
  // Chief: values, slots and steps of every ps, reassembled per variable.
  absl::StatusOr<ModelState> Export();
  absl::StatusOr<std::vector<ShardInfo>> Status();
  // Asks every ps to exit (training is over).
  absl::Status Shutdown(absl::string_view reason);
  // Elastic sync training: joins (or, `leave`, leaves) the membership of every ps as worker
  // options.worker; returns ps 0's view of it (docs/architecture.md §5.10).
  absl::StatusOr<Membership> Join(bool leave);

  // Polls Status until every ps answers and, with require_initialized, holds initialised state.
  // Retries UNAVAILABLE, DEADLINE_EXCEEDED and "not initialised" with backoff, logging one line
  // per retry; DEADLINE_EXCEEDED naming the last reason once `timeout` has passed, CANCELLED
  // once options.stop is set.
  absl::Status WaitReady(absl::Duration timeout, bool require_initialized);

 private:
  PsClient(std::vector<std::string> addresses, PlacementPlan plan, ClientOptions options);

  template <typename Call>
  absl::Status FanOut(absl::string_view method, const std::vector<int>& targets,
                      absl::Duration timeout, Call& call);
  // The next event on `cq`, waiting at most options.stop_poll when a stop flag is set.
  grpc::CompletionQueue::NextStatus NextEvent(grpc::CompletionQueue& cq, void** tag,
                                              bool* ok) const;
  // PushAndPull of a sync step in pieces (ps/client_pieces.cc).
  absl::StatusOr<PushResult> PushAndPullInPieces(std::span<const std::span<const float>> gradients,
                                                 const Version& at,
                                                 std::span<const std::span<float>> values,
                                                 const Version& min_version);
  std::vector<int> AllPs() const;
  bool Stopped() const { return options_.stop != nullptr && options_.stop->load(); }
  absl::Status CheckBuffers(size_t count, const std::vector<size_t>& sizes) const;
  absl::Status InitAll(const std::vector<int>& targets, const ModelState& state);
  // The pull half of Pull and PushAndPull: decodes every ps task's answer into `values`.
  calls::PullCall MakePullCall(std::span<const std::span<float>> values, const Version* min_version,
                               const std::vector<ShmLinks::Lease>& leases) const;
  // Index of the plan partition `key` names, or FAILED_PRECONDITION.
  absl::StatusOr<size_t> Find(const PartitionKey& key) const;

  const std::vector<std::string> addresses_;
  const PlacementPlan plan_;
  const ClientOptions options_;
  std::vector<PsStubs> stubs_;
  absl::flat_hash_map<PartitionKey, size_t> index_;
  // Per ps task, its partitions in pieces (ClientOptions::pipeline); whether any has several.
  std::vector<std::vector<std::vector<size_t>>> pieces_;
  std::vector<std::vector<uint64_t>> piece_bytes_;  // float32 bytes of each of those pieces
  bool in_pieces_ = false;
  std::unique_ptr<ShmLinks> shm_;  // after stubs_: its destructor detaches through them
};

}  // namespace kubetrain::ps
