// The job-outcome policy: what the states of a job's tasks mean for the job. One pure function,
// shared by the operator (tasks are pods, operator/controller/reconciler.cc) and `kubetrain run`
// (tasks are processes, operator/local/launcher.cc), so both apply the same success policy,
// restart policies, restart scope, backoffLimit and deadline (docs/architecture.md §10).
//
// The caller observes its tasks, passes what it kept from earlier decisions (the ledger: the
// operator keeps it in the job's status, the local launcher in memory), and acts on the result:
// save the new ledger first, then stop and start tasks. Nothing here does I/O or reads a clock.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "operator/api/types.h"

namespace kubetrain::api {

enum class TaskPhase {
  kAbsent,   // no pod / no process: not created yet, or gone after a stop
  kPending,  // created, not running yet
  kRunning,
  kSucceeded,  // exited 0
  kFailed,     // exited non-zero (exit_code)
  kGoing,      // being deleted or stopped: neither counted nor replaced until it is gone
};

// One task of the job as its launcher sees it now.
struct TaskState {
  ReplicaType type = ReplicaType::kWorker;
  int index = 0;
  bool chief = false;
  RestartPolicy restart_policy = RestartPolicy::kNever;
  std::string name;  // for messages: the pod's name, or the local task's label
  TaskPhase phase = TaskPhase::kAbsent;
  int exit_code = 0;  // kFailed: the container's code, 128 + N when killed by signal N
  std::string id;     // this incarnation of the task (a pod's uid): restarts are counted per id
};

// The pause between a counted failure and the task's replacement, as the batch/v1 Job controller
// paces pod recreation: `initial` after the first failure, doubling with each further one up to
// `max`. A replacement that has been up for `reset_after` since its back-off ended has proved
// healthy, and its task's next failure starts again at `initial`. The default (zero) replaces a
// task at once. docs/architecture.md §10.
struct RestartBackoff {
  absl::Duration initial = absl::ZeroDuration();
  absl::Duration max = absl::ZeroDuration();
  absl::Duration reset_after = absl::ZeroDuration();
};

// The operator's policy: 10 s doubling to 6 min (the Job controller's pod-failure back-off), reset
// after 10 min of healthy running (the kubelet resets a container's back-off after as long).
inline constexpr RestartBackoff kOperatorRestartBackoff{absl::Seconds(10), absl::Minutes(6),
                                                        absl::Minutes(10)};

// One task's failures since its back-off was last reset (or, for restartScope Job, the job's).
struct TaskBackoff {
  int failures = 0;
  absl::Time last_failure = absl::InfinitePast();
  friend bool operator==(const TaskBackoff&, const TaskBackoff&) = default;
};

// What a job's outcome depends on besides its tasks, kept by the caller between decisions.
struct JobLedger {
  std::map<ReplicaType, std::set<int>> completed;  // indexes that exited 0: never run again
  std::map<ReplicaType, int> restarts;             // counted against backoffLimit
  // ids of incarnations whose failure is already in `restarts` (for restartScope Job, every task
  // of the job when the restart was counted): they are only stopped, never counted, completed or
  // allowed to fail the job again. Dropped once the incarnation is gone.
  std::vector<std::string> counted;
  absl::Time start = absl::InfinitePast();  // activeDeadlineSeconds counts from here
  // Back-off by BackoffKey: present while a task's failures may still delay its replacement.
  std::map<std::string, TaskBackoff> backoff;
};

enum class Verdict {
  kNone,                  // the job goes on
  kSucceeded,             // the success policy is met
  kFailed,                // a task failed in a way its restart policy does not retry
  kBackoffLimitExceeded,  // one more restart would exceed backoffLimit
  kDeadlineExceeded,      // activeDeadlineSeconds passed
};

struct JobDecision {
  JobLedger ledger;  // to be saved before any task is stopped
  Verdict verdict = Verdict::kNone;
  std::optional<TaskState> culprit;  // the failed task behind kFailed or kBackoffLimitExceeded
  // Failed tasks whose restart this decision counts (empty when none is new), and whether the
  // restart is of the whole job (restartScope Job: one restart however many tasks failed).
  std::vector<TaskState> restarted;
  bool whole_job = false;
  // Tasks to stop: each failed task to be restarted, or for restartScope Job every task of the
  // job, finished ones included (the restarted job needs them all again). Empty once a verdict
  // is reached: ending the job is the caller's cleanup policy.
  std::vector<TaskState> stop;
  // Absent tasks to start: not yet completed, and no verdict or whole-job restart under way.
  std::vector<TaskState> start;
  std::map<ReplicaType, int> active;  // pending or running tasks per type
  std::map<ReplicaType, int> failed;  // failed tasks per type
  bool chief_running = false;
  std::optional<absl::Time> deadline;  // when activeDeadlineSeconds ends the job (no verdict yet)
  // Absent tasks not started because their back-off runs (the whole job's under restartScope
  // Job): decide again at `until`.
  struct Waiting {
    TaskState task;
    absl::Time until;
  };
  std::vector<Waiting> waiting;
};

// "worker-1": the key of a task's back-off in JobLedger::backoff; "job" for a whole-job restart.
std::string BackoffKey(const TaskState& t);
inline constexpr char kJobBackoffKey[] = "job";

// The pause after the `failures`-th failure: initial * 2^(failures-1), at most max.
absl::Duration BackoffDelay(const RestartBackoff& policy, int failures);

// `tasks` holds every task of the job (api::Tasks order), absent ones included; `job` is
// defaulted. The order of the rules: a failure no policy retries ends the job first, then the
// success policy, then restarts (backoffLimit), then the deadline. A task whose failure was
// counted is started again only once `backoff` allows it.
JobDecision DecideJob(const TrainingJob& job, const std::vector<TaskState>& tasks,
                      const JobLedger& ledger, absl::Time now, const RestartBackoff& backoff = {});

int TotalRestarts(const JobLedger& ledger);

}  // namespace kubetrain::api
