// Over 500 lines: one class (PsExchange) whose client, fill, watch and refill share its state.
// What the parameter-server exchanges share (PsExchange): the client, the host copies of
// parameters and gradients, push and pull, the chief's filling, watch and refill of the ps, and
// every task's waiting and recovery. Internal to worker/runtime/: exchange_ps.cc builds ps-sync
// and ps-async on it, exchange_ps_elastic.cc the elastic exchange (worker/runtime/exchange_ps.h).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/backoff.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/optimizer.h"
#include "ps/partition.h"
#include "worker/core/random.h"
#include "worker/runtime/chief_duties.h"
#include "worker/runtime/gradient_exchange.h"

namespace kubetrain::worker {

// Errors after which training waits for the ps to come back rather than giving up.
inline bool Recoverable(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
      return true;
    default:
      return false;
  }
}

// Calls `tick` every `every` on a thread of its own until Stop; Stop waits for a tick under
// way. The chief's ps watch and an elastic worker's heartbeat.
class Ticker {
 public:
  ~Ticker() { Stop(); }

  void Start(absl::Duration every, std::function<void()> tick) {
    thread_ = std::thread([this, every, tick = std::move(tick)] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        cv_.wait_for(lock, absl::ToChronoMilliseconds(every));
        if (stop_) break;
        lock.unlock();
        tick();
        lock.lock();
      }
    });
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// What ps-sync and ps-async share: the client, the host copies of parameters and gradients,
// the chief's filling, watch and refill, and every task's waiting and recovery. The two modes
// differ in the training config they give the ps, how a step pulls, and how a worker's position
// follows from the global step.
class PsExchange : public GradientExchange {
 public:
  explicit PsExchange(const ExchangeContext& context) : c_(context) {}
  ~PsExchange() override { monitor_.Stop(); }

  absl::Status Setup() override {
    std::vector<ps::VariableSpec> specs;
    // On a device whose buffers are host memory, gradients are pushed from the model's own
    // buffers and values pulled straight into them: two copies of the model a step fewer.
    in_place_ = c_.device.HostAddressable();
    if (!in_place_) {
      flat_values_.resize(c_.model.num_parameters());
      flat_grads_.resize(c_.model.num_parameters());
    }
    size_t offset = 0;
    for (Variable* v : c_.model.variables()) {
      specs.push_back({v->name, static_cast<uint64_t>(v->size())});
      if (in_place_) {
        value_spans_.emplace_back(v->value.data(), v->size());
        grad_spans_.emplace_back(v->grad.data(), v->size());
      } else {
        value_spans_.emplace_back(flat_values_.data() + offset, v->size());
        grad_spans_.emplace_back(flat_grads_.data() + offset, v->size());
      }
      offset += v->size();
    }
    ASSIGN_OR_RETURN(ps::PlacementPlan plan,
                     ps::PlacementPlan::Build(specs, static_cast<int>(c_.id.ps_addresses.size())));
    plan_ = std::make_unique<ps::PlacementPlan>(std::move(plan));
    return Connect();
  }

  absl::StatusOr<int64_t> Start(ChiefDuties* chief) override {
    chief_ = chief;
    if (chief_ != nullptr) {
      RETURN_IF_ERROR(PrepareChief());
    } else {
      RETURN_IF_ERROR(WaitForPs(/*evaluated=*/false));
    }
    const int64_t pos = Position();
    if (pos > 0) {
      log::Info("Continuing from the parameter servers' step",
                {{"global_step", version_.step()}, {"epoch", pos / c_.steps_per_epoch}});
    }
    return pos;
  }

  absl::Status LoadParameters() override {
    if (in_place_) return absl::OkStatus();  // pulled into the model itself
    return c_.model.WriteValues(absl::MakeConstSpan(flat_values_));
  }

