#include "worker/collective/coordinator.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/backoff.h"
#include "common/job_secret.h"
#include "common/logging.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "kubetrain/v1/coordinator.grpc.pb.h"
#include "ps/wire.h"
#include "worker/core/random.h"

namespace kubetrain::worker {
namespace {

constexpr absl::string_view kTrainingIsOver = "training is over";

grpc::Status WrongSession(const std::string& got, const std::string& want) {
  return grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat("rendezvous session ", got, " is over (the chief restarted; its ",
                   "session is now ", want, "): rendezvous again"));
}

// The client's long waits (Get, Reform) in slices of at most a second, so a stop request is
// noticed while peers are awaited: `attempt(context, timeout_ms)` makes one call, whose request
// asks the server to answer DEADLINE_EXCEEDED itself after timeout_ms; the context's deadline,
// `rpc_timeout` later, only guards against a chief that stopped answering. Returns the last
// call's status (OK, or an error that is not a slice running out, or DEADLINE_EXCEEDED once
// `timeout` is spent), or nullopt on a stop request.
std::optional<absl::Status> WaitInSlices(
    absl::Duration timeout, absl::Duration rpc_timeout, const std::atomic<bool>* stop,
    const std::function<absl::Status(grpc::ClientContext&, int64_t)>& attempt) {
  const absl::Time give_up = absl::Now() + timeout;
  while (true) {
    const absl::Duration wait = std::min(give_up - absl::Now(), absl::Seconds(1));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + wait + rpc_timeout));
    absl::Status s = attempt(context, std::max<int64_t>(absl::ToInt64Milliseconds(wait), 0));
    if (s.code() != absl::StatusCode::kDeadlineExceeded || absl::Now() >= give_up) return s;
    if (stop != nullptr && stop->load()) return std::nullopt;
  }
}

// One call waits at most this long, whatever its timeout_ms says: a clock plus 2^62 ms
// overflows, and the clients wait in slices of a second anyway (WaitInSlices).
constexpr int64_t kLongestWaitMs = 60'000;

int64_t BoundedWaitMs(int64_t asked) { return std::clamp<int64_t>(asked, 0, kLongestWaitMs); }

// "within N ms" for a DEADLINE_EXCEEDED answer: the time waited, and what was asked when the
// server waited less.
std::string WaitedFor(int64_t asked) {
  if (asked <= kLongestWaitMs) return absl::StrCat(BoundedWaitMs(asked), " ms");
  return absl::StrCat(kLongestWaitMs, " ms (timeout_ms asked for ", asked,
                      "; one call waits at most ", kLongestWaitMs,
                      " ms: ask again to wait longer)");
}

}  // namespace

// Keys live in one map guarded by a mutex; Get waits on a condition variable for its key, for
// the request's timeout, the RPC's deadline or the server's shutdown, whichever comes first.
class CoordinatorServer::Service final : public v1::Coordinator::Service {
 public:
  Service(std::string session, const CoordinatorServerOptions& options)
      : session_(std::move(session)),
        world_size_(options.world_size),
        max_store_bytes_(options.max_store_bytes),
        min_members_(std::max(1, options.min_members)),
        member_timeout_(absl::ToChronoMilliseconds(options.member_timeout)),
        verifier_(options.secret) {}

