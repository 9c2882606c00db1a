// ChiefDuties (checkpoints, evaluations, progress lines, the run's summary) and the summary's
// JSON line; see worker/runtime/chief_duties.h.
#include "worker/runtime/chief_duties.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/core/models.h"

namespace kubetrain::worker {

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

// A copy of the training model that evaluates, on a thread of its own, the values it was given
// at an epoch's end while the training goes on. One evaluation at a time: the next waits for it.
// Every evaluation of the chief goes through it, so only the copy's buffers grow to the
// evaluation's batch (for the CNN ~100 MB), as the training model's did before.
class ChiefDuties::BackgroundEvaluation {
 public:
  BackgroundEvaluation(std::unique_ptr<Model> copy, const Dataset& test, int batch)
      : copy_(std::move(copy)), test_(test), batch_(batch) {}
  ~BackgroundEvaluation() {
    cancel_.store(true);
    (void)Wait();
  }

  // Waits for the previous evaluation (returning its error), copies `model`'s values and
  // evaluates them in the background; `done` gets the result on that thread.
  absl::Status Start(Model& model, std::function<void(const EvalResult&)> done) {
    RETURN_IF_ERROR(Take(model));
    thread_ = std::thread([this, done = std::move(done)] {
      absl::StatusOr<EvalResult> result = copy_->Evaluate(test_, batch_, &cancel_);
      if (result.ok()) done(*result);
      status_ = result.status();  // read by Wait, after the join
    });
    return absl::OkStatus();
  }

  // The same on the calling thread.
  absl::StatusOr<EvalResult> EvaluateNow(Model& model) {
    RETURN_IF_ERROR(Take(model));
    return copy_->Evaluate(test_, batch_, &cancel_);
  }

  // Waits for the evaluation running, if any; its error.
  absl::Status Wait() {
    if (!thread_.joinable()) return absl::OkStatus();
    thread_.join();
    return std::exchange(status_, absl::OkStatus());
  }

 private:
  // Waits for the evaluation running, then copies `model`'s values.
  absl::Status Take(Model& model) {
    RETURN_IF_ERROR(Wait());
    const std::vector<Variable*>& from = model.variables();
    const std::vector<Variable*>& to = copy_->variables();
    if (from.size() != to.size()) return absl::InternalError("the evaluation's copy differs");
    for (size_t i = 0; i < from.size(); ++i) {
      if (from[i]->size() != to[i]->size()) {
        return absl::InternalError(
            absl::StrCat("the evaluation's copy of ", from[i]->name, " has another size"));
      }
      model.device().CopyDeviceToDevice(from[i]->value.data(), to[i]->value.data(),
                                        from[i]->value.bytes());
    }
    return model.device().Synchronize();
  }

  const std::unique_ptr<Model> copy_;
  const Dataset& test_;
  const int batch_;
  std::atomic<bool> cancel_{false};
  std::thread thread_;
  absl::Status status_;
};

TrainingSummary RunSummary(const TrainerOptions& options, int64_t steps, int examples_per_step,
                           absl::Time start) {
  TrainingSummary s;
  s.steps = steps;
  s.epochs = options.epochs;
  s.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  s.examples_per_second = s.wall_seconds > 0 ? steps * examples_per_step / s.wall_seconds : 0;
  return s;
}

ChiefDuties::ChiefDuties(const TrainerOptions& options, Model& model, GradientExchange& exchange,
                         int64_t steps_per_epoch, const Dataset* test, WorkerMetrics* metrics,
                         absl::Time start, SummaryLog* summaries)
    : options_(options),
      model_(model),
      exchange_(exchange),
      steps_per_epoch_(steps_per_epoch),
      test_(test),
      metrics_(metrics),
      start_(start),
      checkpointer_({options.checkpoint_dir, options.keep_checkpoints}),
      progress_(options.log_every, metrics),
      summaries_(summaries),
      retry_(CheckpointRetry::For(options.checkpoint_every)) {
  // The training chief's evaluations each epoch, in the ps modes, where the workers' waits for
  // the ps leave CPU time idle; all-reduce ranks keep their CPUs busy, and an evaluation beside
  // the chief's training slows the step every rank waits for. Only where the device's memory is
  // host memory: the CPU backend's kernels may run from two threads on disjoint buffers.
  if (steps_per_epoch_ > 0 && test_ != nullptr && options_.mode != Mode::kAllReduce &&
      model_.device().HostAddressable()) {
    absl::StatusOr<std::unique_ptr<Model>> copy =
        MakeModel(options_.model, model_.device(), options_.seed);
    if (copy.ok()) {
      background_ =
          std::make_unique<BackgroundEvaluation>(std::move(*copy), *test_, options_.eval_batch);
    } else {
      log::Warn("Evaluating each epoch on the training thread", {{"error", copy.status()}});
    }
  }
}

ChiefDuties::~ChiefDuties() { background_.reset(); }

// ---- checkpoints ----------------------------------------------------------------------------

CheckpointRetry CheckpointRetry::For(absl::Duration every) {
  CheckpointRetry r;
  r.first_retry = std::clamp(every, absl::Seconds(1), absl::Minutes(1));
  r.max_retry = std::max(r.first_retry, absl::Minutes(5));
  r.give_up_after = std::max(absl::Minutes(10), 3 * every);
  return r;
}

CheckpointExpectation ChiefDuties::Expected() const {
  CheckpointExpectation expected{options_.model, exchange_.last_global_step(), {}};
  for (Variable* v : model_.variables()) {
    expected.variables.push_back({v->name, static_cast<uint64_t>(v->size())});
  }
  return expected;
}

absl::StatusOr<std::optional<ps::ModelState>> ChiefDuties::LatestCheckpoint() const {
  if (options_.checkpoint_dir.empty()) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(read_at_start_mu_);
    if (read_at_start_) return std::exchange(read_at_start_, std::nullopt);
  }
  return checkpointer_.LoadLatest(Expected());
}

