// Running a `kubetrain run`: its tasks started, their output interleaved, their exits put to the
// job-outcome policy (operator/api/outcome.h), restarts, elastic scale requests and the stop.
// Preparing the tasks is launcher_setup.cc's.
#include "operator/local/launcher.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/port_claims.h"
#include "common/process.h"
#include "common/status.h"
#include "operator/api/outcome.h"
#include "operator/api/render.h"
#include "operator/api/restart.h"
#include "operator/local/launcher_task.h"
#include "operator/local/progress.h"

namespace kubetrain::local {

LocalJob::LocalJob(api::TrainingJob job, LaunchOptions options, std::ostream& out)
    : job_(std::move(job)), options_(std::move(options)), out_(out) {}

LocalJob::~LocalJob() { StopAll(/*graceful=*/false); }

void LocalJob::Say(absl::string_view line) {
  out_ << absl::StrFormat("%-*s | %s\n", prefix_width_, "kubetrain", line) << std::flush;
}

void LocalJob::ApplyScaleRequests() {
  if (options_.scale == nullptr) return;
  const int delta = options_.scale->exchange(0);
  if (delta == 0) return;
  if (!job_.spec.elastic) {
    Say(absl::StrCat("Ignoring a scale request: TrainingJob ", job_.metadata.name,
                     " has no spec.elastic, so its Worker count is fixed"));
    return;
  }
  auto workers = job_.spec.replica_specs.find(api::ReplicaType::kWorker);
  if (workers == job_.spec.replica_specs.end()) return;  // validation requires Worker replicas
  const int current = workers->second.replicas.value_or(0);
  const int low = job_.spec.elastic->min_replicas.value_or(1);
  const int high = job_.spec.elastic->max_replicas.value_or(current);
  const int target = std::clamp(current + delta, low, high);
  if (target != current + delta) {
    Say(absl::StrCat("Worker replicas stay within spec.elastic [", low, ", ", high, "]: asked for ",
                     current + delta, ", scaling to ", target));
  }
  if (target == current) return;
  Say(absl::StrCat("Scaling Worker replicas ", current, " -> ", target));
  workers->second.replicas = target;
  if (target > current) {
    if (absl::Status added = AddWorkers(current, target); !added.ok()) {
      Finish(false, "Failed", std::string(added.message()));
    }
    return;
  }
  for (int index = current - 1; index >= target; --index) RemoveWorker(index);
}

absl::Status LocalJob::AddWorkers(int from, int to) {
  // Every new worker's port first: each one's TF_CONFIG names all of them.
  std::vector<std::unique_ptr<Task>> added;
  api::LoopbackAddresses ids([](api::ReplicaType, int) { return 0; });
  ASSIGN_OR_RETURN(PortClaims claims, ClaimFreeLoopbackPorts(2 * (to - from)));
  const std::vector<int> free = claims.ports();
  port_claims_.Add(std::move(claims));
  for (const api::Task& t : api::Tasks(job_, ids)) {
    if (t.type != api::ReplicaType::kWorker || t.index < from || t.index >= to) continue;
    added.push_back(NewTask(t, free[2 * (t.index - from)], free[2 * (t.index - from) + 1]));
  }
  for (auto& task : added) {
    std::string gpu;
    if (!options_.gpus.empty()) {
      const size_t trainers = std::count_if(tasks_.begin(), tasks_.end(), [](const auto& t) {
        return t->task.type != api::ReplicaType::kPS;
      });
      gpu = options_.gpus[trainers % options_.gpus.size()];
    }
    RETURN_IF_ERROR(Configure(*task, gpu));
    RETURN_IF_ERROR(StartTask(*task));
    tasks_.push_back(std::move(task));
  }
  return absl::OkStatus();
}

void LocalJob::RemoveWorker(int index) {
  auto it = std::find_if(tasks_.begin(), tasks_.end(), [&](const auto& t) {
    return t->task.type == api::ReplicaType::kWorker && t->task.index == index;
  });
  if (it == tasks_.end()) return;
  Task& t = **it;
  // It leaves the ps's membership on SIGTERM, and the steps go on without it.
  if (t.process && !t.process->Poll()) t.process->Signal(SIGTERM);
  const absl::Time deadline = absl::Now() + options_.grace_period;
  while (t.process && !t.process->Poll() && absl::Now() < deadline) {
    PumpOutput(absl::Milliseconds(50));
  }
  if (t.process) {
    std::string rest;
    t.process->ReadOutput(&rest);  // all it wrote (common/process.h)
    Emit(t, rest, /*flush=*/true);
  }
  Say(absl::StrCat("Removed ", t.label));
  ports_.erase({t.task.type, t.task.index});
  tasks_.erase(it);
}

absl::Status LocalJob::StartTask(Task& task) {
  absl::StatusOr<std::unique_ptr<Process>> p = Process::Start(task.process_options);
  if (!p.ok())
    return absl::Status(p.status().code(), absl::StrCat(task.label, ": ", p.status().message()));
  task.process = std::move(*p);
  task.phase = Task::Phase::kRunning;
  ++task.incarnation;
  Say(absl::StrCat("Started ", task.label, " pid=", task.process->pid(),
                   " address=", task.task.address, " metrics=127.0.0.1:", task.metrics_port,
                   task.gpu.empty() ? "" : absl::StrCat(" gpu=", task.gpu),
                   task.cpus.empty() ? "" : absl::StrCat(" cpus=", task.cpus),
                   task.restarts ? absl::StrCat(" restart=", task.restarts) : ""));
  return absl::OkStatus();
}

void LocalJob::Emit(Task& task, absl::string_view chunk, bool flush) {
  task.partial.append(chunk.data(), chunk.size());
  size_t start = 0;
  while (true) {
    size_t nl = task.partial.find('\n', start);
    if (nl == std::string::npos) break;
    absl::string_view line(task.partial.data() + start, nl - start);
    out_ << absl::StrFormat("%-*s | ", prefix_width_, task.label) << line << '\n';
    if (task.task.chief && task.progress.Observe(line)) progress_dirty_ = true;
    start = nl + 1;
  }
  task.partial.erase(0, start);
  if (flush && !task.partial.empty()) {
    out_ << absl::StrFormat("%-*s | ", prefix_width_, task.label) << task.partial << '\n';
    if (task.task.chief) task.progress.Observe(task.partial);
    task.partial.clear();
  }
  out_.flush();
}

void LocalJob::PumpOutput(absl::Duration timeout) {
  std::vector<pollfd> fds;
  std::vector<Task*> owners;
  for (auto& t : tasks_) {
    if (t->process && t->process->output_fd() >= 0) {
      fds.push_back({t->process->output_fd(), POLLIN, 0});
      owners.push_back(t.get());
    }
  }
  if (fds.empty()) {
    absl::SleepFor(timeout);
    return;
  }
  if (poll(fds.data(), fds.size(), absl::ToInt64Milliseconds(timeout)) <= 0) return;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    std::string chunk;
    bool open = owners[i]->process->ReadOutput(&chunk);
    Emit(*owners[i], chunk, !open);
  }
}