  void Shutdown() {
    std::lock_guard<std::mutex> lock(mu_);
    shutting_down_ = true;
    cv_.notify_all();
  }

  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                    v1::JoinResponse* response) override {
    if (grpc::Status auth = verifier_.Check(*context); !auth.ok()) return auth;
    if (request->elastic()) {
      if (request->rank() < 0 || request->rank() > kMaxMember) {
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("member ", request->rank(), " is outside [0, ", kMaxMember, "]"));
      }
      response->set_session(session_);
      return grpc::Status::OK;
    }
    if (request->world_size() != world_size_) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("rank ", request->rank(), " (", context->peer(), ") counts ",
                       request->world_size(), " workers but the chief counts ", world_size_,
                       ": every task must be started from the same cluster spec (TF_CONFIG)"));
    }
    if (request->rank() < 0 || request->rank() >= world_size_) {
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          absl::StrCat("rank ", request->rank(), " is outside [0, ", world_size_, ")"));
    }
    log::Debug("Rank joined the rendezvous",
               {{"rank", request->rank()}, {"peer", context->peer()}, {"session", session_}});
    response->set_session(session_);
    return grpc::Status::OK;
  }

  grpc::Status Set(grpc::ServerContext* context, const v1::SetRequest* request,
                   v1::SetResponse*) override {
    if (grpc::Status auth = verifier_.Check(*context); !auth.ok()) return auth;
    if (request->session() != session_) return WrongSession(request->session(), session_);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(request->key());
    const int64_t replaced =
        it == values_.end() ? 0 : static_cast<int64_t>(it->first.size() + it->second.size());
    const int64_t added = static_cast<int64_t>(request->key().size() + request->value().size());
    if (store_bytes_ - replaced + added > max_store_bytes_) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("the rendezvous store would hold ", store_bytes_ - replaced + added,
                       " bytes, more than its limit of ", max_store_bytes_, " (key \"",
                       request->key().substr(0, 64), "\")"));
    }
    store_bytes_ += added - replaced;
    values_[request->key()] = request->value();
    cv_.notify_all();
    return grpc::Status::OK;
  }

  // Members ask for the next generation; it forms once every live one has asked (and, for the
  // first, once world_size have). Waiters refresh their own liveness while they wait.
  grpc::Status Reform(grpc::ServerContext* context, const v1::ReformRequest* request,
                      v1::ReformResponse* response) override {
    if (grpc::Status auth = verifier_.Check(*context); !auth.ok()) return auth;
    if (request->session() != session_) return WrongSession(request->session(), session_);
    const int member = request->member();
    if (member < 0 || member > kMaxMember) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("member ", member, " is outside [0, ", kMaxMember, "]"));
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (request->finished()) {
      finished_ = true;
      cv_.notify_all();
    }
    if (finished_) {
      return grpc::Status(grpc::StatusCode::ABORTED, std::string(kTrainingIsOver));
    }
    if (request->leave()) {
      members_.erase(member);
      waiting_.erase(member);
      log::Info("Member left", {{"member", member}, {"members", members_.size()}});
      MaybeForm();
      cv_.notify_all();
      return grpc::Status::OK;
    }
    auto deadline = std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(BoundedWaitMs(request->timeout_ms()));
    const int64_t known = request->known_generation();
    // A generation newer than the member's that lists it (formed while it waited, or while it
    // was between two calls) is its answer; otherwise it waits for the next.
    auto formed_for_member = [&] {
      return generation_ > known && std::count(formed_.begin(), formed_.end(), member) > 0;
    };
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      if (!formed_for_member()) {
        if (!members_.count(member)) {
          log::Info("Member joined", {{"member", member}, {"members", members_.size() + 1}});
        }
        members_[member] = now;
        waiting_.insert(member);
        MaybeForm();
      }
      if (formed_for_member()) {
        response->set_generation(generation_);
        for (int m : formed_) response->add_members(m);
        return grpc::Status::OK;
      }
      if (shutting_down_) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
      }
      if (finished_) return grpc::Status(grpc::StatusCode::ABORTED, std::string(kTrainingIsOver));
      if (context->IsCancelled()) {
        waiting_.erase(member);
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      if (now >= deadline) {
        waiting_.erase(member);
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            absl::StrCat("the job's members did not all reform within ",
                                         WaitedFor(request->timeout_ms()), " (",
                                         waiting_.size() + 1, " of ", members_.size(), " asked)"));
      }
      cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(200)));
    }
  }

  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override {
    if (grpc::Status auth = verifier_.Check(*context); !auth.ok()) return auth;
    if (request->session() != session_) return WrongSession(request->session(), session_);
    std::lock_guard<std::mutex> lock(mu_);
    // Only members are refreshed: a late beat of one that left must not bring it back. One that
    // was dropped while alive (a long pause) is told to reform, which takes it in again.
    auto self = members_.find(request->member());
    if (self != members_.end()) self->second = std::chrono::steady_clock::now();
    MaybeForm();
    std::vector<int> live;
    for (const auto& [m, seen] : members_) live.push_back(m);
    response->set_generation(generation_);
    response->set_reform(live != formed_ || !waiting_.empty() ||
                         (self == members_.end() && !finished_));
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext* context, const v1::GetRequest* request,
                   v1::GetResponse* response) override {
    if (grpc::Status auth = verifier_.Check(*context); !auth.ok()) return auth;
    if (request->session() != session_) return WrongSession(request->session(), session_);
    auto deadline = std::chrono::system_clock::now() +
                    std::chrono::milliseconds(BoundedWaitMs(request->timeout_ms()));
    deadline = std::min(deadline, context->deadline());
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      auto it = values_.find(request->key());
      if (it != values_.end()) {
        response->set_value(it->second);
        return grpc::Status::OK;
      }
      if (shutting_down_) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down");
      }
      if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      auto now = std::chrono::system_clock::now();
      if (now >= deadline) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            absl::StrCat("no rank set \"", request->key(), "\" within ",
                                         WaitedFor(request->timeout_ms()),
                                         ": is every worker of the job running?"));
      }
      // Wake at least every 200 ms to notice a cancelled call.
      cv_.wait_until(lock, std::min(deadline, now + std::chrono::milliseconds(200)));
    }
  }

 private:
  // Drops members silent for member_timeout_, then forms the next generation when every live
  // member waits (and enough of them do).
  void MaybeForm() {
    const auto now = std::chrono::steady_clock::now();
    for (auto it = members_.begin(); it != members_.end();) {
      if (now - it->second > member_timeout_) {
        log::Warn("Member lost: silent past the timeout", {{"member", it->first}});
        waiting_.erase(it->first);
        it = members_.erase(it);
      } else {
        ++it;
      }
    }
    const int needed = generation_ == 0 ? world_size_ : min_members_;
    if (waiting_.empty() || static_cast<int>(waiting_.size()) < needed ||
        waiting_.size() != members_.size()) {
      return;
    }
    ++generation_;
    formed_.assign(waiting_.begin(), waiting_.end());
    waiting_.clear();
    log::Info("Formed a generation", {{"generation", generation_}, {"members", formed_.size()}});
    cv_.notify_all();
  }

  static constexpr int kMaxMember = 100000;
  const std::string session_;
  const int world_size_;
  const int64_t max_store_bytes_;
  const int min_members_;
  const std::chrono::milliseconds member_timeout_;
  const JobSecretVerifier verifier_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> values_;
  int64_t store_bytes_ = 0;  // keys and values in values_
  bool shutting_down_ = false;
  // Elastic membership: member → when last heard from; those waiting in Reform; the newest
  // generation and its members.
  std::map<int, std::chrono::steady_clock::time_point> members_;
  std::set<int> waiting_;
  int64_t generation_ = 0;
  std::vector<int> formed_;
  bool finished_ = false;  // the chief said training is over
};

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorServerOptions& options) {
  if (options.world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordinator: world size must be >= 1, got ", options.world_size));
  }
  std::unique_ptr<CoordinatorServer> server(new CoordinatorServer());
  server->session_ = RandomHexId();
  if (absl::Status s = ValidateJobSecret(options.secret); !s.ok()) return s;
  server->service_ = std::make_unique<Service>(server->session_, options);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "coordinator: cannot listen on ", options.address,
        " (the chief's cluster-spec address; is the port taken or the host not this machine?)"));
  }
  log::Info("Coordinator listening", {{"address", options.address},
                                      {"port", server->port_},
                                      {"session", server->session_},
                                      {"workers", options.world_size},
                                      {"job_secret", !options.secret.empty()}});
  if (options.secret.empty()) {
    log::Warn("Coordinator accepts calls from anyone: no job secret (set " +
              std::string(kJobSecretEnv) + ")");
  }
  return server;
}

