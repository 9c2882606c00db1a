#include "operator/api/outcome.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "operator/api/restart.h"

namespace kubetrain::api {
namespace {

bool Present(const TaskState& t) { return t.phase != TaskPhase::kAbsent; }

bool SuccessPolicyMet(const TrainingJob& job, const std::map<ReplicaType, std::set<int>>& done) {
  const auto& specs = job.spec.replica_specs;
  auto completed = [&](ReplicaType type) -> const std::set<int>& {
    static const std::set<int> kNone;
    auto it = done.find(type);
    return it == done.end() ? kNone : it->second;
  };
  if (job.spec.success_policy == SuccessPolicy::kAllWorkers) {
    // Only the indexes the job has now: an elastic job's scaled-down Workers never count.
    for (ReplicaType type : {ReplicaType::kChief, ReplicaType::kWorker}) {
      auto it = specs.find(type);
      if (it == specs.end()) continue;
      const int replicas = it->second.replicas.value_or(1);
      const std::set<int>& done = completed(type);
      if (std::distance(done.begin(), done.lower_bound(replicas)) < replicas) return false;
    }
    return true;
  }
  ReplicaType chief = specs.count(ReplicaType::kChief) ? ReplicaType::kChief : ReplicaType::kWorker;
  return completed(chief).count(0) > 0;
}

}  // namespace

std::string BackoffKey(const TaskState& t) { return absl::StrCat(TaskType(t.type), "-", t.index); }

absl::Duration BackoffDelay(const RestartBackoff& policy, int failures) {
  absl::Duration delay = policy.initial;
  for (int i = 1; i < failures && delay < policy.max; ++i) delay *= 2;
  return std::min(delay, policy.max);
}

int TotalRestarts(const JobLedger& ledger) {
  int total = 0;
  for (const auto& [type, n] : ledger.restarts) total += n;
  return total;
}

JobDecision DecideJob(const TrainingJob& job, const std::vector<TaskState>& tasks,
                      const JobLedger& ledger, absl::Time now, const RestartBackoff& backoff) {
  JobDecision d;
  d.ledger = ledger;
  const RunPolicy& rp = job.spec.run_policy;
  d.whole_job = rp.restart_scope == RestartScope::kJob;

  // A back-off whose replacement has been up for reset_after is over: forgotten, so the task's
  // next failure pauses it for `initial` again.
  auto ready_at = [&](const TaskBackoff& b) {
    return b.last_failure + BackoffDelay(backoff, b.failures);
  };
  std::erase_if(d.ledger.backoff, [&](const auto& entry) {
    return backoff.initial <= absl::ZeroDuration() ||
           now - ready_at(entry.second) >= backoff.reset_after;
  });
  auto failed_now = [&](const std::string& key) {
    if (backoff.initial <= absl::ZeroDuration()) return;
    TaskBackoff& b = d.ledger.backoff[key];
    ++b.failures;
    b.last_failure = now;
  };
  // Whether an absent task may start now; if not, it waits (JobDecision::waiting).
  auto may_start = [&](const TaskState& t) {
    auto it = d.ledger.backoff.find(d.whole_job ? kJobBackoffKey : BackoffKey(t));
    if (it == d.ledger.backoff.end() || now >= ready_at(it->second)) return true;
    d.waiting.push_back({t, ready_at(it->second)});
    return false;
  };

  // Counted incarnations that are gone can never be seen again.
  std::set<std::string> present;
  for (const TaskState& t : tasks) {
    if (Present(t) && !t.id.empty()) present.insert(t.id);
  }
  std::vector<std::string>& counted_ids = d.ledger.counted;
  counted_ids.erase(std::remove_if(counted_ids.begin(), counted_ids.end(),
                                   [&](const std::string& id) { return !present.count(id); }),
                    counted_ids.end());
  const std::set<std::string> counted(counted_ids.begin(), counted_ids.end());

  // Observe: what each task's state means under its restart policy.
  bool restart_under_way = false;  // an incarnation of a counted whole-job restart is still here
  std::vector<TaskState> retry;    // failed tasks to restart, counted or not
  std::vector<TaskState> fresh;    // ... whose failure is not counted yet
  std::optional<TaskState> fatal;
  for (const TaskState& t : tasks) {
    const bool is_counted = !t.id.empty() && counted.count(t.id);
    if (d.whole_job && is_counted) restart_under_way = true;
    switch (t.phase) {
      case TaskPhase::kAbsent:
      case TaskPhase::kGoing:
        break;
      case TaskPhase::kPending:
      case TaskPhase::kRunning:
        ++d.active[t.type];
        d.chief_running |= t.chief && t.phase == TaskPhase::kRunning;
        break;
      case TaskPhase::kSucceeded:
        // A task that finished before its job restarted as a whole belongs to the old run.
        if (!is_counted) d.ledger.completed[t.type].insert(t.index);
        break;
      case TaskPhase::kFailed:
        ++d.failed[t.type];
        if (is_counted) {
          retry.push_back(t);  // its restart is counted (or its job's is): only stop it
          break;
        }
        switch (DecideExit(t.restart_policy, t.exit_code)) {
          case ExitAction::kSucceeded:
            d.ledger.completed[t.type].insert(t.index);
            break;
          case ExitAction::kRestart:
            retry.push_back(t);
            fresh.push_back(t);
            break;
          case ExitAction::kFail:
            if (!fatal) fatal = t;
            break;
        }
        break;
    }
  }

  // Decide, in order: a failure no policy retries, the success policy, the deadline, restarts.
  std::optional<absl::Time> deadline;
  if (rp.active_deadline_seconds && ledger.start != absl::InfinitePast()) {
    deadline = ledger.start + absl::Seconds(*rp.active_deadline_seconds);
  }
  if (fatal) {
    d.verdict = Verdict::kFailed;
    d.culprit = fatal;
  } else if (SuccessPolicyMet(job, d.ledger.completed)) {
    d.verdict = Verdict::kSucceeded;
  } else if (deadline && now >= *deadline) {
    d.verdict = Verdict::kDeadlineExceeded;
  }
  if (d.verdict != Verdict::kNone) return d;
  d.deadline = deadline;

  if (!fresh.empty()) {
    const int needed = d.whole_job ? 1 : static_cast<int>(fresh.size());
    const int limit = rp.backoff_limit.value_or(kDefaultBackoffLimit);
    if (TotalRestarts(d.ledger) + needed > limit) {
      d.verdict = Verdict::kBackoffLimitExceeded;
      d.culprit = fresh.front();
      d.deadline.reset();
      return d;
    }
    d.restarted = fresh;
    if (d.whole_job) {
      // One restart of the whole job, however many tasks failed; it covers every incarnation
      // there is now (a peer that fails on its own before it is stopped is part of it), and
      // the restarted job runs every task again, finished ones too.
      ++d.ledger.restarts[fresh.front().type];
      failed_now(kJobBackoffKey);
      for (const TaskState& t : tasks) {
        if (Present(t) && !t.id.empty() && !counted.count(t.id)) counted_ids.push_back(t.id);
      }
      d.ledger.completed.clear();
      restart_under_way = true;
    } else {
      for (const TaskState& t : fresh) {
        ++d.ledger.restarts[t.type];
        failed_now(BackoffKey(t));
        if (!t.id.empty()) counted_ids.push_back(t.id);
      }
    }
  }

  // Act: what to stop and what to start.
  if (d.whole_job && restart_under_way) {
    for (const TaskState& t : tasks) {
      if (Present(t) && t.phase != TaskPhase::kGoing) d.stop.push_back(t);
    }
    return d;  // the job starts again once every old incarnation is gone
  }
  d.stop = retry;
  for (const TaskState& t : tasks) {
    if (t.phase != TaskPhase::kAbsent) continue;
    auto done = d.ledger.completed.find(t.type);
    if (done != d.ledger.completed.end() && done->second.count(t.index)) continue;
    if (may_start(t)) d.start.push_back(t);
  }
  return d;
}

}  // namespace kubetrain::api
