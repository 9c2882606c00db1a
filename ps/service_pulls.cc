// ParameterServerService's pull path (see service.h): answering a Pull or PushAndPull now, or
// parking it without a thread until its step arrives, its deadline passes, the client cancels or
// the store closes, and the threads that wake and expire parked pulls.
#include <algorithm>
#include <exception>
#include <limits>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "ps/service.h"

namespace kubetrain::ps {

// A pull waiting for its step. Owned by gRPC from the handler's return until OnDone. Exactly one
// party answers it: whoever takes it out of the wait lists (a step, the deadline thread, a
// cancellation or shutdown), so it is never finished twice.
class ParameterServerService::ParkedPull final : public grpc::ServerUnaryReactor {
 public:
  enum class State { kNew, kParked, kQueued };

  ParkedPull(ParameterServerService* service, PullTarget target, absl::Time deadline,
             grpc::ByteBuffer* response, size_t request_bytes)
      : service(service),
        target(std::move(target)),
        deadline(deadline),
        response(response),
        request_bytes(request_bytes) {}

  void OnCancel() override {
    if (!service->Unpark(this)) return;  // already being answered
    Finish(service->Conclude(target.method, absl::CancelledError("client cancelled the pull"),
                             request_bytes, 0));
  }
  void OnDone() override { delete this; }