CoordinatorServer::~CoordinatorServer() {
  if (service_) service_->Shutdown();
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

class CoordinatorClient::Stub {
 public:
  Stub(const std::string& address, const std::string& secret)
      : stub_(v1::Coordinator::NewStub(CreateJobChannel(address, ChannelArgs(), secret))) {}

  v1::Coordinator::Stub& get() { return *stub_; }

 private:
  static grpc::ChannelArguments ChannelArgs() {
    grpc::ChannelArguments args;
    // The chief may come up after the others; find it within about a second once it does.
    // (gRPC's minimum of 20 s would otherwise hold a failed connection attempt that long.)
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // A recreated chief keeps its name and gets a new IP: look it up again within a second, not
    // after gRPC's default 30 s between lookups.
    args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
    return args;
  }

  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const CoordinatorClientOptions& options) {
  std::unique_ptr<CoordinatorClient> client(new CoordinatorClient());
  client->options_ = options;
  Backoff backoff({.initial = absl::Milliseconds(200), .max = absl::Seconds(2)});
  const absl::Time give_up = absl::Now() + options.connect_timeout;
  while (true) {
    if (options.stop != nullptr && options.stop->load()) {
      return absl::CancelledError("stopped while waiting for the chief's coordinator");
    }
    // One channel: a chief pod being recreated keeps its name and gets a new IP, which gRPC finds
    // by looking the name up again (docs/decisions/0001).
    if (!client->stub_) client->stub_ = std::make_unique<Stub>(options.address, options.secret);
    grpc::ClientContext context;
    // Wait for the connection (up to a short deadline) instead of failing at once while the
    // channel backs off, so a rank joins as soon as the chief listens.
    context.set_wait_for_ready(true);
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + std::min(options.rpc_timeout, absl::Seconds(2))));
    v1::JoinRequest request;
    request.set_rank(options.rank);
    request.set_world_size(options.world_size);
    request.set_elastic(options.elastic);
    v1::JoinResponse response;
    absl::Status s = ps::FromGrpc(client->stub_->get().Join(&context, request, &response));
    if (s.ok()) {
      client->session_ = response.session();
      return client;
    }
    if (s.code() != absl::StatusCode::kUnavailable &&
        s.code() != absl::StatusCode::kDeadlineExceeded) {
      return s;
    }
    if (absl::Now() > give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("the chief's coordinator at ", options.address, " did not answer within ",
                       absl::FormatDuration(options.connect_timeout), ": ", s.message()));
    }
    absl::Duration wait = backoff.Next();
    log::Info("Waiting for the chief's coordinator",
              {{"address", options.address}, {"reason", s.message()}, {"retry_in", wait}});
    absl::SleepFor(wait);
  }
}