void LocalJob::HandleExits() {
  for (auto& t : tasks_) {
    if (t->phase != Task::Phase::kRunning || !t->process->Poll()) continue;
    std::string rest;
    t->process->ReadOutput(&rest);  // all it wrote (common/process.h)
    Emit(*t, rest, /*flush=*/true);
    t->exit_code = *t->process->exit_code();
    t->phase = t->exit_code == 0 ? Task::Phase::kSucceeded : Task::Phase::kFailed;
    Say(absl::StrCat(t->label, " ", api::DescribeExit(t->exit_code)));
  }
}

std::vector<api::TaskState> LocalJob::Observe() const {
  std::vector<api::TaskState> states;
  for (const auto& t : tasks_) {
    api::TaskState s{.type = t->task.type,
                     .index = t->task.index,
                     .chief = t->task.chief,
                     .restart_policy = t->task.restart_policy,
                     .name = t->label};
    switch (t->phase) {
      case Task::Phase::kWaiting:
        break;
      case Task::Phase::kRunning:
        s.phase = api::TaskPhase::kRunning;
        break;
      case Task::Phase::kSucceeded:
        s.phase = api::TaskPhase::kSucceeded;
        break;
      case Task::Phase::kFailed:
        s.phase = api::TaskPhase::kFailed;
        s.exit_code = t->exit_code;
        break;
    }
    if (s.phase != api::TaskPhase::kAbsent) s.id = absl::StrCat(t->label, "#", t->incarnation);
    states.push_back(std::move(s));
  }
  return states;
}

