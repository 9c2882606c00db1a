// The kubetrain.v1.ParameterServer gRPC service over one ShardStore. PsServer, which runs it in a
// gRPC server, is in ps/server.h.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_secret.h"
#include "grpcpp/impl/service_type.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/server_callback.h"
#include "kubetrain/v1/ps.grpc.pb.h"
#include "ps/metrics.h"
#include "ps/pull_cache.h"
#include "ps/shared_memory.h"
#include "ps/store.h"
#include "ps/tensor_coding.h"

namespace kubetrain::ps {

struct ServiceOptions {
  // Upper bound on how long a Pull waits for its min_step, whatever the client's deadline, so a
  // vanished client cannot keep a parked pull for long.
  absl::Duration max_pull_wait = absl::Minutes(10);
  // A Pull whose answer would be larger is refused before anything is copied (gRPC could not
  // send it anyway). PsServer sets it to its message limit.
  uint64_t max_response_bytes = uint64_t{256} << 20;
  // Threads that answer pulls woken by a step, copying in parallel. Pulls waiting for a step hold
  // no thread at all.
  int wake_threads = 4;
  // The job's shared secret (common/job_secret.h): a call without it is UNAUTHENTICATED, so a
  // stranger that reaches the port can neither Init (replace every parameter) nor Shutdown the
  // ps. Empty accepts every caller.
  std::string secret;
  // Maps workers' shared-memory regions when they offer them (Attach, ps/shared_memory.h);
  // false answers every offer FAILED_PRECONDITION, so pushes and pulls stay on gRPC bytes.
  bool shared_memory = true;
  // Regions kept at once; a newer one evicts the least recently used.
  size_t max_shm_regions = 256;
};

// Translates RPCs to ShardStore calls and counts them. The store and metrics must outlive it.
// Thread-safe.
//
// Every method uses gRPC's callback API over raw byte buffers: the service parses requests
// itself, so malformed bytes are answered INVALID_ARGUMENT (counted and logged like any other
// refusal) rather than gRPC's bare INTERNAL. Push requests and Pull responses (PushAndPull takes
// the one and answers the other) are coded by ps/tensor_coding.h straight between gRPC's slices
// and the store, with protobuf's bytes on the wire; the other methods use protobuf. A pull
// waiting for its min_step is parked: it holds no thread until the step arrives, its deadline
// passes, the client cancels or the store closes.
class ParameterServerService final : public grpc::Service {
 public:
  ParameterServerService(ShardStore& store, PsMetrics* metrics, ServiceOptions options = {});
  // Answers any pull still parked (UNAVAILABLE) and joins the service's threads.
  ~ParameterServerService() override;

  // Closes the store (answering parked pulls) and marks shutdown as requested. Idempotent.
  void RequestShutdown(absl::string_view reason);
  bool shutdown_requested() const;
  // True once shutdown was requested, false if `timeout` passed first.
  bool WaitForShutdownRequest(absl::Duration timeout) const;

  // Pulls parked waiting for a step (tests and diagnostics).
  size_t parked_pulls() const;

 private:
  class ParkedPull;
  using Handler = absl::Status (ParameterServerService::*)(grpc::CallbackServerContext&,
                                                           const grpc::ByteBuffer&,
                                                           grpc::ByteBuffer&, size_t&);

  // Adds the nine methods in ps.proto's order.
  void RegisterMethods();
  void AddUnary(const char* path, absl::string_view name, Handler handler);
  // Registers a callback method taking and answering raw bytes.
  void AddRaw(const char* path,
              std::function<grpc::ServerUnaryReactor*(grpc::CallbackServerContext*,
                                                      const grpc::ByteBuffer*, grpc::ByteBuffer*)>
                  reactor);
  grpc::ServerUnaryReactor* Dispatch(absl::string_view method, Handler handler,
                                     grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request, grpc::ByteBuffer* response);

