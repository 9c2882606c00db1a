// `kubetrain run`: one TrainingJob as local processes. Renders the job's tasks with loopback
// addresses on free ports, starts each task's process with the same env a pod would get,
// interleaves their output with a task prefix, applies each replica's restartPolicy, the job's
// restartScope, backoffLimit, activeDeadlineSeconds and successPolicy, and reports the result.
//
// LocalJob owns its processes; every child is stopped (SIGTERM, then SIGKILL after the grace
// period) before Run returns. Not thread-safe; `stop` may be set from a signal handler.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/port_claims.h"
#include "operator/api/outcome.h"
#include "operator/api/render.h"
#include "operator/api/types.h"
#include "operator/local/task_command.h"

namespace kubetrain::local {

struct LaunchOptions {
  CommandContext command;
  absl::Duration grace_period = absl::Seconds(10);       // SIGTERM → SIGKILL, and for clean exits
  absl::Duration progress_interval = absl::Seconds(10);  // how often the progress line repeats
  absl::Duration restart_delay = absl::Seconds(1);       // first restart delay; doubles, ≤ 30 s
  // GPUs handed to the chief, worker and evaluator tasks round-robin, one each, as
  // CUDA_VISIBLE_DEVICES (with KUBETRAIN_CUDA_DEVICE=0) unless the container sets it
  // (DetectGpus, AssignGpus in operator/local/gpus.h); empty: nothing is set.
  std::vector<std::string> gpus;
  // The training tasks (chief and Worker replicas) of a job with a fixed size each keep to a
  // share of this process's CPUs, the i-th of m tasks the i-th of m equal, contiguous parts of
  // the list, as mpirun binds its ranks; ps and evaluator tasks run anywhere. Left out when the
  // CPUs are fewer than those tasks, or the job is elastic (its size changes).
  bool bind_cpus = true;
  // Elastic jobs: Worker replicas to add (> 0) or remove (< 0), taken (and reset to 0) by the
  // run loop; `kubetrain run` adds one on SIGUSR1 and removes one on SIGUSR2. Null: none.
  std::atomic<int>* scale = nullptr;
};

struct JobResult {
  bool succeeded = false;
  std::string reason;   // Succeeded, Failed, BackoffLimitExceeded, DeadlineExceeded, Interrupted
  std::string message;  // one sentence for the user
  int restarts = 0;
  absl::Duration wall;
  std::optional<nlohmann::json> summary;  // the chief's training_complete line, if printed
};

class LocalJob {
 public:
  // `job` must be defaulted and valid (api::DecodeAndValidate).
  LocalJob(api::TrainingJob job, LaunchOptions options, std::ostream& out);
  ~LocalJob();

  absl::StatusOr<JobResult> Run(const std::atomic<bool>& stop);

 private:
  struct Task;

  // Returns early, leaving the job unprepared, once `stop` is set.
  absl::Status Prepare(const std::atomic<bool>& stop);
  // Task `t` at its training and metrics ports, recorded in ports_.
  std::unique_ptr<Task> NewTask(const api::Task& t, int port, int metrics_port);
  // Renders `task`'s pod (TF_CONFIG from the job as it is now) into its process options.
  absl::Status Configure(Task& task, const std::string& gpu);
  // LaunchOptions::bind_cpus: sets the training tasks' process CPUs.
  void BindTrainers();
  absl::Status StartTask(Task& task);
  // Elastic jobs: applies pending scale requests within spec.elastic's bounds. New workers get
  // the TF_CONFIG of the job's new size; removed ones (the highest indexes) are stopped like a
  // deleted pod; no other task is touched.
  void ApplyScaleRequests();
  absl::Status AddWorkers(int from, int to);  // indexes [from, to)
  void RemoveWorker(int index);
  void PumpOutput(absl::Duration timeout);
  void Emit(Task& task, absl::string_view chunk, bool flush);
  // Records the exit of every task whose process ended.
  void HandleExits();
  // The tasks as the job-outcome policy sees them (operator/api/outcome.h).
  std::vector<api::TaskState> Observe() const;
  // Observe → api::DecideJob → act: finish, stop tasks for restarts, start due ones.
  void Decide();
  size_t TaskIndex(const api::TaskState& s) const;
  void RestartJob(absl::string_view why);
  void Finish(bool succeeded, std::string reason, std::string message);
  void StopAll(bool graceful);
  void MaybePrintProgress(bool force);
  void Say(absl::string_view line);

  api::TrainingJob job_;
  LaunchOptions options_;
  std::ostream& out_;
  std::vector<std::unique_ptr<Task>> tasks_;
  size_t prefix_width_ = 0;
  absl::Time start_;
  absl::Time last_progress_print_ = absl::InfinitePast();
  bool progress_dirty_ = false;
  std::optional<JobResult> result_;
  api::JobLedger ledger_;   // completions and counted restarts, as the operator keeps in status
  std::string run_dir_;     // this run's scratch folder (checkpoints)
  PortClaims port_claims_;  // every task's two ports, claimed from other runs until this one ends
  std::map<std::pair<api::ReplicaType, int>, int> ports_;  // every task's training port
  CommandContext command_;  // options_.command with this run's job secret
};

// The directory of the running executable: where kubetrain-ps and kubetrain-worker are built.
std::string ExecutableDir();

}  // namespace kubetrain::local