void LocalJob::Decide() {
  api::JobDecision d = api::DecideJob(job_, Observe(), ledger_, absl::Now());
  ledger_ = d.ledger;
  const api::RunPolicy& rp = job_.spec.run_policy;
  const int limit = rp.backoff_limit.value_or(api::kDefaultBackoffLimit);
  switch (d.verdict) {
    case api::Verdict::kNone:
      break;
    case api::Verdict::kSucceeded:
      if (job_.spec.success_policy == api::SuccessPolicy::kAllWorkers) {
        Finish(true, "Succeeded", "every worker exited 0");
      } else {
        std::string chief;
        for (const auto& t : tasks_) {
          if (t->task.chief) chief = t->label;
        }
        Finish(true, "Succeeded", absl::StrCat("the chief (", chief, ") exited 0"));
      }
      return;
    case api::Verdict::kFailed:
      Finish(false, "Failed",
             absl::StrCat(d.culprit->name, " ", api::DescribeExit(d.culprit->exit_code),
                          ", which restartPolicy ", api::Name(d.culprit->restart_policy),
                          " does not retry"));
      return;
    case api::Verdict::kBackoffLimitExceeded:
      Finish(false, "BackoffLimitExceeded",
             absl::StrCat(d.culprit->name, " ", api::DescribeExit(d.culprit->exit_code), " after ",
                          api::TotalRestarts(ledger_), " restarts; backoffLimit is ", limit));
      return;
    case api::Verdict::kDeadlineExceeded:
      Finish(false, "DeadlineExceeded",
             absl::StrCat("the job ran longer than activeDeadlineSeconds (",
                          rp.active_deadline_seconds.value_or(0), ")"));
      return;
  }
  if (d.whole_job && !d.stop.empty()) {
    const api::TaskState& why = d.restarted.empty() ? d.stop.front() : d.restarted.front();
    RestartJob(absl::StrCat(why.name, " ", api::DescribeExit(why.exit_code)));
  } else {
    for (const api::TaskState& s : d.stop) {
      Task& task = *tasks_[TaskIndex(s)];
      absl::Duration delay =
          std::min(options_.restart_delay * (1 << std::min(task.restarts, 5)), absl::Seconds(30));
      task.phase = Task::Phase::kWaiting;
      task.restart_at = absl::Now() + delay;
      task.process.reset();
      Say(absl::StrCat("Restarting ", task.label, " in ", absl::FormatDuration(delay), " (restart ",
                       api::TotalRestarts(ledger_), " of backoffLimit ", limit, ")"));
    }
  }
  for (const api::TaskState& s : d.start) {
    Task& task = *tasks_[TaskIndex(s)];
    if (task.phase != Task::Phase::kWaiting || absl::Now() < task.restart_at) continue;
    ++task.restarts;
    absl::Status started = StartTask(task);
    if (!started.ok()) {
      Finish(false, "Failed", std::string(started.message()));
      return;
    }
  }
}

size_t LocalJob::TaskIndex(const api::TaskState& s) const {
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (tasks_[i]->task.type == s.type && tasks_[i]->task.index == s.index) return i;
  }
  return 0;  // unreachable: every state was observed from tasks_
}

void LocalJob::RestartJob(absl::string_view why) {
  Say(absl::StrCat("Restarting every task (restartScope Job): ", why));
  for (auto& t : tasks_) {
    if (t->process && !t->process->exit_code()) t->process->Signal(SIGTERM);
  }
  absl::Time deadline = absl::Now() + options_.grace_period;
  for (auto& t : tasks_) {
    while (t->process && !t->process->Poll() && absl::Now() < deadline)
      PumpOutput(absl::Milliseconds(50));
    if (t->process) {
      std::string rest;               // what it wrote before it stopped is still shown
      t->process->ReadOutput(&rest);  // all it wrote (common/process.h)
      Emit(*t, rest, /*flush=*/true);
    }
    t->process.reset();
    t->phase = Task::Phase::kWaiting;
    t->restart_at = absl::Now() + options_.restart_delay;
  }
}

