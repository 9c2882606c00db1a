// Training for one task of a job: the public interface worker/launch/main.cc uses. Options, the
// task's identity, the run's summary, and Trainer, which runs ONE training loop
// (worker/runtime/trainer.cc) over a GradientExchange strategy (worker/runtime/gradient_exchange.h)
// chosen by the mode: ps-sync or ps-async against parameter servers (worker/runtime/exchange_ps.h),
// or all-reduce among the workers themselves (worker/runtime/exchange_allreduce.h). The chief's
// duties on top (initialise or restore from the latest checkpoint, evaluate on the test set each
// epoch, log progress, checkpoint, summarise) are ChiefDuties' (worker/runtime/chief_duties.h), the
// same in every mode. An evaluator task (ps modes) only evaluates.
//
// A Trainer owns its model, strategy and (chief) duties; it borrows the datasets, the device,
// the communicator and the metrics. Run is called once, from one thread; the ps chief starts one
// more thread of its own to watch the ps.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ps/half_float.h"
#include "ps/optimizer.h"
#include "worker/collective/communicator.h"
#include "worker/collective/elastic_group.h"
#include "worker/core/data/dataset.h"
#include "worker/core/device.h"
#include "worker/runtime/metrics.h"

namespace kubetrain::worker {

// ps-sync / ps-async train against parameter servers; all-reduce averages gradients among the
// workers themselves.
enum class Mode { kPsSync, kPsAsync, kAllReduce };
enum class Role { kChief, kWorker, kEvaluator };

struct TrainerOptions {
  Mode mode = Mode::kPsSync;
  std::string model = "mlp";
  int epochs = 20;
  int batch_size = 64;          // per worker
  double lr = 0.02;             // for a global batch of lr_reference_batch examples
  int lr_reference_batch = 64;  // linear scaling: lr × global batch / this (0: no scaling)
  int warmup_steps = 0;
  bool lr_decay = true;  // cosine decay over the whole run, to lr_floor × lr
  double lr_floor = 0.05;
  std::string optimizer = "momentum";  // sgd, momentum, adam, adagrad
  double momentum = 0.9;
  uint64_t seed = 1;
  std::string checkpoint_dir;  // the chief's checkpoints; empty: none (no ps refill possible)
  // The chief's and the evaluator's TensorBoard event files (worker/summary); empty: none.
  std::string summary_dir;
  absl::Duration checkpoint_every = absl::Seconds(30);
  int keep_checkpoints = 3;
  absl::Duration log_every = absl::Seconds(5);
  absl::Duration ready_timeout = absl::Minutes(30);  // waiting for the ps (and chief) to be up
  absl::Duration eval_every = absl::Seconds(30);     // evaluator task
  // Evaluator: how long the ps may be unreachable, after a first evaluation, before it concludes
  // that training is over and exits 0.
  absl::Duration evaluator_patience = absl::Seconds(30);
  absl::Duration monitor_every = absl::Seconds(1);  // chief's ps watch
  int eval_batch = 500;
  // All-reduce mode: gradients are packed into buffers of at most this many bytes, one
  // collective each (Horovod's fusion threshold, same default).
  int64_t fusion_bytes = int64_t{64} << 20;
  // --gradient-compression: what crosses the network as 16-bit floats (ps/half_float.h), every
  // sum and update staying float32. All-reduce: the fused gradient buffers, over Gloo's TCP ring
  // (shared memory and NCCL have no link to save and sum float32). ps modes: the pushed
  // gradients and the pulled parameters (the ps keep and update float32 values).
  ps::WireFloat gradient_compression = ps::WireFloat::kFloat32;
  // All-reduce on the CPU over Gloo, fixed size: fused buffers are packed last layer first and
  // each is summed, on a thread of its own, as soon as backward has completed its gradients,
  // while backward goes on with the earlier layers (worker/runtime/fused_buckets.h). The sums
  // are the same; only when they start differs.
  bool overlap_allreduce = false;
  // Capture each training step in one device graph after a warm-up step at its batch size, and
  // replay it (Model::UseStepGraphs; docs/decisions/0010-one-graph-per-step.md). A device that
  // does not capture (the CPU) runs every step as issued.
  bool step_graphs = false;
  // The job's shared secret, sent with every ps call (common/job_secret.h).
  std::string job_secret;
  // ps modes: offer each ps a shared-memory buffer; a ps on this host maps it and pushes and
  // pulls skip the socket (ps/shared_memory.h, docs/architecture.md §5.11).
  bool ps_shared_memory = true;
  // ps-sync: each global step applies the first (training workers − backup_workers) gradients
  // to arrive and drops the later ones as stale, counted (TensorFlow's SyncReplicasOptimizer
  // backup workers): the slowest workers no longer pace every step. A worker whose push was late
  // goes on from the newest step. Every worker of a job must give the same value.
  int backup_workers = 0;
  // Added to every step of this worker, before its gradients are exchanged: a slow worker, for
  // tests and benchmarks.
  absl::Duration inject_delay = absl::ZeroDuration();
  // ps modes: the job changes size while it runs (docs/architecture.md §5.10). Workers join the
  // parameter servers' membership, which decides each sync step's quota (minus backup_workers)
  // and each epoch's data shards; the run ends after epochs × the training set's examples,
  // however many workers trained on them. Every task of a job must give the same value.
  bool elastic = false;
  // Elastic: how often a worker tells the ps it is alive; the ps drop a worker silent for
  // member_timeout.
  absl::Duration heartbeat_every = absl::Seconds(1);
  absl::Duration member_timeout = absl::Seconds(10);
  // Elastic ps-sync: the job's minimum size in training workers (the chief included); below it
  // a step waits for members to come back.
  int min_workers = 1;
};

struct TaskIdentity {
  Role role = Role::kWorker;
  int rank = 0;                           // this task among the training workers (chief first)
  int num_workers = 1;                    // training workers: the chief (if any) plus the workers
  std::vector<std::string> ps_addresses;  // "host:port" as the cluster spec names them
  // All-reduce mode: the connected communicator of this rank (borrowed).
  Communicator* communicator = nullptr;
  // Elastic all-reduce jobs: the group whose communicator is formed again for each generation
  // of members (borrowed; `communicator` stays null).
  ElasticGroup* group = nullptr;
};

struct TrainingSummary {
  int64_t steps = 0;  // global step at the end
  int epochs = 0;
  double test_accuracy = 0;
  double test_loss = 0;
  double examples_per_second = 0;
  double wall_seconds = 0;
  std::string checkpoint;  // last checkpoint written
  // The final line the chief prints: {"event":"training_complete","test_accuracy":...}
  // (worker/runtime/chief_duties.cc).
  nlohmann::ordered_json ToJson() const;
};

// Checks the option values, naming the flag of a bad one.
absl::Status ValidateOptions(const TrainerOptions& options);

// The optimizer a run uses (options already validated): the flags' rule, the learning rate
// scaled for `global_batch`, warmup, and cosine decay over `total_updates`.
ps::OptimizerOptions OptimizerFor(const TrainerOptions& options, int global_batch,
                                  int64_t total_updates);

class Trainer {
 public:
  // `train` is needed by training workers, `test` by the chief and the evaluator; either may be
  // null otherwise. `metrics` may be null.
  Trainer(TrainerOptions options, TaskIdentity identity, Device& device, const Dataset* train,
          const Dataset* test, WorkerMetrics* metrics);
  ~Trainer();

  // The chief, before it connects to any other task: when its latest checkpoint holds the end of
  // the run, this is a chief that restarted after ending training, and the tasks it would wait
  // for (the ps it shut down, the peers that finished) may be gone for good. Evaluates that
  // checkpoint, shuts down any ps still running and returns the run's summary; nullopt when there
  // is training left, for Run (docs/architecture.md §10). `stop` is Run's.
  absl::StatusOr<std::optional<TrainingSummary>> FinishedRun(const std::atomic<bool>& stop);
  // All-reduce mode, for a Trainer made before its rank connected: the connected communicator, or
  // an elastic job's group (borrowed; TaskIdentity says the same). Before Run.
  void UseCollective(Communicator* communicator, ElasticGroup* group);
  // Trains (or, for an evaluator, evaluates) until training is over. The chief returns the
  // summary of the run; other tasks a summary of what they saw.
  absl::StatusOr<TrainingSummary> Run(const std::atomic<bool>& stop);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetrain::worker