void ChiefDuties::ForgetReadAtStart() {
  std::lock_guard<std::mutex> lock(read_at_start_mu_);
  read_at_start_.reset();
}

absl::Status ChiefDuties::SaveInitialCheckpoint(const ps::ModelState& state) {
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  ForgetReadAtStart();
  ASSIGN_OR_RETURN(last_checkpoint_, checkpointer_.Save(state, options_.model));
  last_checkpoint_step_ = state.global_step;
  next_checkpoint_ = retry_.clock->Now() + options_.checkpoint_every;
  return absl::OkStatus();
}

absl::Status ChiefDuties::SaveCheckpoint() {
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(ps::ModelState state, exchange_.Export());
  return Save(state);
}

absl::Status ChiefDuties::Save(const ps::ModelState& state) {
  ForgetReadAtStart();
  ASSIGN_OR_RETURN(last_checkpoint_, checkpointer_.Save(state, options_.model));
  last_checkpoint_step_ = state.global_step;
  const absl::Time now = retry_.clock->Now();
  next_checkpoint_ = now + options_.checkpoint_every;
  log::Info("Saved checkpoint", {{"path", last_checkpoint_}, {"global_step", state.global_step}});
  if (failed_attempts_ > 0) {
    log::Info("Checkpoints written again", {{"path", last_checkpoint_},
                                            {"failed_attempts", failed_attempts_},
                                            {"failed_for", now - failing_since_}});
    failed_attempts_ = 0;
  }
  return absl::OkStatus();
}

absl::Status ChiefDuties::MaybeCheckpoint() {
  if (retry_.clock->Now() < next_checkpoint_) return absl::OkStatus();
  absl::Status s = SaveCheckpoint();
  return s.ok() ? s : CheckpointFailed(s);
}

absl::Status ChiefDuties::CheckpointFailed(const absl::Status& error) {
  const absl::Time now = retry_.clock->Now();
  if (failed_attempts_ == 0) {
    failing_since_ = now;
    failing_since_step_ = exchange_.global_step();
    retry_delay_ = retry_.first_retry;
    log::Warn(ever_failed_ ? "Checkpoint writes are failing again; training goes on"
                           : "Checkpoint failed; training goes on",
              {{"error", error},
               {"retry_in", retry_delay_},
               {"last_checkpoint", last_checkpoint_},
               {"stop_after", retry_.give_up_after}});
    ever_failed_ = true;
  } else {
    retry_delay_ = std::min(2 * retry_delay_, retry_.max_retry);
    log::Debug("Checkpoint failed again",
               {{"error", error}, {"attempts", failed_attempts_ + 1}, {"retry_in", retry_delay_}});
  }
  ++failed_attempts_;
  next_checkpoint_ = now + retry_delay_;
  if (failed_attempts_ < retry_.min_attempts || now - failing_since_ < retry_.give_up_after) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "checkpoints have failed for ", absl::FormatDuration(now - failing_since_), " (",
      failed_attempts_, " attempts since global step ", failing_since_step_, "): ", error.message(),
      ". Stopping rather than training on with nothing to resume from; ",
      last_checkpoint_.empty()
          ? std::string("no checkpoint was written")
          : absl::StrCat("the last checkpoint written is ", last_checkpoint_, " (global step ",
                         last_checkpoint_step_, "), where a restarted run resumes"),
      ". Free space in (or make writable) ", options_.checkpoint_dir,
      ", or set another "
      "--checkpoint-dir"));
}