void LocalJob::Finish(bool succeeded, std::string reason, std::string message) {
  if (result_) return;
  result_ = JobResult{succeeded,
                      std::move(reason),
                      std::move(message),
                      api::TotalRestarts(ledger_),
                      absl::Now() - start_,
                      std::nullopt};
}

void LocalJob::StopAll(bool graceful) {
  absl::Time deadline = absl::Now() + options_.grace_period;
  if (graceful) {
    // After success the ps tasks and other workers end on their own; give them the grace period.
    while (absl::Now() < deadline) {
      bool running = false;
      for (auto& t : tasks_) running |= t->process && !t->process->Poll();
      if (!running) break;
      PumpOutput(absl::Milliseconds(100));
    }
    deadline = absl::Now() + options_.grace_period;
  }
  for (auto& t : tasks_) {
    if (t->process && !t->process->Poll()) t->process->Signal(SIGTERM);
  }
  for (auto& t : tasks_) {
    while (t->process && !t->process->Poll() && absl::Now() < deadline) {
      PumpOutput(absl::Milliseconds(50));
    }
    if (t->process && !t->process->Poll()) {
      Say(absl::StrCat("Killed ", t->label, ": still running ",
                       absl::FormatDuration(options_.grace_period), " after SIGTERM"));
    }
    if (t->process) {
      std::string rest;
      t->process->ReadOutput(&rest);  // all it wrote (common/process.h)
      Emit(*t, rest, true);
    }
    t->process.reset();
  }
}

void LocalJob::MaybePrintProgress(bool force) {
  absl::Time now = absl::Now();
  if (!force && !(progress_dirty_ && now - last_progress_print_ >= options_.progress_interval))
    return;
  for (auto& t : tasks_) {
    if (!t->task.chief || !t->progress.has_progress()) continue;
    Say(absl::StrCat("progress ", t->progress.Summary(),
                     " elapsed=", absl::StrFormat("%.0fs", absl::ToDoubleSeconds(now - start_))));
  }
  last_progress_print_ = now;
  progress_dirty_ = false;
}

absl::StatusOr<JobResult> LocalJob::Run(const std::atomic<bool>& stop) {
  start_ = absl::Now();
  absl::Status prepared = Prepare(stop);
  if (!prepared.ok()) return prepared;
  if (!stop.load()) {
    Say(absl::StrCat("Running TrainingJob ", job_.metadata.name, ": ", tasks_.size(), " tasks"));
  }
  for (auto& t : tasks_) {
    if (stop.load()) {
      Finish(false, "Interrupted", "stopped by signal");
      break;
    }
    absl::Status s = StartTask(*t);
    if (!s.ok()) {
      StopAll(false);
      return s;
    }
  }
  ledger_.start = start_;
  if (job_.spec.elastic && options_.scale != nullptr && !stop.load()) {
    Say(absl::StrCat("Elastic job: kill -USR1 ", getpid(), " adds a worker, kill -USR2 ", getpid(),
                     " removes the last one"));
  }
  while (!result_) {
    PumpOutput(absl::Milliseconds(100));
    ApplyScaleRequests();
    HandleExits();
    Decide();  // the job-outcome policy: success, failure, restarts, the deadline
    if (result_) break;
    MaybePrintProgress(false);
    if (stop.load()) Finish(false, "Interrupted", "stopped by signal");
  }
  StopAll(/*graceful=*/result_->succeeded);
  if (progress_dirty_) MaybePrintProgress(/*force=*/true);
  for (auto& t : tasks_) {
    if (!t->task.chief) continue;
    if (t->progress.completion()) result_->summary = t->progress.completion();
    if (!t->progress.summary_dir().empty()) {
      Say(absl::StrCat("TensorBoard: tensorboard --logdir ", t->progress.summary_dir()));
    }
  }
  result_->wall = absl::Now() - start_;
  return *result_;
}

}  // namespace kubetrain::local