  ParameterServerService* const service;
  const PullTarget target;
  const absl::Time deadline;
  grpc::ByteBuffer* const response;
  const size_t request_bytes;
  // Guarded by the service's park_mu_.
  State state = State::kNew;
  std::multimap<int64_t, ParkedPull*>::iterator by_step;
  std::multimap<absl::Time, ParkedPull*>::iterator by_deadline;
};

void ParameterServerService::StartPullThreads() {
  store_.SetChangeListener([this] { OnStoreChange(); });
  for (int i = 0; i < std::max(1, options_.wake_threads); ++i) {
    threads_.emplace_back([this] { WakeLoop(); });
  }
  threads_.emplace_back([this] { DeadlineLoop(); });
}

void ParameterServerService::StopPullThreads() {
  store_.SetChangeListener(nullptr);
  {
    absl::MutexLock lock(&park_mu_);
    stopping_ = true;
    wake_cv_.SignalAll();
    deadline_cv_.SignalAll();
  }
  for (std::thread& t : threads_) t.join();
  // Normally empty: the server stopped first, which closed the store and answered every pull.
  std::vector<ParkedPull*> left;
  {
    absl::MutexLock lock(&park_mu_);
    for (auto& [step, pull] : by_step_) left.push_back(pull);
    left.insert(left.end(), wake_queue_.begin(), wake_queue_.end());
    by_step_.clear();
    by_deadline_.clear();
    wake_queue_.clear();
  }
  for (ParkedPull* pull : left) {
    pull->Finish(Conclude(pull->target.method, absl::UnavailableError("ps shutting down"),
                          pull->request_bytes, 0));
  }
}

absl::Status ParameterServerService::PullNow(const PullTarget& target, grpc::ByteBuffer& response,
                                             size_t& response_bytes) {
  const ShmRegion* region = target.region.get();
  PullFrame frame;
  absl::Status shared;
  uint64_t shared_bytes = 0;
  // Copies under the store's lock (pushes may follow): into a slice that every pull of these
  // values shares (PullCache), or into the client's region.
  auto visit = [&](const PartitionKey& key, uint64_t offset, std::span<const float> values,
                   uint64_t revision) {
    if (region == nullptr) {
      return frame.AddEncoded(key, offset, values.size(), target.wire,
                              pull_cache_.Get(key, revision, target.wire, values));
    }
    if (!shared.ok()) return;
    absl::StatusOr<std::span<float>> out = region->Values(key, values.size());
    if (!out.ok()) {
      shared = out.status();
      return;
    }
    std::copy(values.begin(), values.end(), out->begin());
    frame.AddShared(key, offset, values.size());
    shared_bytes += values.size_bytes();
  };
  // Values written into shared memory do not count against the message limit.
  const uint64_t limit =
      region == nullptr ? options_.max_response_bytes : std::numeric_limits<uint64_t>::max();
  ASSIGN_OR_RETURN(PullOutcome outcome,
                   store_.Pull(target.keys, target.min_step, absl::InfinitePast(), visit, limit));
  RETURN_IF_ERROR(shared);
  if (metrics_ != nullptr && shared_bytes > 0) metrics_->AddSharedMemoryBytes(shared_bytes);
  frame.Finish(outcome.global_step, std::move(outcome.run_id), outcome.gradients_applied,
               target.push_stale);
  response_bytes = frame.byte_size();
  response = frame.Encode();
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ParameterServerService::DispatchPull(
    const char* method, grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response, absl::FunctionRef<absl::StatusOr<PullTarget>()> prepare) {
  const size_t request_bytes = request->Length();
  size_t response_bytes = 0;
  absl::Status status;
  try {
    status = Authenticate(*context);
    absl::StatusOr<PullTarget> target = status.ok() ? prepare() : status;
    status = target.status();
    if (status.ok()) {
      status = PullNow(*target, *response, response_bytes);
      const absl::Time deadline =
          std::min(absl::FromChrono(context->deadline()), absl::Now() + options_.max_pull_wait);
      if (absl::IsDeadlineExceeded(status) && absl::Now() < deadline) {
        auto* parked = new ParkedPull(this, *std::move(target), deadline, response, request_bytes);
        Park(parked);  // another thread may answer it from here on
        return parked;
      }
    }
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError(
        absl::StrCat(method, ": out of memory handling a ", request_bytes, "-byte request"));
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat(method, ": ", e.what()));
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(Conclude(method, status, request_bytes, response_bytes));
  return reactor;
}

void ParameterServerService::Park(ParkedPull* pull) {
  absl::MutexLock lock(&park_mu_);
  // Checked under park_mu_, which OnStoreChange also takes after every change: a step that
  // arrives between the caller's attempt and here is seen either here or there.
  if (store_.PullReady(pull->target.keys, pull->target.min_step) || absl::Now() >= pull->deadline) {
    pull->state = ParkedPull::State::kQueued;
    wake_queue_.push_back(pull);
    wake_cv_.Signal();
    return;
  }
  pull->state = ParkedPull::State::kParked;
  pull->by_step = by_step_.emplace(pull->target.min_step, pull);
  pull->by_deadline = by_deadline_.emplace(pull->deadline, pull);
  if (pull->by_deadline == by_deadline_.begin()) deadline_cv_.Signal();
}

bool ParameterServerService::Unpark(ParkedPull* pull) {
  absl::MutexLock lock(&park_mu_);
  if (pull->state != ParkedPull::State::kParked) return false;
  by_step_.erase(pull->by_step);
  by_deadline_.erase(pull->by_deadline);
  pull->state = ParkedPull::State::kQueued;  // the caller answers it
  return true;
}

void ParameterServerService::OnStoreChange() {
  absl::MutexLock lock(&park_mu_);
  // Each partition has its own step (a sync round per partition), so a pull is ready when the
  // partitions it names are: every parked pull is checked, from the lowest step up. There are
  // at most a few per worker.
  bool woke = false;
  for (auto it = by_step_.begin(); it != by_step_.end();) {
    ParkedPull* pull = it->second;
    if (!store_.PullReady(pull->target.keys, it->first)) {
      ++it;
      continue;
    }
    it = by_step_.erase(it);
    by_deadline_.erase(pull->by_deadline);
    pull->state = ParkedPull::State::kQueued;
    wake_queue_.push_back(pull);
    woke = true;
  }
  if (woke) wake_cv_.SignalAll();
}

void ParameterServerService::WakeLoop() {
  while (true) {
    ParkedPull* pull;
    {
      absl::MutexLock lock(&park_mu_);
      while (wake_queue_.empty() && !stopping_) wake_cv_.Wait(&park_mu_);
      if (wake_queue_.empty()) return;
      pull = wake_queue_.front();
      wake_queue_.pop_front();
    }
    AnswerParked(pull);
  }
}

void ParameterServerService::DeadlineLoop() {
  absl::MutexLock lock(&park_mu_);
  while (!stopping_) {
    const absl::Time now = absl::Now();
    bool expired = false;
    while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
      ParkedPull* pull = by_deadline_.begin()->second;
      by_deadline_.erase(by_deadline_.begin());
      by_step_.erase(pull->by_step);
      pull->state = ParkedPull::State::kQueued;
      wake_queue_.push_back(pull);
      expired = true;
    }
    if (expired) wake_cv_.SignalAll();
    const absl::Time next =
        by_deadline_.empty() ? absl::InfiniteFuture() : by_deadline_.begin()->first;
    deadline_cv_.WaitWithDeadline(&park_mu_, next);
  }
}

void ParameterServerService::AnswerParked(ParkedPull* pull) {
  size_t response_bytes = 0;
  absl::Status status;
  try {
    status = PullNow(pull->target, *pull->response, response_bytes);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError(absl::StrCat(pull->target.method,
                                                       ": out of memory answering a pull of ",
                                                       pull->target.keys.size(), " partitions"));
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat(pull->target.method, ": ", e.what()));
  }
  if (absl::IsDeadlineExceeded(status) && absl::Now() < pull->deadline) {
    Park(pull);  // an Init moved the step back after the wake-up: wait on
    return;
  }
  // The reactor may be deleted as soon as Finish is called.
  pull->Finish(Conclude(pull->target.method, status, pull->request_bytes, response_bytes));
}

size_t ParameterServerService::parked_pulls() const {
  absl::MutexLock lock(&park_mu_);
  return by_step_.size();
}

}  // namespace kubetrain::ps