// ---- training -------------------------------------------------------------------------------

void ChiefDuties::StartTraining() {
  progress_.Start(exchange_.global_step());
  // "Every --checkpoint-every" counts from here: a resumed run has just read (or a new one
  // written) the checkpoint it starts from, so none is due at its first step.
  next_checkpoint_ = retry_.clock->Now() + options_.checkpoint_every;
}

absl::Status ChiefDuties::AfterStep(int64_t pos, int64_t epoch_before, float loss) {
  const int64_t epoch = pos / steps_per_epoch_;
  const int64_t step = exchange_.global_step();
  const std::optional<double> rate =
      progress_.MaybeLog(step, epoch, loss, exchange_.examples_per_step());
  if (rate && summaries_ != nullptr) summaries_->Progress(step, loss, *rate);
  if (epoch > epoch_before && !exchange_.Done(pos)) RETURN_IF_ERROR(EvaluateEpoch(epoch));
  if (options_.checkpoint_dir.empty()) return absl::OkStatus();
  return MaybeCheckpoint();
}

absl::Status ChiefDuties::Evaluate(std::optional<int64_t> epoch) {
  if (test_ == nullptr) return absl::FailedPreconditionError("no test set loaded");
  RETURN_IF_ERROR(exchange_.LoadParameters());
  return EvaluateModel(exchange_.global_step(), epoch);
}

absl::Status ChiefDuties::EvaluateEpoch(int64_t epoch) {
  // All-reduce: the ranks evaluated the epoch's end together in the step's Exchange.
  if (const std::optional<EvalResult> together = exchange_.shared_evaluation()) {
    RETURN_IF_ERROR(AwaitEvaluation());
    Record(*together, exchange_.global_step(), epoch);
    return absl::OkStatus();
  }
  if (background_ == nullptr) return Evaluate(epoch);
  RETURN_IF_ERROR(exchange_.LoadParameters());
  const int64_t step = exchange_.global_step();
  return background_->Start(model_,
                            [this, step, epoch](const EvalResult& r) { Record(r, step, epoch); });
}

absl::Status ChiefDuties::AwaitEvaluation() {
  return background_ != nullptr ? background_->Wait() : absl::OkStatus();
}

absl::Status ChiefDuties::EvaluateModel(int64_t step, std::optional<int64_t> epoch) {
  // The epoch's evaluation still running is logged first, and its failure is this one's.
  RETURN_IF_ERROR(AwaitEvaluation());
  ASSIGN_OR_RETURN(EvalResult eval, background_ != nullptr
                                        ? background_->EvaluateNow(model_)
                                        : model_.Evaluate(*test_, options_.eval_batch));
  Record(eval, step, epoch);
  return absl::OkStatus();
}

void ChiefDuties::Record(const EvalResult& eval, int64_t step, std::optional<int64_t> epoch) {
  {
    std::lock_guard<std::mutex> lock(eval_mu_);
    last_eval_ = eval;
  }
  LogEvaluation(eval, step, epoch, metrics_);
  if (summaries_ != nullptr) summaries_->Evaluation(step, eval);
}

EvalResult ChiefDuties::last_eval() const {
  std::lock_guard<std::mutex> lock(eval_mu_);
  return last_eval_;
}

absl::Status ChiefDuties::EvaluateState(const ps::ModelState& state, const std::string& source,
                                        std::optional<int64_t> epoch) {
  if (test_ == nullptr) return absl::FailedPreconditionError("no test set loaded");
  // The model's values in its own order; the state's variables may come in any.
  std::vector<float> values;
  values.reserve(model_.num_parameters());
  for (Variable* v : model_.variables()) {
    for (const ps::VariableState& saved : state.variables) {
      if (saved.name == v->name)
        values.insert(values.end(), saved.values.begin(), saved.values.end());
    }
  }
  if (static_cast<int64_t>(values.size()) != model_.num_parameters()) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, " does not hold every variable of the ", options_.model, " model"));
  }
  RETURN_IF_ERROR(model_.WriteValues(values));
  return EvaluateModel(state.global_step, epoch);
}

