#include "worker/trainer.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/backoff.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/client.h"
#include "ps/optimizer.h"
#include "worker/allreduce_trainer.h"
#include "worker/checkpoint.h"
#include "worker/data/batch_iterator.h"
#include "worker/data/shard.h"
#include "worker/models.h"
#include "worker/progress_log.h"
#include "worker/random.h"

namespace kubetrain::worker {
namespace {

absl::StatusOr<ps::OptimizerKind> ParseOptimizer(const std::string& name) {
  if (name == "sgd") return ps::OptimizerKind::kSgd;
  if (name == "momentum") return ps::OptimizerKind::kMomentum;
  if (name == "adam") return ps::OptimizerKind::kAdam;
  if (name == "adagrad") return ps::OptimizerKind::kAdagrad;
  return absl::InvalidArgumentError(absl::StrCat("--optimizer: unsupported value \"", name,
                                                 "\"; allowed: sgd, momentum, adam, adagrad"));
}

// Errors after which training waits for the ps to come back rather than giving up.
bool Recoverable(const absl::Status& s) {
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

// Returned by Recover when the ps are shutting down: the chief has ended training.
constexpr absl::string_view kTrainingOver = "the parameter servers are shutting down";

bool IsTrainingOver(const absl::Status& s) {
  return s.code() == absl::StatusCode::kCancelled && s.message() == kTrainingOver;
}

}  // namespace

nlohmann::ordered_json TrainingSummary::ToJson() const {
  nlohmann::ordered_json j;
  j["event"] = "training_complete";
  j["test_accuracy"] = test_accuracy;
  j["test_loss"] = test_loss;
  j["steps"] = steps;
  j["epochs"] = epochs;
  j["examples_per_sec"] = examples_per_second;
  j["wall_seconds"] = wall_seconds;
  if (!checkpoint.empty()) j["checkpoint"] = checkpoint;
  return j;
}

absl::Status ValidateOptions(const TrainerOptions& o) {
  if (o.model != "mlp" && o.model != "cnn") {
    return absl::InvalidArgumentError(
        absl::StrCat("--model: unsupported value \"", o.model, "\"; allowed: mlp, cnn"));
  }
  if (o.epochs < 1)
    return absl::InvalidArgumentError(absl::StrCat("--epochs: must be >= 1, got ", o.epochs));
  if (o.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch-size: must be >= 1, got ", o.batch_size));
  }
  if (!(o.lr > 0)) return absl::InvalidArgumentError(absl::StrCat("--lr: must be > 0, got ", o.lr));
  if (!(o.lr_floor >= 0 && o.lr_floor <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lr-floor: must be in [0, 1], got ", o.lr_floor));
  }
  if (o.warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup-steps: must be >= 0, got ", o.warmup_steps));
  }
  return ParseOptimizer(o.optimizer).status();
}

ps::OptimizerOptions OptimizerFor(const TrainerOptions& o, int global_batch,
                                  int64_t total_updates) {
  ps::OptimizerOptions opt;
  opt.kind = ParseOptimizer(o.optimizer).value_or(ps::OptimizerKind::kSgd);
  opt.learning_rate = o.lr_reference_batch > 0
                          ? ps::ScaledLearningRate(o.lr, global_batch, o.lr_reference_batch)
                          : o.lr;
  opt.warmup_steps = o.warmup_steps;
  if (o.lr_decay) {
    opt.decay_steps = total_updates;
    opt.min_lr_ratio = o.lr_floor;
  }
  opt.momentum = o.momentum;
  return opt;
}

class Trainer::Impl {
 public:
  Impl(TrainerOptions options, TaskIdentity id, Device& device, const Dataset* train,
       const Dataset* test, WorkerMetrics* metrics)
      : options_(std::move(options)),
        id_(std::move(id)),
        device_(device),
        train_(train),
        test_(test),
        metrics_(metrics),
        checkpointer_({options_.checkpoint_dir, options_.keep_checkpoints}) {}

  ~Impl() { StopMonitor(); }

  absl::StatusOr<TrainingSummary> Run(const std::atomic<bool>& stop) {
    start_ = absl::Now();
    stop_ = &stop;
    RETURN_IF_ERROR(Setup());
    if (id_.role == Role::kEvaluator) return EvaluatorLoop(stop);
    if (id_.role == Role::kChief) {
      RETURN_IF_ERROR(PrepareChief());
    } else {
      absl::Status s = WaitForPs(stop);
      if (IsTrainingOver(s)) return Summary();
      RETURN_IF_ERROR(s);
    }
    return TrainLoop(stop);
  }

 private:
  // ---- set-up -------------------------------------------------------------------------------

  absl::Status Setup() {
    RETURN_IF_ERROR(ValidateOptions(options_));
    ASSIGN_OR_RETURN(model_, MakeModel(options_.model, device_, options_.seed));
    std::vector<ps::VariableSpec> specs;
    size_t offset = 0;
    flat_values_.resize(model_->num_parameters());
    flat_grads_.resize(model_->num_parameters());
    for (Variable* v : model_->variables()) {
      specs.push_back({v->name, static_cast<uint64_t>(v->size())});
      value_spans_.emplace_back(flat_values_.data() + offset, v->size());
      grad_spans_.emplace_back(flat_grads_.data() + offset, v->size());
      offset += v->size();
    }
    ASSIGN_OR_RETURN(ps::PlacementPlan plan,
                     ps::PlacementPlan::Build(specs, static_cast<int>(id_.ps_addresses.size())));
    plan_ = std::make_unique<ps::PlacementPlan>(std::move(plan));
    RETURN_IF_ERROR(Reconnect());
    if (train_ != nullptr) {
      batches_ = std::make_unique<ShardBatches>(
          *train_, ShardSpec{options_.seed, id_.rank, id_.num_workers}, options_.batch_size);
      steps_per_epoch_ = batches_->steps_per_epoch();
      if (steps_per_epoch_ < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--batch-size: ", options_.batch_size, " is larger than this worker's shard of ",
            ShardSize(train_->size(), id_.num_workers), " examples"));
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<ps::PsClient> Client() const {
    std::lock_guard<std::mutex> lock(client_mu_);
    return client_;
  }

  // (Re)creates the ps client when the resolved addresses changed (or there is none yet).
  absl::Status Reconnect() {
    std::vector<std::string> resolved;
    for (const std::string& a : id_.ps_addresses)
      resolved.push_back(id_.resolve ? id_.resolve(a) : a);
    {
      std::lock_guard<std::mutex> lock(client_mu_);
      if (client_ && resolved == dialed_) return absl::OkStatus();
    }
    ps::ClientOptions client_options;
    client_options.worker = static_cast<uint32_t>(id_.rank);
    client_options.stop = stop_;
    client_options.secret = options_.job_secret;
    ASSIGN_OR_RETURN(std::unique_ptr<ps::PsClient> client,
                     ps::PsClient::Create(resolved, *plan_, client_options));
    std::lock_guard<std::mutex> lock(client_mu_);
    if (client_)
      log::Info("Parameter server addresses changed; reconnecting",
                {{"ps", absl::StrJoin(resolved, ",")}});
    client_ = std::move(client);
    dialed_ = std::move(resolved);
    return absl::OkStatus();
  }

  int GlobalBatch() const {
    return options_.batch_size * (options_.mode == Mode::kPsSync ? id_.num_workers : 1);
  }

  ps::TrainingConfig Config() const {
    ps::TrainingConfig config;
    config.mode = options_.mode == Mode::kPsSync ? ps::UpdateMode::kSync : ps::UpdateMode::kAsync;
    config.replicas_to_aggregate = options_.mode == Mode::kPsSync ? id_.num_workers : 1;
    // Every update of the run: one per global step in sync mode, one per push in async.
    config.optimizer =
        OptimizerFor(options_, GlobalBatch(),
                     TotalSteps() * (options_.mode == Mode::kPsSync ? 1 : id_.num_workers));
    return config;
  }

  absl::StatusOr<ps::ModelState> InitialState() {
    ps::ModelState state;
    state.config = Config();
    state.global_step = 0;
    state.run_id = RandomHexId();
    RETURN_IF_ERROR(model_->ReadValues(absl::MakeSpan(flat_values_)));
    for (size_t i = 0; i < value_spans_.size(); ++i) {
      state.variables.push_back({model_->variables()[i]->name,
                                 std::vector<float>(value_spans_[i].begin(), value_spans_[i].end()),
                                 {}});
    }
    return state;
  }

  // What a checkpoint must fit to be restored into this job.
  CheckpointExpectation Expectation() const {
    CheckpointExpectation e{options_.model, -1, {}};
    if (steps_per_epoch_ > 0) {
      // Async: a push or two of each worker may land after the last counted one.
      e.max_step =
          options_.mode == Mode::kPsSync ? TotalSteps() : (TotalSteps() + 1) * id_.num_workers;
    }
    for (Variable* v : model_->variables()) {
      e.variables.push_back({v->name, static_cast<uint64_t>(v->size())});
    }
    return e;
  }

  // The chief fills every ps: resumes a run they already hold, restores the latest checkpoint,
  // or initialises a new run from the seeded model.
  absl::Status PrepareChief() {
    RETURN_IF_ERROR(Client()->WaitReady(options_.ready_timeout, /*require_initialized=*/false));
    ASSIGN_OR_RETURN(std::vector<ps::ShardInfo> infos, Client()->Status());
    bool all_initialized = true;
    for (const ps::ShardInfo& info : infos) all_initialized &= info.initialized;
    if (all_initialized) {
      log::Info("Resuming the run the parameter servers hold",
                {{"run_id", infos.front().run_id}, {"global_step", infos.front().global_step}});
    } else {
      RETURN_IF_ERROR(RestoreOrInitialize(infos));
    }
    StartMonitor();
    return PullFresh();
  }

  absl::Status RestoreOrInitialize(const std::vector<ps::ShardInfo>& infos) {
    bool any_initialized = false;
    for (const ps::ShardInfo& info : infos) any_initialized |= info.initialized;
    if (any_initialized) return RefillEmptyPs();
    std::optional<ps::ModelState> restored;
    if (!options_.checkpoint_dir.empty()) {
      ASSIGN_OR_RETURN(restored, checkpointer_.LoadLatest(Expectation()));
    }
    if (restored) {
      restored->config = Config();  // flags may have changed between runs; the values stay
      RETURN_IF_ERROR(Client()->Init(*restored), "restoring the checkpoint");
      log::Info("Restored the parameter servers from the latest checkpoint",
                {{"global_step", restored->global_step}, {"dir", options_.checkpoint_dir}});
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(ps::ModelState state, InitialState());
    RETURN_IF_ERROR(Client()->Init(state), "initialising the parameter servers");
    const ps::TrainingConfig& c = state.config;
    log::Info("Initialised the parameter servers",
              {{"run_id", state.run_id},
               {"model", options_.model},
               {"parameters", model_->num_parameters()},
               {"ps", id_.ps_addresses.size()},
               {"workers", id_.num_workers},
               {"mode", options_.mode == Mode::kPsSync ? "sync" : "async"},
               {"optimizer", options_.optimizer},
               {"learning_rate", c.optimizer.learning_rate},
               {"global_batch", GlobalBatch()}});
    if (!options_.checkpoint_dir.empty()) {
      // A first checkpoint at step 0, so a ps lost before the first periodic one can be refilled.
      ASSIGN_OR_RETURN(last_checkpoint_, checkpointer_.Save(state, options_.model));
      last_checkpoint_time_ = absl::Now();
    }
    return absl::OkStatus();
  }

  // ---- the chief's ps watch ------------------------------------------------------------------

  // Refills every ps that answers but holds nothing (it restarted) from the latest checkpoint.
  absl::Status RefillEmptyPs() {
    std::lock_guard<std::mutex> lock(refill_mu_);
    ASSIGN_OR_RETURN(std::vector<ps::ShardInfo> infos, Client()->Status());
    for (size_t i = 0; i < infos.size(); ++i) {
      if (infos[i].initialized || infos[i].shutting_down) continue;
      if (options_.checkpoint_dir.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("ps ", i, " (", infos[i].address,
                         ") came back empty and there is no checkpoint to refill it from; set "
                         "--checkpoint-dir"));
      }
      ASSIGN_OR_RETURN(std::optional<ps::ModelState> state,
                       checkpointer_.LoadLatest(Expectation()));
      if (!state) {
        return absl::FailedPreconditionError(
            absl::StrCat("ps ", i, " (", infos[i].address, ") came back empty and ",
                         options_.checkpoint_dir, " holds no checkpoint"));
      }
      RETURN_IF_ERROR(Client()->InitShard(static_cast<int>(i), *state), "refilling ps ", i);
      log::Warn("Refilled a parameter server that came back empty",
                {{"ps", static_cast<int>(i)},
                 {"address", infos[i].address},
                 {"checkpoint_step", state->global_step}});
    }
    return absl::OkStatus();
  }

  void StartMonitor() {
    monitor_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(monitor_mu_);
      while (!monitor_stop_) {
        monitor_cv_.wait_for(lock, absl::ToChronoMilliseconds(options_.monitor_every));
        if (monitor_stop_) break;
        lock.unlock();
        absl::Status s = RefillEmptyPs();
        if (!s.ok() && !Recoverable(s))
          log::Error("Cannot refill a parameter server", {{"error", s}});
        lock.lock();
      }
    });
  }

  void StopMonitor() {
    {
      std::lock_guard<std::mutex> lock(monitor_mu_);
      monitor_stop_ = true;
    }
    monitor_cv_.notify_all();
    if (monitor_.joinable()) monitor_.join();
  }

  // ---- waiting and recovery ------------------------------------------------------------------

  // Waits until every ps answers with initialised state, then pulls. CANCELLED(kTrainingOver)
  // when the ps are shutting down.
  absl::Status WaitForPs(const std::atomic<bool>& stop) {
    // Short waits: a restarted ps is usually back within seconds, and sync training stalls until
    // every worker notices.
    Backoff backoff({.initial = absl::Milliseconds(200), .max = absl::Seconds(2)});
    absl::Time deadline = absl::Now() + options_.ready_timeout;
    std::string last_reason;
    absl::Time unreachable_since = absl::InfiniteFuture();
    while (!stop.load()) {
      absl::Status reconnected = Reconnect();
      if (!reconnected.ok()) return reconnected;
      absl::StatusOr<std::vector<ps::ShardInfo>> infos = Client()->Status();
      if (infos.ok()) {
        bool ready = true;
        for (const ps::ShardInfo& info : *infos) {
          if (info.shutting_down) return absl::CancelledError(kTrainingOver);
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
        if (id_.role == Role::kEvaluator && last_eval_.examples > 0 &&
            absl::Now() - unreachable_since > options_.evaluator_patience) {
          return absl::CancelledError(kTrainingOver);
        }
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("parameter servers not ready after ",
                         absl::FormatDuration(options_.ready_timeout), ": ", last_reason));
      }
      absl::Duration wait = backoff.Next();
      log::Info("Waiting for the parameter servers",
                {{"reason", last_reason}, {"retry_in", wait}, {"attempt", backoff.attempts()}});
      SleepUnlessStopped(wait, stop);
    }
    return absl::CancelledError("stopped");
  }

  // Sleeps for `d`, waking early (within 50 ms) when `stop` is set.
  static void SleepUnlessStopped(absl::Duration d, const std::atomic<bool>& stop) {
    const absl::Time wake = absl::Now() + d;
    for (absl::Time now = absl::Now(); now < wake && !stop.load(); now = absl::Now()) {
      absl::SleepFor(std::min(wake - now, absl::Milliseconds(50)));
    }
  }

  absl::Status Recover(const absl::Status& cause, const std::atomic<bool>& stop) {
    log::Warn("Lost the parameter servers; waiting for them", {{"cause", cause}});
    if (metrics_) metrics_->recoveries.Increment();
    if (id_.role == Role::kChief) {
      absl::Status refill = RefillEmptyPs();
      if (!refill.ok() && !Recoverable(refill)) return refill;
    }
    RETURN_IF_ERROR(WaitForPs(stop));
    log::Info("Parameter servers are back", {{"global_step", version_.step()}});
    return absl::OkStatus();
  }

  absl::Status PullFresh() {
    absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(version_, Client()->Pull(value_spans_));
    ObservePull(t0);
    return absl::OkStatus();
  }

  // Sync mode: waits for the step every worker's push completes, re-asking on timeouts.
  absl::Status PullNext(const std::atomic<bool>& stop) {
    ps::Version want = version_.Next();
    while (true) {
      absl::Time t0 = absl::Now();
      absl::StatusOr<ps::Version> v = Client()->Pull(value_spans_, &want);
      if (v.ok()) {
        version_ = *v;
        ObservePull(t0);
        return absl::OkStatus();
      }
      if (v.status().code() != absl::StatusCode::kDeadlineExceeded || stop.load())
        return v.status();
      log::Info("Still waiting for the other workers to finish the step",
                {{"global_step", version_.step()}});
    }
  }

  void ObservePull(absl::Time t0) {
    if (!metrics_) return;
    metrics_->pull_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    metrics_->received_bytes.Increment(flat_values_.size() * sizeof(float));
    metrics_->global_step.Set(version_.step());
  }

  // ---- training ------------------------------------------------------------------------------

  int64_t TotalSteps() const { return int64_t{options_.epochs} * steps_per_epoch_; }

  // Sync: every worker makes TotalSteps() steps together. Async: the job is done once the ps
  // have applied num_workers × TotalSteps() pushes, however they were shared out.
  bool Done(int64_t pos) const {
    if (options_.mode == Mode::kPsSync) return pos >= TotalSteps();
    return version_.step() >= TotalSteps() * id_.num_workers;
  }

  // This worker's position in its own sequence of steps. Sync: the global step, shared by all.
  // Async: every push bumps the step, so a worker's share is global_step / num_workers.
  int64_t PositionFromVersion() const {
    int64_t g = version_.step();
    return options_.mode == Mode::kPsSync ? g : g / id_.num_workers;
  }

  absl::StatusOr<float> ComputeStep(const Batch& batch) {
    RETURN_IF_ERROR(model_->WriteValues(absl::MakeConstSpan(flat_values_)));
    ASSIGN_OR_RETURN(float loss, model_->ComputeGradients(batch.image_span(), batch.label_span()));
    RETURN_IF_ERROR(model_->ReadGradients(absl::MakeSpan(flat_grads_)));
    return loss;
  }

  absl::Status Push() {
    std::vector<std::span<const float>> grads(grad_spans_.begin(), grad_spans_.end());
    absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(ps::PushResult pushed, Client()->Push(grads, version_));
    if (metrics_) {
      metrics_->push_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
      metrics_->sent_bytes.Increment(flat_grads_.size() * sizeof(float));
      if (pushed.stale > 0) metrics_->stale_pushes.Increment();
    }
    if (options_.mode == Mode::kPsAsync) version_ = pushed.version;
    return absl::OkStatus();
  }

  // One step at position `pos`: compute, push, pull. Returns the position of the next step.
  absl::StatusOr<int64_t> Step(int64_t pos, const std::atomic<bool>& stop) {
    absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(const Batch* batch, batches_->At(pos));
    ASSIGN_OR_RETURN(float loss, ComputeStep(*batch));
    RETURN_IF_ERROR(Push());
    // After its last push a worker is done; the chief pulls once more so its final evaluation
    // and checkpoint see every update (sync: it waits for the step to complete).
    bool last = options_.mode == Mode::kPsSync ? pos + 1 >= TotalSteps() : Done(pos + 1);
    if (!last || id_.role == Role::kChief) {
      RETURN_IF_ERROR(options_.mode == Mode::kPsSync ? PullNext(stop) : PullFresh());
    }
    last_loss_ = loss;
    ++local_steps_;
    if (metrics_) {
      metrics_->steps.Increment();
      metrics_->examples.Increment(batch->size);
      metrics_->loss.Set(loss);
      metrics_->step_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    }
    return options_.mode == Mode::kPsSync && !last ? PositionFromVersion() : pos + 1;
  }

  absl::StatusOr<TrainingSummary> TrainLoop(const std::atomic<bool>& stop) {
    int64_t pos = PositionFromVersion();
    if (pos > 0) {
      log::Info("Continuing from the parameter servers' step",
                {{"global_step", version_.step()}, {"epoch", pos / steps_per_epoch_}});
    }
    progress_.Start(version_.step());
    while (!Done(pos)) {
      if (stop.load()) return absl::CancelledError("stopped by signal");
      int64_t epoch_before = pos / steps_per_epoch_;
      absl::StatusOr<int64_t> next = Step(pos, stop);
      if (!next.ok() && stop.load()) return absl::CancelledError("stopped by signal");
      if (!next.ok()) {
        if (!Recoverable(next.status())) return next.status();
        absl::Status recovered = Recover(next.status(), stop);
        if (IsTrainingOver(recovered)) break;
        RETURN_IF_ERROR(recovered);
        if (options_.mode == Mode::kPsSync) pos = PositionFromVersion();
        continue;
      }
      pos = *next;
      if (metrics_) metrics_->epoch.Set(static_cast<double>(pos / steps_per_epoch_));
      if (id_.role != Role::kChief) continue;
      progress_.MaybeLog(version_.step(), pos / steps_per_epoch_, last_loss_,
                         options_.mode == Mode::kPsSync ? GlobalBatch() : options_.batch_size);
      if (pos / steps_per_epoch_ > epoch_before && !Done(pos)) {
        RETURN_IF_ERROR(LogEvaluation(pos));
      }
      if (absl::Now() - last_checkpoint_time_ >= options_.checkpoint_every) {
        absl::Status s = SaveCheckpoint();
        if (!s.ok()) log::Warn("Checkpoint failed; training goes on", {{"error", s}});
      }
    }
    if (id_.role == Role::kChief) return FinishAsChief();
    log::Info("Training finished", {{"steps", local_steps_}, {"global_step", version_.step()}});
    return Summary();
  }

  absl::StatusOr<EvalResult> Evaluate() {
    if (test_ == nullptr) return absl::FailedPreconditionError("no test set loaded");
    RETURN_IF_ERROR(model_->WriteValues(absl::MakeConstSpan(flat_values_)));
    return model_->Evaluate(*test_, options_.eval_batch);
  }

  absl::Status LogEvaluation(int64_t pos) {
    ASSIGN_OR_RETURN(EvalResult eval, Evaluate());
    // An evaluator has no training shard to count epochs by.
    worker::LogEvaluation(
        eval, version_.step(),
        steps_per_epoch_ == 0 ? std::nullopt : std::optional<int64_t>(pos / steps_per_epoch_),
        metrics_);
    last_eval_ = eval;
    return absl::OkStatus();
  }

  absl::Status SaveCheckpoint() {
    if (options_.checkpoint_dir.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(ps::ModelState state, Client()->Export(), "exporting the ps state");
    ASSIGN_OR_RETURN(last_checkpoint_, checkpointer_.Save(state, options_.model));
    last_checkpoint_time_ = absl::Now();
    log::Info("Saved checkpoint", {{"path", last_checkpoint_}, {"global_step", state.global_step}});
    return absl::OkStatus();
  }

  absl::StatusOr<TrainingSummary> FinishAsChief() {
    RETURN_IF_ERROR(LogEvaluation(TotalSteps()));
    RETURN_IF_ERROR(SaveCheckpoint(), "final checkpoint");
    StopMonitor();
    absl::Status s = Client()->Shutdown("training complete");
    if (!s.ok()) log::Warn("Could not shut every parameter server down", {{"error", s}});
    TrainingSummary summary = Summary();
    log::Info("Training complete", {{"steps", summary.steps},
                                    {"accuracy", summary.test_accuracy},
                                    {"wall_seconds", summary.wall_seconds}});
    return summary;
  }

  TrainingSummary Summary() const {
    TrainingSummary s;
    s.steps = version_.step();
    s.epochs = options_.epochs;
    s.test_accuracy = last_eval_.accuracy;
    s.test_loss = last_eval_.loss;
    s.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    int64_t examples =
        s.steps * (options_.mode == Mode::kPsSync ? GlobalBatch() : options_.batch_size);
    s.examples_per_second = s.wall_seconds > 0 ? examples / s.wall_seconds : 0;
    s.checkpoint = last_checkpoint_;
    return s;
  }

  // ---- evaluator -----------------------------------------------------------------------------

  absl::StatusOr<TrainingSummary> EvaluatorLoop(const std::atomic<bool>& stop) {
    while (!stop.load()) {
      absl::Status ready = WaitForPs(stop);
      if (IsTrainingOver(ready)) break;
      RETURN_IF_ERROR(ready);
      RETURN_IF_ERROR(LogEvaluation(version_.step()));
      absl::Time next = absl::Now() + options_.eval_every;
      SleepUnlessStopped(next - absl::Now(), stop);
    }
    log::Info("Training is over; evaluator exiting", {{"accuracy", last_eval_.accuracy}});
    return Summary();
  }

  const TrainerOptions options_;
  const TaskIdentity id_;
  const std::atomic<bool>* stop_ = nullptr;  // Run's; in-flight ps calls give up once it is set
  Device& device_;
  const Dataset* train_;
  const Dataset* test_;
  WorkerMetrics* metrics_;
  Checkpointer checkpointer_;

  std::unique_ptr<Model> model_;
  std::unique_ptr<ps::PlacementPlan> plan_;
  mutable std::mutex client_mu_;  // guards client_ and dialed_: the chief's monitor reads them
  std::shared_ptr<ps::PsClient> client_;
  std::vector<std::string> dialed_;  // the resolved addresses client_ dials
  std::vector<float> flat_values_;
  std::vector<float> flat_grads_;
  std::vector<std::span<float>> value_spans_;
  std::vector<std::span<float>> grad_spans_;
  ps::Version version_;
  int64_t steps_per_epoch_ = 0;

  std::unique_ptr<ShardBatches> batches_;

  absl::Time start_;
  ProgressLog progress_{options_.log_every, metrics_};
  float last_loss_ = 0;
  int64_t local_steps_ = 0;
  EvalResult last_eval_;
  std::string last_checkpoint_;
  absl::Time last_checkpoint_time_ = absl::InfinitePast();

  std::mutex refill_mu_;  // one refill at a time (training thread and monitor)
  std::mutex monitor_mu_;
  std::condition_variable monitor_cv_;
  bool monitor_stop_ = false;
  std::thread monitor_;
};

Trainer::Trainer(TrainerOptions options, TaskIdentity identity, Device& device,
                 const Dataset* train, const Dataset* test, WorkerMetrics* metrics) {
  if (options.mode == Mode::kAllReduce) {
    allreduce_ = std::make_unique<AllReduceTrainer>(std::move(options), std::move(identity), device,
                                                    train, test, metrics);
  } else {
    impl_ = std::make_unique<Impl>(std::move(options), std::move(identity), device, train, test,
                                   metrics);
  }
}

Trainer::~Trainer() = default;

absl::StatusOr<TrainingSummary> Trainer::Run(const std::atomic<bool>& stop) {
  return allreduce_ ? allreduce_->Run(stop) : impl_->Run(stop);
}

}  // namespace kubetrain::worker
