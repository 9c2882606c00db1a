// Trainer: the one training loop, the same in every mode, over a GradientExchange strategy
// (worker/runtime/gradient_exchange.h) with ChiefDuties (worker/runtime/chief_duties.h) on the
// chief; the evaluator's loop; option checks and the optimizer a run uses.
#include "worker/runtime/trainer.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/optimizer.h"
#include "worker/core/data/batch_iterator.h"
#include "worker/core/data/shard.h"
#include "worker/core/models.h"
#include "worker/runtime/chief_duties.h"
#include "worker/runtime/exchange_allreduce.h"
#include "worker/runtime/exchange_ps.h"
#include "worker/runtime/gradient_exchange.h"

namespace kubetrain::worker {
namespace {

absl::StatusOr<ps::OptimizerKind> ParseOptimizer(const std::string& name) {
  if (std::optional<ps::OptimizerKind> kind = ps::OptimizerNamed(name)) return *kind;
  return absl::InvalidArgumentError(absl::StrCat("--optimizer: unsupported value \"", name,
                                                 "\"; allowed: ", ps::OptimizerNames()));
}

// Returned by a strategy when the ps are shutting down: the chief has ended training.
constexpr absl::string_view kTrainingOver = "the parameter servers are shutting down";

}  // namespace

void SleepUnlessStopped(absl::Duration d, const std::atomic<bool>& stop) {
  const absl::Time wake = absl::Now() + d;
  for (absl::Time now = absl::Now(); now < wake && !stop.load(); now = absl::Now()) {
    absl::SleepFor(std::min(wake - now, absl::Milliseconds(50)));
  }
}

absl::Status TrainingOverStatus() { return absl::CancelledError(kTrainingOver); }

bool IsTrainingOver(const absl::Status& s) {
  return s.code() == absl::StatusCode::kCancelled && s.message() == kTrainingOver;
}

std::unique_ptr<GradientExchange> MakeGradientExchange(const ExchangeContext& context) {
  switch (context.options.mode) {
    case Mode::kPsSync:
      return MakePsSyncExchange(context);
    case Mode::kPsAsync:
      return MakePsAsyncExchange(context);
    case Mode::kAllReduce:
      return MakeAllReduceExchange(context);
  }
  return nullptr;
}

absl::Status ValidateOptions(const TrainerOptions& o) {
  RETURN_IF_ERROR(CheckModelName(o.model));
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
  if (o.backup_workers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--backup-workers: must be >= 0, got ", o.backup_workers));
  }
  if (o.backup_workers > 0 && o.mode != Mode::kPsSync) {
    return absl::InvalidArgumentError(
        "--backup-workers: only --mode=ps-sync aggregates a quota of gradients per step");
  }
  if (o.inject_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--inject-delay: must be >= 0s");
  }
  if (o.min_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--elastic-min-workers: must be >= 1, got ", o.min_workers));
  }
  if (o.elastic && o.mode == Mode::kPsSync && o.backup_workers >= o.min_workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--backup-workers=", o.backup_workers, ": an elastic job may shrink to ", o.min_workers,
        " training workers (--elastic-min-workers), and each step needs at least one gradient"));
  }
  if (o.elastic &&
      (o.heartbeat_every <= absl::ZeroDuration() || o.member_timeout < 2 * o.heartbeat_every)) {
    return absl::InvalidArgumentError(absl::StrCat("--member-timeout: must be at least ",
                                                   absl::FormatDuration(2 * o.heartbeat_every),
                                                   " (twice the heartbeat interval)"));
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
        metrics_(metrics) {}

  ~Impl() {
    // The strategy's threads (the ps chief's watch) read the duties and the model: stop them
    // first.
    exchange_.reset();
  }

  absl::StatusOr<std::optional<TrainingSummary>> FinishedRun(const std::atomic<bool>& stop) {
    RETURN_IF_ERROR(Setup(stop));
    if (id_.role != Role::kChief) return std::nullopt;
    return duties_->FinishFromFinalCheckpoint();
  }

  void UseCollective(Communicator* communicator, ElasticGroup* group) {
    id_.communicator = communicator;
    id_.group = group;
  }

  absl::StatusOr<TrainingSummary> Run(const std::atomic<bool>& stop) {
    RETURN_IF_ERROR(Setup(stop));
    if (id_.role == Role::kEvaluator) return EvaluatorLoop(stop);
    absl::StatusOr<int64_t> first = exchange_->Start(duties_.get());
    if (IsTrainingOver(first.status())) return Summary();
    RETURN_IF_ERROR(first.status());
    return TrainLoop(*first, stop);
  }

 private:
  // Once: the model, the data shard and the exchange (which connects to no other task yet). At
  // every call: the chief's (or evaluator's) duties, whose summary times the task from now.
  absl::Status Setup(const std::atomic<bool>& stop) {
    start_ = absl::Now();
    if (!set_up_) {
      stop_ = &stop;
      RETURN_IF_ERROR(SetupOnce());
      set_up_ = true;
    }
    if (id_.role != Role::kWorker) {
      if (summaries_ == nullptr && !options_.summary_dir.empty()) {
        summaries_ = std::make_unique<SummaryLog>(options_.summary_dir, metrics_,
                                                  [this] { return exchange_->learning_rate(); });
      }
      duties_ = std::make_unique<ChiefDuties>(options_, *model_, *exchange_, steps_per_epoch_,
                                              test_, metrics_, start_, summaries_.get());
    }
    return absl::OkStatus();
  }

  absl::Status SetupOnce() {
    RETURN_IF_ERROR(ValidateOptions(options_));
    ASSIGN_OR_RETURN(model_, MakeModel(options_.model, device_, options_.seed));
    model_->UseStepGraphs(options_.step_graphs);
    if (train_ != nullptr && options_.elastic) {
      // Positions count gradients applied: an epoch is the training set in batches.
      steps_per_epoch_ = train_->size() / options_.batch_size;
      if (steps_per_epoch_ < 1) {
        return absl::InvalidArgumentError(absl::StrCat("--batch-size: ", options_.batch_size,
                                                       " is larger than the training set of ",
                                                       train_->size(), " examples"));
      }
    } else if (train_ != nullptr) {
      batches_ = std::make_unique<ShardBatches>(
          *train_, ShardSpec{options_.seed, id_.rank, id_.num_workers}, options_.batch_size);
      steps_per_epoch_ = batches_->steps_per_epoch();
      if (steps_per_epoch_ < 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--batch-size: ", options_.batch_size, " is larger than this worker's shard of ",
            ShardSize(train_->size(), id_.num_workers), " examples"));
      }
    }
    exchange_ = MakeGradientExchange(
        {options_, id_, device_, *model_, metrics_, steps_per_epoch_, *stop_, test_});
    RETURN_IF_ERROR(exchange_->Setup());
    if (id_.role != Role::kEvaluator && train_ == nullptr) {
      return absl::FailedPreconditionError("no training set loaded");
    }
    return absl::OkStatus();
  }

  // One step at position `pos`: compute this worker's gradients, exchange them. Returns the
  // position of the next step.
  absl::StatusOr<int64_t> Step(int64_t pos) {
    absl::Time t0 = absl::Now();
    ASSIGN_OR_RETURN(const Batch* batch, NextBatch(pos));
    RETURN_IF_ERROR(exchange_->LoadParameters());
    float loss = 0;
    if (float* on_device = exchange_->DeviceLossSlot()) {
      RETURN_IF_ERROR(model_->ComputeGradients(batch->image_span(), batch->label_span(), on_device,
                                               exchange_->DeviceTail()));
    } else {
      ASSIGN_OR_RETURN(loss, model_->ComputeGradients(batch->image_span(), batch->label_span()));
    }
    if (options_.inject_delay > absl::ZeroDuration()) {
      SleepUnlessStopped(options_.inject_delay, *stop_);
    }
    ASSIGN_OR_RETURN(ExchangedStep step, exchange_->Exchange(pos, loss));
    last_loss_ = step.loss;
    ++local_steps_;
    if (metrics_) {
      metrics_->steps.Increment();
      metrics_->examples.Increment(batch->size);
      metrics_->loss.Set(step.loss);
      metrics_->step_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    }
    return step.next;
  }

  // The batch of the step at `pos`: by position in a fixed-size job; in an elastic one, the
  // next of this worker's shard for the epoch, rebuilt when the epoch or the membership it was
  // cut for changes (and wrapping when the members that left make the epoch last longer).
  absl::StatusOr<const Batch*> NextBatch(int64_t pos) {
    std::optional<ElasticShard> shard = exchange_->DataShard();
    if (!shard) return batches_->At(pos);
    if (!batches_ || shard != elastic_shard_) {
      batches_ = std::make_unique<ShardBatches>(
          *train_, ShardSpec{options_.seed, shard->index, shard->count}, options_.batch_size);
      if (batches_->steps_per_epoch() < 1) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--batch-size: ", options_.batch_size, " is larger than this worker's shard of ",
            ShardSize(train_->size(), shard->count), " examples now that the job has ",
            shard->count, " workers; lower --batch-size or spec.elastic.maxReplicas"));
      }
      if (elastic_shard_) {
        log::Info("Data shard", {{"epoch", shard->epoch},
                                 {"index", shard->index},
                                 {"workers", shard->count},
                                 {"examples", ShardSize(train_->size(), shard->count)}});
      }
      elastic_shard_ = shard;
      elastic_cursor_ = 0;
    }
    const int64_t per_epoch = batches_->steps_per_epoch();
    return batches_->At(shard->epoch * per_epoch + elastic_cursor_++ % per_epoch);
  }

  absl::StatusOr<TrainingSummary> TrainLoop(int64_t pos, const std::atomic<bool>& stop) {
    if (duties_) duties_->StartTraining();
    while (!exchange_->Done(pos)) {
      if (stop.load()) return absl::CancelledError("stopped by signal");
      const int64_t epoch_before = pos / steps_per_epoch_;
      absl::StatusOr<int64_t> next = Step(pos);
      if (!next.ok()) {
        ASSIGN_OR_RETURN(Recovery recovery, exchange_->Recover(next.status(), pos));
        if (recovery.training_over) break;
        pos = recovery.pos;
        continue;
      }
      pos = *next;
      if (metrics_) metrics_->epoch.Set(static_cast<double>(pos / steps_per_epoch_));
      if (duties_) RETURN_IF_ERROR(duties_->AfterStep(pos, epoch_before, last_loss_));
    }
    RETURN_IF_ERROR(exchange_->EndTraining());
    if (duties_) return duties_->Finish();
    log::Info("Training finished",
              {{"steps", local_steps_}, {"global_step", exchange_->global_step()}});
    return Summary();
  }

  // Evaluates every --eval-every until the ps say (or, by staying away, show) that training is
  // over.
  absl::StatusOr<TrainingSummary> EvaluatorLoop(const std::atomic<bool>& stop) {
    while (!stop.load()) {
      absl::Status ready = exchange_->AwaitParameters(duties_->last_eval().examples > 0);
      if (IsTrainingOver(ready)) break;
      RETURN_IF_ERROR(ready);
      // An evaluator has no training shard to count epochs by.
      RETURN_IF_ERROR(duties_->Evaluate(std::nullopt));
      absl::Time next = absl::Now() + options_.eval_every;
      SleepUnlessStopped(next - absl::Now(), stop);
    }
    log::Info("Training is over; evaluator exiting", {{"accuracy", duties_->last_eval().accuracy}});
    return Summary();
  }

  TrainingSummary Summary() const {
    if (duties_) return duties_->Summary();
    return RunSummary(options_, exchange_->global_step(), exchange_->examples_per_step(), start_);
  }

  const TrainerOptions options_;
  TaskIdentity id_;  // the exchange reads it from Setup on; UseCollective completes it
  Device& device_;
  const Dataset* train_;
  const Dataset* test_;
  WorkerMetrics* metrics_;

  absl::Time start_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<ShardBatches> batches_;
  std::optional<ElasticShard> elastic_shard_;  // what batches_ was cut for (elastic)
  int64_t elastic_cursor_ = 0;                 // steps made in that shard
  int64_t steps_per_epoch_ = 0;                // 0 for an evaluator
  std::unique_ptr<GradientExchange> exchange_;
  std::unique_ptr<SummaryLog> summaries_;  // one event file per process start, for every duties_
  std::unique_ptr<ChiefDuties> duties_;    // the chief's and the evaluator's
  float last_loss_ = 0;
  int64_t local_steps_ = 0;                  // steps this task made
  const std::atomic<bool>* stop_ = nullptr;  // Run's, from Setup on
  bool set_up_ = false;                      // SetupOnce succeeded
};

Trainer::Trainer(TrainerOptions options, TaskIdentity identity, Device& device,
                 const Dataset* train, const Dataset* test, WorkerMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(identity), device, train, test,
                                   metrics)) {}

Trainer::~Trainer() = default;

absl::StatusOr<std::optional<TrainingSummary>> Trainer::FinishedRun(const std::atomic<bool>& stop) {
  return impl_->FinishedRun(stop);
}

void Trainer::UseCollective(Communicator* communicator, ElasticGroup* group) {
  impl_->UseCollective(communicator, group);
}

absl::StatusOr<TrainingSummary> Trainer::Run(const std::atomic<bool>& stop) {
  return impl_->Run(stop);
}

}  // namespace kubetrain::worker