CoordinatorClient::~CoordinatorClient() = default;

absl::Status CoordinatorClient::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::SetRequest request;
  request.set_session(session_);
  request.set_key(key);
  request.set_value(value);
  v1::SetResponse response;
  RETURN_IF_ERROR(ps::FromGrpc(stub_->get().Set(&context, request, &response)),
                  "coordinator Set \"", key, "\"");
  return absl::OkStatus();
}

absl::StatusOr<std::string> CoordinatorClient::Get(const std::string& key, absl::Duration timeout) {
  std::string value;
  std::optional<absl::Status> waited = WaitInSlices(
      timeout, options_.rpc_timeout, options_.stop,
      [&](grpc::ClientContext& context, int64_t timeout_ms) {
        v1::GetRequest request;
        request.set_session(session_);
        request.set_key(key);
        request.set_timeout_ms(timeout_ms);
        v1::GetResponse response;
        absl::Status got = ps::FromGrpc(stub_->get().Get(&context, request, &response));
        if (got.ok()) value = std::move(*response.mutable_value());
        return got;
      });
  if (!waited) return absl::CancelledError(absl::StrCat("stopped while waiting for \"", key, "\""));
  absl::Status s = *std::move(waited);
  if (s.ok()) return value;
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    return absl::DeadlineExceededError(absl::StrCat("no rank set \"", key, "\" within ",
                                                    absl::FormatDuration(timeout),
                                                    ": is every worker of the job running?"));
  }
  return internal::WithContext(std::move(s), "coordinator Get \"", key, "\"");
}

absl::Status CoordinatorClient::Finish() {
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + std::min(options_.rpc_timeout, absl::Seconds(2))));
  v1::ReformRequest request;
  request.set_session(session_);
  request.set_member(options_.rank);
  request.set_finished(true);
  v1::ReformResponse response;
  absl::Status s = ps::FromGrpc(stub_->get().Reform(&context, request, &response));
  if (s.code() == absl::StatusCode::kAborted) return absl::OkStatus();  // "training is over"
  return internal::WithContext(std::move(s), "coordinator Finish");
}

absl::StatusOr<Generation> CoordinatorClient::Reform(bool leave, absl::Duration timeout) {
  Generation next;
  std::optional<absl::Status> waited = WaitInSlices(
      timeout, options_.rpc_timeout, options_.stop,
      [&](grpc::ClientContext& context, int64_t timeout_ms) {
        v1::ReformRequest request;
        request.set_session(session_);
        request.set_member(options_.rank);
        request.set_leave(leave);
        request.set_timeout_ms(timeout_ms);
        request.set_known_generation(generation_.load());
        v1::ReformResponse response;
        absl::Status got = ps::FromGrpc(stub_->get().Reform(&context, request, &response));
        if (got.ok()) {
          next = Generation{response.generation(),
                            std::vector<int>(response.members().begin(), response.members().end())};
        }
        return got;
      });
  if (!waited) return absl::CancelledError("stopped while waiting for the job's members to reform");
  RETURN_IF_ERROR(*std::move(waited), "coordinator Reform");
  if (!leave) generation_ = next.number;
  return next;
}

absl::StatusOr<bool> CoordinatorClient::Heartbeat() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  v1::HeartbeatRequest request;
  request.set_session(session_);
  request.set_member(options_.rank);
  v1::HeartbeatResponse response;
  RETURN_IF_ERROR(ps::FromGrpc(stub_->get().Heartbeat(&context, request, &response)),
                  "coordinator Heartbeat");
  return response.reform();
}

}  // namespace kubetrain::worker
