// ChiefDuties: what the chief does besides training, the same in every training mode. It owns
// the checkpoints (the latest one to initialise, restore or refill from; the one at step 0, the
// periodic ones every --checkpoint-every and the final one), the evaluations on the test set
// (each epoch and at the end), the progress lines and their metrics, and the run's summary (the
// "Training complete" line and the TrainingSummary whose JSON the chief prints last). An
// evaluator task uses it for its evaluations and summary only.
//
// Failing checkpoints (a full disk, a file-size limit, a folder made read-only) do not stop the
// training at once: the chief warns once, trains on and retries after doubling intervals, and
// logs again only when that changes ("Checkpoints written again", "Checkpoint writes are failing
// again"). Writes that keep failing stop it with an error (CheckpointRetry says when).
//
// It borrows the model, the gradient exchange (for the state a checkpoint holds), the test set
// and the metrics. Called from the training thread, except LatestCheckpoint, which the ps
// chief's watch thread calls too. In the ps modes on a device whose memory is host memory (the
// CPU), the evaluation at each epoch's end runs on a thread of its own, on a copy of the model
// (docs/architecture.md §5.3), so the training goes on meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "ps/client.h"
#include "worker/core/data/dataset.h"
#include "worker/core/model.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/gradient_exchange.h"
#include "worker/runtime/metrics.h"
#include "worker/runtime/progress_log.h"
#include "worker/runtime/summary_log.h"
#include "worker/runtime/trainer.h"

namespace kubetrain::worker {

// The summary of a run that reached global step `steps`, started at `start`: what every task
// returns; the chief's adds the test results and its last checkpoint.
TrainingSummary RunSummary(const TrainerOptions& options, int64_t steps, int examples_per_step,
                           absl::Time start);

// When a chief retries failed periodic checkpoints, and when it gives up. Giving up ends the
// run with an error rather than training on: every step trained meanwhile is lost to a restart,
// and the final checkpoint, the run's result, would most likely fail as well, after all the
// training. A restarted chief resumes from the last checkpoint written, and refuses to start
// while its directory cannot be written (CheckpointDir::Open).
struct CheckpointRetry {
  absl::Duration first_retry;    // after the first failure; then doubling
  absl::Duration max_retry;      // where the doubling stops
  absl::Duration give_up_after;  // failing this long (and min_attempts times): an error
  int min_attempts = 3;
  const Clock* clock = &Clock::Real();

  // For checkpoints every `every`: the first retry after `every` (within 1 s..1 min), doubling
  // up to 5 min; giving up after 10 min or 3 x `every`, whichever is longer, so that a disk
  // someone frees within minutes costs no restart.
  static CheckpointRetry For(absl::Duration every);
};

class ChiefDuties {
 public:
  // `steps_per_epoch`: the training worker's (0 for an evaluator, which calls only Evaluate and
  // Summary). `test` may be null (Evaluate then fails), `metrics` too. `start`: when the task
  // started. `summaries` (may be null): where progress and evaluations go for TensorBoard.
  ChiefDuties(const TrainerOptions& options, Model& model, GradientExchange& exchange,
              int64_t steps_per_epoch, const Dataset* test, WorkerMetrics* metrics,
              absl::Time start, SummaryLog* summaries = nullptr);
  // Cancels an epoch's evaluation still running (within one test batch) and waits for it.
  ~ChiefDuties();
  ChiefDuties(const ChiefDuties&) = delete;
  ChiefDuties& operator=(const ChiefDuties&) = delete;

  // The newest checkpoint that fits this job, or nullopt when there is none or no
  // --checkpoint-dir. Safe to call from another thread while training goes on. The first call
  // after FinishFromFinalCheckpoint found training left takes the checkpoint it read, unless a
  // checkpoint was written since: a restarted chief reads it once.
  absl::StatusOr<std::optional<ps::ModelState>> LatestCheckpoint() const;
  // Records `state`, the state a new run starts from, as the first checkpoint (without
  // --checkpoint-dir, nothing).
  absl::Status SaveInitialCheckpoint(const ps::ModelState& state);
  // Writes the exchange's state as the newest checkpoint (without --checkpoint-dir, nothing).
  absl::Status SaveCheckpoint();