  absl::Status Init(grpc::CallbackServerContext& context, const grpc::ByteBuffer& request,
                    grpc::ByteBuffer& response, size_t& response_bytes);
  absl::Status Push(grpc::CallbackServerContext& context, const grpc::ByteBuffer& request,
                    grpc::ByteBuffer& response, size_t& response_bytes);
  absl::Status Export(grpc::CallbackServerContext& context, const grpc::ByteBuffer& request,
                      grpc::ByteBuffer& response, size_t& response_bytes);
  absl::Status Status(grpc::CallbackServerContext& context, const grpc::ByteBuffer& request,
                      grpc::ByteBuffer& response, size_t& response_bytes);
  absl::Status Shutdown(grpc::CallbackServerContext& context, const grpc::ByteBuffer& request,
                        grpc::ByteBuffer& response, size_t& response_bytes);
  absl::Status Join(grpc::CallbackServerContext& context, const grpc::ByteBuffer& request,
                    grpc::ByteBuffer& response, size_t& response_bytes);
  absl::Status Attach(grpc::CallbackServerContext& context, const grpc::ByteBuffer& request,
                      grpc::ByteBuffer& response, size_t& response_bytes);
  // Parses, checks and applies a push; `region` is the shared memory it names, if any.
  absl::StatusOr<PushOutcome> ApplyPush(const grpc::ByteBuffer& request, PushFrame& frame,
                                        std::shared_ptr<const ShmRegion>& region);
  // Pull and PushAndPull have their own reactor path, since they may park.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request, grpc::ByteBuffer* response);
  grpc::ServerUnaryReactor* PushAndPull(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response);

  // What a Pull, or the pull half of a PushAndPull, answers.
  struct PullTarget {
    const char* method;              // "Pull" or "PushAndPull", for metrics and logs
    std::vector<PartitionKey> keys;  // empty: every partition
    int64_t min_step = 0;
    std::shared_ptr<const ShmRegion> region;  // null: values travel in the answer
    bool push_stale = false;                  // PushAndPull: its push was dropped as stale
    WireFloat wire = WireFloat::kFloat32;     // how the answer's values are coded
  };
  // Pulls now (never waits); DEADLINE_EXCEEDED while the step is not there yet. With a region,
  // the values go into its slots and the answer carries none.
  absl::Status PullNow(const PullTarget& target, grpc::ByteBuffer& response,
                       size_t& response_bytes);
  // The reactor path of Pull and PushAndPull: authenticates, `prepare`s what to pull (parsing
  // the request; PushAndPull applies its push), then answers with PullNow or, when the step is
  // not there yet and the call's deadline allows, parks the call.
  grpc::ServerUnaryReactor* DispatchPull(const char* method, grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response,
                                         absl::FunctionRef<absl::StatusOr<PullTarget>()> prepare);
  // Answers a parked pull that was taken out of the wait lists; the reactor may be gone after.
  void AnswerParked(ParkedPull* pull);
  // Parks `pull`, or queues it for an answer at once when its step came meanwhile.
  void Park(ParkedPull* pull);
  // Takes `pull` out of the wait lists; false when someone else already took it.
  bool Unpark(ParkedPull* pull);
  // Listens to the store and starts the wake and deadline threads (construction).
  void StartPullThreads();
  // Stops those threads and answers any pull still parked (destruction).
  void StopPullThreads();
  // Moves parked pulls whose step arrived (or whose store closed) to the wake queue.
  void OnStoreChange();
  void WakeLoop();
  void DeadlineLoop();

  // Counts, logs (rate-limited) and converts the outcome of one call.
  grpc::Status Conclude(absl::string_view method, const absl::Status& status, size_t request_bytes,
                        size_t response_bytes);

  // UNAUTHENTICATED unless the call carries the job's secret.
  absl::Status Authenticate(const grpc::CallbackServerContext& context) const;

  ShardStore& store_;
  PsMetrics* const metrics_;
  const ServiceOptions options_;
  const JobSecretVerifier verifier_;
  ShmRegistry shm_;
  PullCache pull_cache_;  // the answers' encoded values, shared by one step's pulls
  int methods_added_ = 0;

  mutable absl::Mutex mu_;
  bool shutdown_requested_ ABSL_GUARDED_BY(mu_) = false;

  // Parked pulls, by min_step (woken in step order) and by deadline (expired by one thread).
  mutable absl::Mutex park_mu_;
  absl::CondVar wake_cv_;      // wake_queue_ filled, or stopping_
  absl::CondVar deadline_cv_;  // an earlier deadline, or stopping_
  std::multimap<int64_t, ParkedPull*> by_step_ ABSL_GUARDED_BY(park_mu_);
  std::multimap<absl::Time, ParkedPull*> by_deadline_ ABSL_GUARDED_BY(park_mu_);
  std::deque<ParkedPull*> wake_queue_ ABSL_GUARDED_BY(park_mu_);
  bool stopping_ ABSL_GUARDED_BY(park_mu_) = false;
  std::vector<std::thread> threads_;

  // Refusal log rate limit: a flood of bad requests must not fill the disk.
  absl::Mutex log_mu_;
  absl::Time log_window_start_ ABSL_GUARDED_BY(log_mu_) = absl::InfinitePast();
  int logged_in_window_ ABSL_GUARDED_BY(log_mu_) = 0;
  int64_t suppressed_ ABSL_GUARDED_BY(log_mu_) = 0;
};

}  // namespace kubetrain::ps
