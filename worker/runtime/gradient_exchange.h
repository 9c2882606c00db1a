// The strategy interface the one training loop (worker/runtime/trainer.cc) runs over: how a step's
// gradients become the next step's parameters. Implementations: ps-sync and ps-async
// (worker/runtime/exchange_ps.h: push to the parameter servers, pull what they applied) and
// all-reduce (worker/runtime/exchange_allreduce.h: sum with the peers, apply the update locally).
//
// The loop calls, in this order: Setup; on the chief, RunIsOver with its latest checkpoint; Start;
// then per step LoadParameters, the model's ComputeGradients, Exchange (and Recover when a step
// failed); EndTraining; and, on the chief, after its final evaluation and checkpoint, ShutDown.
// An evaluator task calls Setup, then AwaitParameters and LoadParameters before each evaluation.
// Every call comes from the training thread; an implementation may run threads of its own (the
// ps chief's watch).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/client.h"
#include "worker/core/device.h"
#include "worker/core/model.h"
#include "worker/runtime/metrics.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::worker {

class ChiefDuties;

// What a strategy works for, borrowed from the Trainer, which outlives it.
struct ExchangeContext {
  const TrainerOptions& options;
  const TaskIdentity& id;
  Device& device;
  Model& model;
  WorkerMetrics* metrics;  // may be null
  // This worker's; 0 for an evaluator (no training shard). Elastic: a whole pass over the
  // training set in batches, as if one worker made it: positions count gradients applied.
  int64_t steps_per_epoch;
  const std::atomic<bool>& stop;  // Run's: calls in flight give up once it is set
  const Dataset* test = nullptr;  // the test set, where loaded (all-reduce: shared_evaluation)

  int64_t total_steps() const { return int64_t{options.epochs} * steps_per_epoch; }
};

// Elastic jobs: the data shard a worker trains on in `epoch`, its place among the members as
// the epoch began (docs/architecture.md §5.10).
struct ElasticShard {
  int64_t epoch = 0;
  int index = 0;
  int count = 1;
  friend bool operator==(const ElasticShard&, const ElasticShard&) = default;
};

// The result of one exchanged step.
struct ExchangedStep {
  int64_t next;  // this worker's position for its next step
  float loss;    // the loss to report: this worker's, or the mean over the ranks (all-reduce)
};

// What the loop does after a failed step.
struct Recovery {
  bool training_over = false;  // the ps are shutting down: the chief has ended training
  int64_t pos = 0;             // otherwise: where to go on
};

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  // Checks what this strategy needs and builds its state (ps client, communicator buffers,
  // optimizer), once the model exists; it connects to no other task (all-reduce: the rank's
  // communicator may be connected later, before Start).
  virtual absl::Status Setup() = 0;
  // Brings this task to the run's starting parameters: the chief (`chief` set, kept for the
  // rest of the run) initialises the run or restores it from ChiefDuties::LatestCheckpoint
  // (all-reduce: and gives every rank its state); other tasks (`chief` null) wait for that.
  // Returns this worker's first position; IsTrainingOver when the run has already ended.
  virtual absl::StatusOr<int64_t> Start(ChiefDuties* chief) = 0;
  // Makes the model hold the parameters to compute with (ps: the pulled values).
  virtual absl::Status LoadParameters() = 0;
  // The model holds the gradients of the step at `pos` and `loss` is its mean loss over this
  // worker's batch: exchanges them and gets the parameters of the next step.
  virtual absl::StatusOr<ExchangedStep> Exchange(int64_t pos, float loss) = 0;
  // A step at `pos` failed with `failure`: waits for what was lost and says where to go on, or
  // returns the error that ends this task.
  virtual absl::StatusOr<Recovery> Recover(const absl::Status& failure, int64_t pos) = 0;
  // Where the model leaves the step's mean loss on the device (Model::ComputeGradients with a
  // loss pointer), so the step need not wait for the device before the exchange; Exchange's
  // `loss` is then not read. Null: the loop passes the loss to Exchange (ps modes).
  virtual float* DeviceLossSlot() { return nullptr; }
  // The exchange's device work for the next step, to be issued with the step's gradients
  // (Model::ComputeGradients) and captured with them; null when the exchange runs it in Exchange.
  // Given, the next Exchange finds it issued.
  virtual StepTail* DeviceTail() { return nullptr; }
  // Whether training is over once this worker is at `pos`.
  virtual bool Done(int64_t pos) const = 0;
  // Whether `checkpoint`, one that fits this job, holds the end of its training, so that a
  // chief finding it trains no more (Trainer::FinishedRun, before Start). Setup has run.
  virtual bool RunIsOver(const ps::ModelState& checkpoint) const = 0;
  // The last step's training is done (every rank calls it): all-reduce checks that every rank
  // holds the same parameters and, in a job of fixed size, evaluates them on the test set with
  // the other ranks (shared_evaluation).
  virtual absl::Status EndTraining() = 0;
  // The evaluation on the whole test set that the last Exchange (when it ended an epoch before
  // the last) or EndTraining made together with the other ranks, each on its share (all-reduce,
  // fixed size: docs/architecture.md §5.3). nullopt: the chief evaluates on its own.
  virtual std::optional<EvalResult> shared_evaluation() const { return std::nullopt; }
  // The learning rate the optimizer applies at the current global step, where the exchange
  // knows its schedule (TensorBoard's learning_rate series).
  virtual std::optional<double> learning_rate() const { return std::nullopt; }
  // The chief, after its final evaluation and checkpoint: releases what training used (ps:
  // stops its watch and shuts the ps down).
  virtual void ShutDown() = 0;

  // The whole state (values, optimizer slots, step, run id) for a checkpoint.
  virtual absl::StatusOr<ps::ModelState> Export() = 0;
  // The job's global step as this task last saw it.
  virtual int64_t global_step() const = 0;
  // Examples one global step trains on (ps-sync and all-reduce: every worker's batch).
  virtual int examples_per_step() const = 0;
  // The largest global step a checkpoint of this job can hold; < 0: not known (evaluator).
  virtual int64_t last_global_step() const = 0;
  // A checksum of the final parameters, where the strategy computes one (all-reduce).
  virtual std::optional<uint64_t> parameter_checksum() const { return std::nullopt; }
  // Elastic jobs: where this worker's next batch comes from. nullopt: a job of fixed size,
  // whose shard is the rank's among TaskIdentity::num_workers.
  virtual std::optional<ElasticShard> DataShard() const { return std::nullopt; }

  // Evaluator: waits until the parameters can be read and holds the newest. `evaluated`: this
  // task has evaluated before, so parameters that stay unreachable mean training is over.
  virtual absl::Status AwaitParameters(bool evaluated) = 0;
};

// Defined in worker/runtime/trainer.cc, beside the loop.

// The strategy for options.mode.
std::unique_ptr<GradientExchange> MakeGradientExchange(const ExchangeContext& context);

// Returned when the parameter servers are shutting down: the chief has ended training.
absl::Status TrainingOverStatus();
bool IsTrainingOver(const absl::Status& s);

// Sleeps for `d`, waking early (within 50 ms) when `stop` is set.
void SleepUnlessStopped(absl::Duration d, const std::atomic<bool>& stop);

}  // namespace kubetrain::worker