  // Training starts (or resumes) now: progress lines measure from here, and the first periodic
  // checkpoint is due --checkpoint-every from now.
  void StartTraining();
  // After a step: the worker is at `pos`, was in epoch `epoch_before` before the step, and the
  // step's loss was `loss`. Logs progress; evaluates when an epoch ended before the last (in the
  // background where it can: the previous one's failure, if any, is returned here; or reports
  // the evaluation the ranks made together, GradientExchange::shared_evaluation); writes a
  // checkpoint when one is due (a failed one is retried, CheckpointRetry; one failing for too
  // long is the error returned).
  absl::Status AfterStep(int64_t pos, int64_t epoch_before, float loss);
  // Evaluates the exchange's parameters on the test set and logs the `evaluation` line (with
  // `epoch`, where known), after any epoch's evaluation still running.
  absl::Status Evaluate(std::optional<int64_t> epoch);
  // Waits for the epoch's evaluation running in the background, if any; its error.
  absl::Status AwaitEvaluation();
  // Training is over: the final checkpoint, the evaluation of exactly its values (or the one the
  // ranks made together, GradientExchange::shared_evaluation), the exchange's ShutDown, and the
  // "Training complete" line. Returns the run's summary, at the
  // final checkpoint's step.
  absl::StatusOr<TrainingSummary> Finish();
  // Before training: when the latest checkpoint holds the end of the run
  // (GradientExchange::RunIsOver), the chief is one that restarted after ending training, and
  // the ps it shut down may be gone for good. Evaluates that checkpoint, shuts down whatever ps
  // still run (ShutDown) and returns the summary naming it, waiting for no other task.
  // nullopt: there is training left (the checkpoint read is kept for LatestCheckpoint), or no
  // checkpoint.
  absl::StatusOr<std::optional<TrainingSummary>> FinishFromFinalCheckpoint();

  // Replaces the retry policy CheckpointRetry::For(--checkpoint-every).
  void set_checkpoint_retry(const CheckpointRetry& retry) { retry_ = retry; }

  // The summary so far: global step, test results, last checkpoint.
  TrainingSummary Summary() const;
  EvalResult last_eval() const;

 private:
  class BackgroundEvaluation;

  const TrainerOptions& options_;
  Model& model_;
  GradientExchange& exchange_;
  const int64_t steps_per_epoch_;
  const Dataset* test_;
  WorkerMetrics* metrics_;
  const absl::Time start_;
  Checkpointer checkpointer_;
  ProgressLog progress_;
  SummaryLog* summaries_;  // the trainer's; null without --summary-dir

  // What a checkpoint must fit to be restored into this job.
  CheckpointExpectation Expected() const;
  // Writes `state` as the newest checkpoint.
  absl::Status Save(const ps::ModelState& state);
  // The periodic checkpoint, if due; its failure is retried (CheckpointRetry), and is returned
  // only when it is time to give up.
  absl::Status MaybeCheckpoint();
  // Records a failed checkpoint (warning when checkpoints were written until now); the error to
  // stop with once they have failed for too long, else OK.
  absl::Status CheckpointFailed(const absl::Status& error);
  // Writes `state`'s values (from `source`, named in errors) into the model, evaluates them on
  // the test set and logs the `evaluation` line at the state's global step.
  absl::Status EvaluateState(const ps::ModelState& state, const std::string& source,
                             std::optional<int64_t> epoch);
  // Evaluates the model's values as they are, logs the `evaluation` line at `step` and keeps
  // the result for the summary. The test set is there.
  absl::Status EvaluateModel(int64_t step, std::optional<int64_t> epoch);
  // The evaluation at the end of `epoch`: started in the background where there is one.
  absl::Status EvaluateEpoch(int64_t epoch);
  // Logs `eval`, taken at `step`, and keeps it for the summary.
  void Record(const EvalResult& eval, int64_t step, std::optional<int64_t> epoch);
  // The summary of a run at `steps`: test results and last checkpoint as they are now.
  TrainingSummary SummaryAt(int64_t steps, int examples_per_step) const;
  // Logs the "Training complete" line of `summary` and returns it.
  TrainingSummary Completed(TrainingSummary summary) const;

  // Drops the checkpoint FinishFromFinalCheckpoint read: a newer one is being written.
  void ForgetReadAtStart();

  mutable std::mutex read_at_start_mu_;
  mutable std::optional<ps::ModelState> read_at_start_;  // guarded by read_at_start_mu_

  mutable std::mutex eval_mu_;
  EvalResult last_eval_;  // guarded by eval_mu_: a background evaluation writes it
  // The training chief's, on a host-memory device; null otherwise.
  std::unique_ptr<BackgroundEvaluation> background_;
  std::string last_checkpoint_;  // path of the last checkpoint written
  int64_t last_checkpoint_step_ = -1;

  // The training thread's: when the next periodic checkpoint is due, and its failures.
  CheckpointRetry retry_;
  absl::Time next_checkpoint_ = absl::InfinitePast();
  absl::Duration retry_delay_;  // the wait after the latest failure
  absl::Time failing_since_;    // the first failure of the current run of them
  int failed_attempts_ = 0;     // in the current run of failures; 0: writing works
  int64_t failing_since_step_ = 0;
  bool ever_failed_ = false;
};

}  // namespace kubetrain::worker