absl::StatusOr<TrainingSummary> ChiefDuties::Finish() {
  // The ranks of an all-reduce job evaluated the final parameters together: the chief reports
  // that evaluation (the parameters are the checkpoint's: all-reduce has no other writer).
  const std::optional<EvalResult> together = exchange_.shared_evaluation();
  if (together) RETURN_IF_ERROR(AwaitEvaluation());  // any epoch's evaluation is logged first
  if (options_.checkpoint_dir.empty()) {
    if (together) {
      Record(*together, exchange_.global_step(), options_.epochs);
    } else {
      RETURN_IF_ERROR(Evaluate(options_.epochs));
    }
    exchange_.ShutDown();
    return Completed(Summary());
  }
  // One read of the final state, saved and then evaluated: in ps-async the other workers' last
  // pushes land between two reads of the ps, and a summary evaluated on its own read would
  // describe values (and a step) that no checkpoint holds.
  ASSIGN_OR_RETURN(ps::ModelState state, exchange_.Export(), "final checkpoint");
  if (absl::Status s = Save(state); !s.ok()) {
    return Annotate(
        s, last_checkpoint_.empty()
               ? "final checkpoint"
               : absl::StrCat("final checkpoint (the last one written is ", last_checkpoint_,
                              ", global step ", last_checkpoint_step_, ")"));
  }
  if (together) {
    Record(*together, state.global_step, options_.epochs);
  } else {
    RETURN_IF_ERROR(EvaluateState(state, last_checkpoint_, options_.epochs));
  }
  exchange_.ShutDown();
  return Completed(SummaryAt(state.global_step, exchange_.examples_per_step()));
}

absl::StatusOr<std::optional<TrainingSummary>> ChiefDuties::FinishFromFinalCheckpoint() {
  if (options_.checkpoint_dir.empty()) return std::nullopt;
  std::string path;
  ASSIGN_OR_RETURN(std::optional<ps::ModelState> state,
                   checkpointer_.LoadLatest(Expected(), &path));
  if (!state) return std::nullopt;
  if (!exchange_.RunIsOver(*state)) {
    // Training resumes from it: the restore (LatestCheckpoint) takes it from here.
    std::lock_guard<std::mutex> lock(read_at_start_mu_);
    read_at_start_ = std::move(state);
    return std::nullopt;
  }
  log::Info("The latest checkpoint ends the run; evaluating it instead of training",
            {{"path", path}, {"global_step", state->global_step}});
  RETURN_IF_ERROR(EvaluateState(*state, path, options_.epochs));
  last_checkpoint_ = path;
  last_checkpoint_step_ = state->global_step;
  exchange_.ShutDown();  // the ps, if they outlived the chief that trained, end with the job
  // No examples per second: this task trained nothing.
  return Completed(SummaryAt(state->global_step, 0));
}

TrainingSummary ChiefDuties::Completed(TrainingSummary summary) const {
  if (std::optional<uint64_t> checksum = exchange_.parameter_checksum()) {
    log::Info("Training complete", {{"steps", summary.steps},
                                    {"accuracy", summary.test_accuracy},
                                    {"parameter_checksum", absl::StrFormat("%016x", *checksum)},
                                    {"wall_seconds", summary.wall_seconds}});
  } else {
    log::Info("Training complete", {{"steps", summary.steps},
                                    {"accuracy", summary.test_accuracy},
                                    {"wall_seconds", summary.wall_seconds}});
  }
  return summary;
}

TrainingSummary ChiefDuties::Summary() const {
  return SummaryAt(exchange_.global_step(), exchange_.examples_per_step());
}

TrainingSummary ChiefDuties::SummaryAt(int64_t steps, int examples_per_step) const {
  TrainingSummary s = RunSummary(options_, steps, examples_per_step, start_);
  const EvalResult eval = last_eval();
  s.test_accuracy = eval.accuracy;
  s.test_loss = eval.loss;
  s.checkpoint = last_checkpoint_;
  return s;
}

}  // namespace kubetrain::worker