  absl::StatusOr<Recovery> Recover(const absl::Status& failure, int64_t pos) override {
    if (c_.stop.load()) return absl::CancelledError("stopped by signal");
    if (!Recoverable(failure)) return failure;
    log::Warn("Lost the parameter servers; waiting for them", {{"cause", failure}});
    if (c_.metrics) c_.metrics->recoveries.Increment();
    if (chief_ != nullptr) {
      absl::Status refill = RefillEmptyPs();
      if (!refill.ok() && !Recoverable(refill)) return refill;
    }
    absl::Status back = WaitForPs(/*evaluated=*/false);
    if (IsTrainingOver(back)) return Recovery{.training_over = true, .pos = pos};
    RETURN_IF_ERROR(back);
    log::Info("Parameter servers are back", {{"global_step", version_.step()}});
    return Recovery{.training_over = false, .pos = PositionAfterRecovery(pos)};
  }

  absl::Status EndTraining() override { return absl::OkStatus(); }

  void ShutDown() override {
    monitor_.Stop();
    absl::Status s = Client()->Shutdown("training complete");
    if (!s.ok()) log::Warn("Could not shut every parameter server down", {{"error", s}});
  }

  absl::StatusOr<ps::ModelState> Export() override {
    ASSIGN_OR_RETURN(ps::ModelState state, Client()->Export(), "exporting the ps state");
    return state;
  }

  int64_t global_step() const override { return version_.step(); }
  std::optional<double> learning_rate() const override {
    return ps::LearningRateAt(Config().optimizer, version_.step());
  }

  absl::Status AwaitParameters(bool evaluated) override { return WaitForPs(evaluated); }

 protected:
  // The config the chief gives the ps.
  virtual ps::TrainingConfig Config() const = 0;
  virtual const char* mode_name() const = 0;
  // This worker's position in its own sequence of steps, from the global step it holds.
  virtual int64_t Position() const = 0;
  // Where a worker that was at `pos` goes on once the ps are back.
  virtual int64_t PositionAfterRecovery(int64_t pos) const = 0;

  int num_workers() const { return c_.id.num_workers; }
  bool chief() const { return chief_ != nullptr; }

  std::shared_ptr<ps::PsClient> Client() const {
    std::lock_guard<std::mutex> lock(client_mu_);
    return client_;
  }
  // A client of the same ps that ignores the stop flag, with `timeout` per call: for the
  // goodbyes a stopping worker still owes.
  absl::StatusOr<std::unique_ptr<ps::PsClient>> ClientIgnoringStop(absl::Duration timeout) const {
    ps::ClientOptions options;
    options.worker = static_cast<uint32_t>(c_.id.rank);
    options.secret = c_.options.job_secret;
    options.rpc_timeout = timeout;
    options.shared_memory = false;  // goodbyes and exports move no gradients
    return ps::PsClient::Create(c_.id.ps_addresses, *plan_, options);
  }
  // The config a restored checkpoint runs on, from the one it was saved with.
  virtual ps::TrainingConfig RestoredConfig(const ps::TrainingConfig&) { return Config(); }
  const ps::Version& version() const { return version_; }

  // This step's gradients, once the model's computation of them is done: the model's own buffers
  // (in place) or the host copies read from it.
  absl::StatusOr<std::vector<std::span<const float>>> GradientsToSend() {
    RETURN_IF_ERROR(in_place_ ? c_.device.Synchronize()
                              : c_.model.ReadGradients(absl::MakeSpan(flat_grads_)));
    for (size_t i = 0; i < grad_spans_.size(); ++i) {  // fp16 would make them inf
      if (int64_t at = ps::FirstOverflow(Wire(), grad_spans_[i]); at >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--gradient-compression=fp16: element ", at, " of ",
                         c_.model.variables()[i]->name, "'s gradient is ", grad_spans_[i][at],
                         ", beyond fp16's largest value 65504; use "
                         "--gradient-compression=bf16 or none, or lower the learning rate"));
      }
    }
    return std::vector<std::span<const float>>(grad_spans_.begin(), grad_spans_.end());
  }

  // Sends this step's gradients (the model's) at the version they were computed at.
  absl::StatusOr<ps::PushResult> PushGradients() {
    ASSIGN_OR_RETURN(std::vector<std::span<const float>> grads, GradientsToSend());
    absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(ps::PushResult pushed, Client()->Push(grads, version_));
    if (c_.metrics) {
      c_.metrics->push_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
      c_.metrics->sent_bytes.Increment(WireBytes());
      if (pushed.stale > 0) c_.metrics->stale_pushes.Increment();
    }
    return pushed;
  }

  // This step's gradients (the model's), at the version they were computed at, and then the
  // parameters: with `next` those of the step after that version, waiting for it (sync), else
  // whatever the ps hold once the push is applied (async). One PushAndPull call per ps; Push and
  // then Pull with a ps that predates that call (every ps of a job runs one image).
  absl::Status PushAndPull(bool next) {
    if (!push_and_pull_) {
      RETURN_IF_ERROR(PushGradients().status());
      return next ? PullNext() : PullFresh();
    }
    ASSIGN_OR_RETURN(std::vector<std::span<const float>> grads, GradientsToSend());
    const ps::Version want = version_.Next();
    absl::Time t0 = absl::Now();
    absl::StatusOr<ps::PushResult> r =
        Client()->PushAndPull(grads, version_, value_spans_, next ? &want : nullptr);
    if (absl::IsUnimplemented(r.status())) {
      log::Info("The parameter servers predate PushAndPull; pushing and pulling separately",
                {{"error", r.status()}});
      push_and_pull_ = false;
      return PushAndPull(next);
    }
    if (next && absl::IsDeadlineExceeded(r.status()) && !c_.stop.load()) {
      // The push was applied; the step waits for a slow worker.
      log::Info("Still waiting for the other workers to finish the step",
                {{"global_step", version_.step()}});
      return PullNext();
    }
    RETURN_IF_ERROR(r.status());
    version_ = std::move(r->version);
    if (c_.metrics) {
      c_.metrics->push_pull_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
      c_.metrics->sent_bytes.Increment(WireBytes());
      c_.metrics->received_bytes.Increment(WireBytes());
      c_.metrics->global_step.Set(version_.step());
      if (r->stale > 0) c_.metrics->stale_pushes.Increment();
    }
    return absl::OkStatus();
  }

  // Pulls whatever the ps hold now.
  absl::Status PullFresh() {
    absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(version_, Client()->Pull(value_spans_));
    ObservePull(t0);
    return absl::OkStatus();
  }

  // Sync mode: waits for the step every worker's push completes, re-asking on timeouts.
  absl::Status PullNext() {
    ps::Version want = version_.Next();
    while (true) {
      absl::Time t0 = absl::Now();
      absl::StatusOr<ps::Version> v = Client()->Pull(value_spans_, &want);
      if (v.ok()) {
        version_ = *v;
        ObservePull(t0);
        return absl::OkStatus();
      }
      if (v.status().code() != absl::StatusCode::kDeadlineExceeded || c_.stop.load())
        return v.status();
      log::Info("Still waiting for the other workers to finish the step",
                {{"global_step", version_.step()}});
    }
  }

  const ExchangeContext c_;

 private:
  // ---- the ps client --------------------------------------------------------------------------

  // Creates the ps client once. A recreated ps keeps its name and gets a new address, which
  // gRPC finds by looking the name up again (docs/decisions/0001).
  absl::Status Connect() {
    {
      std::lock_guard<std::mutex> lock(client_mu_);
      if (client_) return absl::OkStatus();
    }
    ps::ClientOptions client_options;
    client_options.worker = static_cast<uint32_t>(c_.id.rank);
    client_options.stop = &c_.stop;
    client_options.secret = c_.options.job_secret;
    client_options.shared_memory = c_.options.ps_shared_memory;
    client_options.compression = Wire();
    ASSIGN_OR_RETURN(std::unique_ptr<ps::PsClient> client,
                     ps::PsClient::Create(c_.id.ps_addresses, *plan_, client_options));
    std::lock_guard<std::mutex> lock(client_mu_);
    client_ = std::move(client);
    return absl::OkStatus();
  }

  void ObservePull(absl::Time t0) {
    if (!c_.metrics) return;
    c_.metrics->pull_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    c_.metrics->received_bytes.Increment(WireBytes());
    c_.metrics->global_step.Set(version_.step());
  }

  // --gradient-compression as this task's pushes and pulls apply it: an evaluator reads the
  // ps's float32 values, so that what it reports is what the checkpoints hold.
  ps::WireFloat Wire() const {
    return c_.id.role == Role::kEvaluator ? ps::WireFloat::kFloat32
                                          : c_.options.gradient_compression;
  }
  // The tensor bytes of one push or one pull.
  double WireBytes() const {
    return static_cast<double>(c_.model.num_parameters()) * ps::WireFloatBytes(Wire());
  }

  // ---- the chief: filling the ps --------------------------------------------------------------

  // The chief fills every ps: resumes a run they already hold, restores the latest checkpoint,
  // or initialises a new run from the seeded model. Then it watches them.
  absl::Status PrepareChief() {
    RETURN_IF_ERROR(Client()->WaitReady(c_.options.ready_timeout, /*require_initialized=*/false));
    ASSIGN_OR_RETURN(std::vector<ps::ShardInfo> infos, Client()->Status());
    bool all_initialized = true;
    for (const ps::ShardInfo& info : infos) all_initialized &= info.initialized;
    if (all_initialized) {
      log::Info("Resuming the run the parameter servers hold",
                {{"run_id", infos.front().run_id}, {"global_step", infos.front().global_step}});
    } else {
      RETURN_IF_ERROR(RestoreOrInitialize(infos));
    }
    monitor_.Start(c_.options.monitor_every, [this] {
      absl::Status s = RefillEmptyPs();
      if (!s.ok() && !Recoverable(s))
        log::Error("Cannot refill a parameter server", {{"error", s}});
    });
    return PullFresh();
  }

  absl::Status RestoreOrInitialize(const std::vector<ps::ShardInfo>& infos) {
    bool any_initialized = false;
    for (const ps::ShardInfo& info : infos) any_initialized |= info.initialized;
    if (any_initialized) return RefillEmptyPs();
    ASSIGN_OR_RETURN(std::optional<ps::ModelState> restored, chief_->LatestCheckpoint());
    if (restored) {
      // Flags may have changed between runs; the values stay.
      restored->config = RestoredConfig(restored->config);
      RETURN_IF_ERROR(Client()->Init(*restored), "restoring the checkpoint");
      log::Info("Restored the parameter servers from the latest checkpoint",
                {{"global_step", restored->global_step}, {"dir", c_.options.checkpoint_dir}});
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(ps::ModelState state, InitialState());
    RETURN_IF_ERROR(Client()->Init(state), "initialising the parameter servers");
    const ps::TrainingConfig& config = state.config;
    log::Info("Initialised the parameter servers",
              {{"run_id", state.run_id},
               {"model", c_.options.model},
               {"parameters", c_.model.num_parameters()},
               {"ps", c_.id.ps_addresses.size()},
               {"workers", num_workers()},
               {"mode", mode_name()},
               {"optimizer", c_.options.optimizer},
               {"learning_rate", config.optimizer.learning_rate},
               {"global_batch", examples_per_step()}});
    // A first checkpoint at step 0, so a ps lost before the first periodic one can be refilled.
    return chief_->SaveInitialCheckpoint(state);
  }

  absl::StatusOr<ps::ModelState> InitialState() {
    ps::ModelState state;
    state.config = Config();
    state.global_step = 0;
    state.run_id = RandomHexId();
    for (Variable* v : c_.model.variables()) {
      std::vector<float> values(v->size());
      c_.device.Download(v->value, values.data(), v->size());
      state.variables.push_back({v->name, std::move(values), {}});
    }
    RETURN_IF_ERROR(c_.device.Synchronize());
    return state;
  }

  // ---- the chief: its ps watch ----------------------------------------------------------------

  // Refills every ps that answers but holds nothing (it restarted) from the latest checkpoint.
  absl::Status RefillEmptyPs() {
    std::lock_guard<std::mutex> lock(refill_mu_);
    ASSIGN_OR_RETURN(std::vector<ps::ShardInfo> infos, Client()->Status());
    for (size_t i = 0; i < infos.size(); ++i) {
      if (infos[i].initialized || infos[i].shutting_down) continue;
      if (c_.options.checkpoint_dir.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("ps ", i, " (", infos[i].address,
                         ") came back empty and there is no checkpoint to refill it from; set "
                         "--checkpoint-dir"));
      }
      ASSIGN_OR_RETURN(std::optional<ps::ModelState> state, chief_->LatestCheckpoint());
      if (!state) {
        return absl::FailedPreconditionError(
            absl::StrCat("ps ", i, " (", infos[i].address, ") came back empty and ",
                         c_.options.checkpoint_dir, " holds no checkpoint"));
      }
      RETURN_IF_ERROR(Client()->InitShard(static_cast<int>(i), *state), "refilling ps ", i);
      log::Warn("Refilled a parameter server that came back empty",
                {{"ps", static_cast<int>(i)},
                 {"address", infos[i].address},
                 {"checkpoint_step", state->global_step}});
    }
    return absl::OkStatus();
  }

  // ---- every task: waiting for the ps ---------------------------------------------------------

  // Waits until every ps answers with initialised state, then pulls. IsTrainingOver when the ps
  // are shutting down, or (`evaluated`: an evaluator that has evaluated) have been unreachable
  // for --evaluator-patience.
  absl::Status WaitForPs(bool evaluated) {
    // Short waits: a restarted ps is usually back within seconds, and sync training stalls until
    // every worker notices. At the start the chief initialises the ps within a few tens of
    // milliseconds of the first look, and the first step waits for the last worker to see it.
    Backoff backoff({.initial = absl::Milliseconds(20), .max = absl::Seconds(2)});
    absl::Time deadline = absl::Now() + c_.options.ready_timeout;
    std::string last_reason;
    absl::Time unreachable_since = absl::InfiniteFuture();
    while (!c_.stop.load()) {
      absl::Status reconnected = Connect();
      if (!reconnected.ok()) return reconnected;
      absl::StatusOr<std::vector<ps::ShardInfo>> infos = Client()->Status();
      if (infos.ok()) {
        bool ready = true;
        for (const ps::ShardInfo& info : *infos) {
          if (info.shutting_down) return TrainingOverStatus();
          ready &= info.initialized;
        }
        if (ready && PullFresh().ok()) return absl::OkStatus();
        last_reason = ready ? "pull failed" : "a parameter server is not initialised yet";
        unreachable_since = absl::InfiniteFuture();
      } else {
        last_reason = std::string(infos.status().message());
        unreachable_since = std::min(unreachable_since, absl::Now());
        // An evaluator outlives training: once it has evaluated and the ps have been gone for a
        // while, the chief has shut them down and exited.
        if (evaluated && absl::Now() - unreachable_since > c_.options.evaluator_patience) {
          return TrainingOverStatus();
        }
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("parameter servers not ready after ",
                         absl::FormatDuration(c_.options.ready_timeout), ": ", last_reason));
      }
      absl::Duration wait = backoff.Next();
      if (backoff.attempts() == 1 || wait >= absl::Milliseconds(200)) {  // not every short look
        log::Info("Waiting for the parameter servers",
                  {{"reason", last_reason}, {"retry_in", wait}, {"attempt", backoff.attempts()}});
      }
      SleepUnlessStopped(wait, c_.stop);
    }
    return absl::CancelledError("stopped");
  }

  ChiefDuties* chief_ = nullptr;  // set by Start on the chief
  std::unique_ptr<ps::PlacementPlan> plan_;
  mutable std::mutex client_mu_;  // guards client_: the chief's monitor reads it
  std::shared_ptr<ps::PsClient> client_;
  bool push_and_pull_ = true;       // false once a ps answered PushAndPull UNIMPLEMENTED
  bool in_place_ = false;           // value_spans_ and grad_spans_ are the model's own buffers
  std::vector<float> flat_values_;  // else the host copies they point into
  std::vector<float> flat_grads_;
  std::vector<std::span<float>> value_spans_;
  std::vector<std::span<float>> grad_spans_;
  ps::Version version_;

  std::mutex refill_mu_;  // one refill at a time (training thread and monitor)
  Ticker monitor_;        // the chief's ps watch
};

// The elastic exchange, sync or async (exchange_ps_elastic.cc).
std::unique_ptr<GradientExchange> MakeElasticPsExchange(const ExchangeContext& context);

}  // namespace kubetrain::worker
