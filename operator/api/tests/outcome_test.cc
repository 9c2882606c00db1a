#include "operator/api/outcome.h"

#include <gtest/gtest.h>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "operator/api/decode.h"
#include "operator/api/render.h"
#include "operator/api/tests/test_util.h"
#include "operator/api/validation.h"

namespace kubetrain::api {
namespace {

using nlohmann::json;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

// The job's tasks in `states`: "worker-1=F137" is worker 1, failed with code 137. Phases: A
// absent, P pending, R running, S succeeded, F<code> failed, G going; "@id" names the
// incarnation (default "<task>#1"). Tasks not named are absent.
std::vector<TaskState> Observe(const TrainingJob& job, const std::string& states) {
  std::map<std::string, std::string> given;
  for (absl::string_view token : absl::StrSplit(states, ' ', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(token, '=');
    given[kv.first] = kv.second;
  }
  LoopbackAddresses ports([](ReplicaType, int) { return 2222; });
  std::vector<TaskState> tasks;
  for (const Task& task : Tasks(job, ports)) {
    TaskState t{.type = task.type,
                .index = task.index,
                .chief = task.chief,
                .restart_policy = task.restart_policy,
                .name = TaskType(task.type) + "-" + std::to_string(task.index)};
    auto it = given.find(t.name);
    if (it != given.end()) {
      std::string state = it->second;
      std::string id = t.name + "#1";
      if (size_t at = state.find('@'); at != std::string::npos) {
        id = state.substr(at + 1);
        state.resize(at);
      }
      switch (state[0]) {
        case 'P':
          t.phase = TaskPhase::kPending;
          break;
        case 'R':
          t.phase = TaskPhase::kRunning;
          break;
        case 'S':
          t.phase = TaskPhase::kSucceeded;
          break;
        case 'G':
          t.phase = TaskPhase::kGoing;
          break;
        case 'F':
          t.phase = TaskPhase::kFailed;
          t.exit_code = std::stoi(state.substr(1));
          break;
        default:
          break;
      }
      if (t.phase != TaskPhase::kAbsent) t.id = id;
    }
    tasks.push_back(t);
  }
  return tasks;
}

std::string Names(const std::vector<TaskState>& tasks) {
  std::vector<std::string> names;
  for (const TaskState& t : tasks) names.push_back(t.name);
  return absl::StrJoin(names, " ");
}

std::string Completed(const JobLedger& l) {
  std::vector<std::string> parts;
  for (const auto& [type, indexes] : l.completed) {
    if (!indexes.empty()) parts.push_back(TaskType(type) + ":" + FormatIndexSet(indexes));
  }
  return absl::StrJoin(parts, " ");
}

std::string Restarts(const JobLedger& l) {
  std::vector<std::string> parts;
  for (const auto& [type, n] : l.restarts) {
    if (n) parts.push_back(TaskType(type) + ":" + std::to_string(n));
  }
  return absl::StrJoin(parts, " ");
}

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kNone:
      return "none";
    case Verdict::kSucceeded:
      return "succeeded";
    case Verdict::kFailed:
      return "failed";
    case Verdict::kBackoffLimitExceeded:
      return "backoff";
    case Verdict::kDeadlineExceeded:
      return "deadline";
  }
  return "?";
}

struct Case {
  std::string name;
  // The job: ps and workers, then changes to spec (merged into the minimal job's spec).
  int ps;
  int workers;
  json spec;
  std::string states;
  // The ledger before: completed "worker:1", restarts, counted ids, seconds since the start.
  std::string completed_before;
  int restarts_before;
  std::vector<std::string> counted_before;
  // Expected.
  std::string verdict;
  std::string culprit;
  std::string completed;
  std::string restarts;
  std::string restarted;
  std::string stop;
  std::string start;
  std::vector<std::string> counted;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

TrainingJob MakeJob(const Case& c) {
  json doc = testing::MinimalJob(c.ps, c.workers);
  if (!c.spec.is_null()) doc["spec"].merge_patch(c.spec);
  FieldErrors errors;
  TrainingJob job = DecodeAndValidate(doc, &errors);
  EXPECT_TRUE(errors.empty()) << c.name << ": " << errors.front().ToString();
  return job;
}

const json kJobScope = {{"runPolicy", {{"restartScope", "Job"}}}};
const json kOnFailure = {{"replicaSpecs", {{"Worker", {{"restartPolicy", "OnFailure"}}}}}};

class DecideJobTable : public ::testing::TestWithParam<Case> {};

TEST_P(DecideJobTable, Decides) {
  const Case& c = GetParam();
  TrainingJob job = MakeJob(c);
  JobLedger before;
  before.start = kStart;
  if (!c.completed_before.empty()) {
    std::pair<std::string, std::string> kv = absl::StrSplit(c.completed_before, ':');
    before.completed[kv.first == "ps" ? ReplicaType::kPS : ReplicaType::kWorker] =
        ParseIndexSet(kv.second);
  }
  if (c.restarts_before) before.restarts[ReplicaType::kWorker] = c.restarts_before;
  before.counted = c.counted_before;
  JobDecision d = DecideJob(job, Observe(job, c.states), before, kStart + absl::Seconds(10));
  EXPECT_EQ(VerdictName(d.verdict), c.verdict);
  EXPECT_EQ(d.culprit ? d.culprit->name : "", c.culprit);
  EXPECT_EQ(Completed(d.ledger), c.completed);
  EXPECT_EQ(Restarts(d.ledger), c.restarts);
  EXPECT_EQ(Names(d.restarted), c.restarted);
  EXPECT_EQ(Names(d.stop), c.stop);
  EXPECT_EQ(Names(d.start), c.start);
  EXPECT_EQ(d.ledger.counted, c.counted);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, DecideJobTable,
    ::testing::Values(
        Case{.name = "NewJobStartsEveryTask",
             .ps = 1,
             .workers = 2,
             .verdict = "none",
             .start = "ps-0 worker-0 worker-1"},
        Case{.name = "RunningJobWaits",
             .ps = 1,
             .workers = 2,
             .states = "ps-0=R worker-0=R worker-1=P",
             .verdict = "none"},
        Case{.name = "ChiefExitZeroSucceeds",
             .ps = 1,
             .workers = 2,
             .states = "ps-0=R worker-0=S worker-1=R",
             .verdict = "succeeded",
             .completed = "worker:0"},
        Case{.name = "ChiefSuccessOutranksAPeersFailure",
             .workers = 2,
             .states = "worker-0=S worker-1=F137",
             .verdict = "succeeded",
             .completed = "worker:0"},
        Case{.name = "AllWorkersWaitsForEveryWorker",
             .workers = 2,
             .spec = {{"successPolicy", "AllWorkers"}},
             .states = "worker-0=S worker-1=R",
             .verdict = "none",
             .completed = "worker:0"},
        Case{.name = "AllWorkersCountsCompletionsWhosePodsAreGone",
             .workers = 2,
             .spec = {{"successPolicy", "AllWorkers"}},
             .states = "worker-0=S",
             .completed_before = "worker:1",
             .verdict = "succeeded",
             .completed = "worker:0-1"},
        // An elastic job scaled down from 3 Workers to 2: worker-2's completion is not one of
        // the job's indexes any more.
        Case{.name = "AllWorkersCountsOnlyTheIndexesTheJobHasNow",
             .ps = 1,
             .workers = 2,
             .spec = {{"successPolicy", "AllWorkers"},
                      {"elastic", {{"minReplicas", 1}, {"maxReplicas", 3}}}},
             .states = "ps-0=R worker-0=S worker-1=R",
             .completed_before = "worker:2",
             .verdict = "none",
             .completed = "worker:0,2"},
        Case{.name = "CompletedIndexIsNeverStartedAgain",
             .workers = 2,
             .spec = {{"successPolicy", "AllWorkers"}},
             .states = "worker-0=R",
             .completed_before = "worker:1",
             .verdict = "none",
             .completed = "worker:1"},
        Case{.name = "ExitCodePolicyFailsOnAProgramError",
             .ps = 1,
             .workers = 2,
             .states = "ps-0=R worker-0=R worker-1=F3",
             .verdict = "failed",
             .culprit = "worker-1"},
        Case{.name = "ExitCodePolicyRestartsAKilledTask",
             .ps = 1,
             .workers = 2,
             .states = "ps-0=R worker-0=R worker-1=F137",
             .verdict = "none",
             .restarts = "worker:1",
             .restarted = "worker-1",
             .stop = "worker-1",
             .counted = {"worker-1#1"}},
        Case{.name = "ACountedFailureIsOnlyStopped",
             .ps = 1,
             .workers = 2,
             .states = "ps-0=R worker-0=R worker-1=F137",
             .restarts_before = 1,
             .counted_before = {"worker-1#1"},
             .verdict = "none",
             .restarts = "worker:1",
             .stop = "worker-1",
             .counted = {"worker-1#1"}},
        Case{.name = "AGoingTaskIsNeitherCountedNorReplaced",
             .ps = 1,
             .workers = 2,
             .states = "ps-0=R worker-0=R worker-1=G",
             .restarts_before = 1,
             .counted_before = {"worker-1#1"},
             .verdict = "none",
             .restarts = "worker:1",
             .counted = {"worker-1#1"}},
        Case{.name = "AGoneTaskIsStartedAgainAndItsCountDropped",
             .ps = 1,
             .workers = 2,
             .states = "ps-0=R worker-0=R",
             .restarts_before = 1,
             .counted_before = {"worker-1#1"},
             .verdict = "none",
             .restarts = "worker:1",
             .start = "worker-1"},
        Case{.name = "PodScopeCountsEachFailure",
             .ps = 1,
             .workers = 2,
             .spec = kOnFailure,
             .states = "ps-0=R worker-0=F1 worker-1=F2",
             .verdict = "none",
             .restarts = "worker:2",
             .restarted = "worker-0 worker-1",
             .stop = "worker-0 worker-1",
             .counted = {"worker-0#1", "worker-1#1"}},
        Case{.name = "BackoffLimitEndsRestarts",
             .workers = 1,
             .spec = {{"runPolicy", {{"backoffLimit", 2}}}},
             .states = "worker-0=F137",
             .restarts_before = 2,
             .verdict = "backoff",
             .culprit = "worker-0",
             .restarts = "worker:2"},
        Case{.name = "BackoffLimitCountsEveryFailureOfOnePass",
             .workers = 2,
             .spec = {{"runPolicy", {{"backoffLimit", 1}}}},
             .states = "worker-0=F137 worker-1=F137",
             .verdict = "backoff",
             .culprit = "worker-0"},
        Case{.name = "JobScopeStopsEveryTaskAndCountsOneRestart",
             .ps = 1,
             .workers = 2,
             .spec = kJobScope,
             .states = "ps-0=R worker-0=R worker-1=F137",
             .verdict = "none",
             .restarts = "worker:1",
             .restarted = "worker-1",
             .stop = "ps-0 worker-0 worker-1",
             .counted = {"ps-0#1", "worker-0#1", "worker-1#1"}},
        // An all-reduce job whose worker 1 finished its last step just before the chief died:
        // the restarted job needs worker 1 again, or the chief waits for it for ever.
        Case{.name = "JobScopeRunsFinishedTasksAgain",
             .workers = 2,
             .spec = kJobScope,
             .states = "worker-0=F137 worker-1=S",
             .completed_before = "worker:1",
             .verdict = "none",
             .restarts = "worker:1",
             .restarted = "worker-0",
             .stop = "worker-0 worker-1",
             .counted = {"worker-0#1", "worker-1#1"}},
        // The operator died after writing that restart and before deleting the pods: the
        // finished worker belongs to the old run, the chief's failure is not counted again.
        Case{.name = "JobScopeRestartCountedBeforeAnOperatorRestart",
             .workers = 2,
             .spec = kJobScope,
             .states = "worker-0=F137 worker-1=S",
             .restarts_before = 1,
             .counted_before = {"worker-0#1", "worker-1#1"},
             .verdict = "none",
             .restarts = "worker:1",
             .stop = "worker-0 worker-1",
             .counted = {"worker-0#1", "worker-1#1"}},
        Case{.name = "JobScopePeerFailingAfterTheCountIsPartOfIt",
             .workers = 2,
             .spec = kJobScope,
             .states = "worker-0=G worker-1=F1",
             .restarts_before = 1,
             .counted_before = {"worker-0#1", "worker-1#1"},
             .verdict = "none",
             .restarts = "worker:1",
             .stop = "worker-1",
             .counted = {"worker-0#1", "worker-1#1"}},
        Case{.name = "JobScopeStartsOnlyOnceEveryOldTaskIsGone",
             .workers = 2,
             .spec = kJobScope,
             .states = "worker-1=G",
             .restarts_before = 1,
             .counted_before = {"worker-0#1", "worker-1#1"},
             .verdict = "none",
             .restarts = "worker:1",
             .counted = {"worker-1#1"}},
        Case{.name = "JobScopeStartsAgainWhenAllAreGone",
             .workers = 2,
             .spec = kJobScope,
             .restarts_before = 1,
             .counted_before = {"worker-0#1", "worker-1#1"},
             .verdict = "none",
             .restarts = "worker:1",
             .start = "worker-0 worker-1"},
        Case{.name = "DeadlineEndsTheJob",
             .workers = 1,
             .spec = {{"runPolicy", {{"activeDeadlineSeconds", 5}}}},
             .states = "worker-0=R",
             .verdict = "deadline"},
        Case{.name = "DeadlineOutranksARestart",
             .workers = 1,
             .spec = {{"runPolicy", {{"activeDeadlineSeconds", 5}}}},
             .states = "worker-0=F137",
             .verdict = "deadline"}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(DecideJob, ReportsTheDeadlineAndCountsBeforeIt) {
  json doc = testing::MinimalJob(1, 2);
  doc["spec"]["runPolicy"]["activeDeadlineSeconds"] = 60;
  FieldErrors errors;
  TrainingJob job = DecodeAndValidate(doc, &errors);
  ASSERT_TRUE(errors.empty());
  JobLedger ledger;
  ledger.start = kStart;
  JobDecision d = DecideJob(job, Observe(job, "ps-0=R worker-0=R worker-1=P"), ledger,
                            kStart + absl::Seconds(10));
  ASSERT_TRUE(d.deadline.has_value());
  EXPECT_EQ(*d.deadline, kStart + absl::Seconds(60));
  EXPECT_EQ(d.active[ReplicaType::kWorker], 2);
  EXPECT_EQ(d.active[ReplicaType::kPS], 1);
  EXPECT_TRUE(d.chief_running);
  // No start yet (a job not yet started): no deadline.
  EXPECT_FALSE(DecideJob(job, Observe(job, ""), JobLedger{}, kStart).deadline.has_value());
}

TEST(DecideJob, ExplicitChiefDecidesSuccess) {
  json doc = testing::MinimalJob(1, 2, /*chief=*/true);
  FieldErrors errors;
  TrainingJob job = DecodeAndValidate(doc, &errors);
  ASSERT_TRUE(errors.empty());
  JobLedger ledger;
  EXPECT_EQ(DecideJob(job, Observe(job, "chief-0=R worker-0=S"), ledger, kStart).verdict,
            Verdict::kNone);
  EXPECT_EQ(DecideJob(job, Observe(job, "chief-0=S worker-0=R"), ledger, kStart).verdict,
            Verdict::kSucceeded);
}

TEST(DecideJob, BackoffDelayDoublesToItsCap) {
  const RestartBackoff& b = kOperatorRestartBackoff;
  EXPECT_EQ(BackoffDelay(b, 1), absl::Seconds(10));
  EXPECT_EQ(BackoffDelay(b, 3), absl::Seconds(40));
  EXPECT_EQ(BackoffDelay(b, 6), absl::Seconds(320));
  EXPECT_EQ(BackoffDelay(b, 7), absl::Minutes(6));
  EXPECT_EQ(BackoffDelay(b, 1000), absl::Minutes(6));
}

// A task whose failure is counted is replaced only once its back-off has run: 10 s after the
// first failure, 20 s after the second; the other tasks are not held back.
TEST(DecideJob, ACountedFailureWaitsOutItsBackoffBeforeTheTaskStartsAgain) {
  json doc = testing::MinimalJob(1, 2);
  FieldErrors errors;
  TrainingJob job = DecodeAndValidate(doc, &errors);
  ASSERT_TRUE(errors.empty());
  const RestartBackoff& b = kOperatorRestartBackoff;
  JobDecision d =
      DecideJob(job, Observe(job, "ps-0=R worker-0=R worker-1=F137"), JobLedger{}, kStart, b);
  EXPECT_EQ(Names(d.restarted), "worker-1");
  ASSERT_EQ(d.ledger.backoff.count("worker-1"), 1u);
  EXPECT_EQ(d.ledger.backoff["worker-1"].failures, 1);
  // Gone, but its back-off runs: not started, waiting until 10 s after the failure.
  d = DecideJob(job, Observe(job, "ps-0=R worker-0=R"), d.ledger, kStart + absl::Seconds(9), b);
  EXPECT_EQ(Names(d.start), "");
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_EQ(d.waiting[0].task.name, "worker-1");
  EXPECT_EQ(d.waiting[0].until, kStart + absl::Seconds(10));
  d = DecideJob(job, Observe(job, "ps-0=R worker-0=R"), d.ledger, kStart + absl::Seconds(10), b);
  EXPECT_EQ(Names(d.start), "worker-1");
  EXPECT_TRUE(d.waiting.empty());
  // Its second failure, soon after: 20 s.
  absl::Time second = kStart + absl::Seconds(30);
  d = DecideJob(job, Observe(job, "ps-0=R worker-0=R worker-1=F137@w2"), d.ledger, second, b);
  EXPECT_EQ(d.ledger.backoff["worker-1"].failures, 2);
  d = DecideJob(job, Observe(job, "ps-0=R worker-0=R"), d.ledger, second + absl::Seconds(19), b);
  ASSERT_EQ(d.waiting.size(), 1u);
  EXPECT_EQ(d.waiting[0].until, second + absl::Seconds(20));
  // Without a back-off policy (kubetrain run's launcher), a task starts again at once.
  d = DecideJob(job, Observe(job, "ps-0=R worker-0=R"), d.ledger, second);
  EXPECT_EQ(Names(d.start), "worker-1");
}

// A replacement that ran healthily for reset_after since its back-off ended resets the count.
TEST(DecideJob, BackoffIsResetAfterAStretchOfHealthyRunning) {
  json doc = testing::MinimalJob(1, 2);
  FieldErrors errors;
  TrainingJob job = DecodeAndValidate(doc, &errors);
  ASSERT_TRUE(errors.empty());
  const RestartBackoff& b = kOperatorRestartBackoff;
  JobLedger ledger;
  ledger.backoff["worker-1"] = {.failures = 4, .last_failure = kStart};  // 80 s back-off
  absl::Time healthy = kStart + absl::Seconds(80) + absl::Minutes(10);
  JobDecision d = DecideJob(job, Observe(job, "ps-0=R worker-0=R worker-1=F137@w5"), ledger,
                            healthy - absl::Seconds(1), b);
  EXPECT_EQ(d.ledger.backoff["worker-1"].failures, 5);
  d = DecideJob(job, Observe(job, "ps-0=R worker-0=R worker-1=F137@w5"), ledger, healthy, b);
  EXPECT_EQ(d.ledger.backoff["worker-1"].failures, 1);
  // And a record whose time is up is dropped even without a failure.
  d = DecideJob(job, Observe(job, "ps-0=R worker-0=R worker-1=R@w5"), ledger, healthy, b);
  EXPECT_TRUE(d.ledger.backoff.empty());
}

// restartScope Job: one back-off for the job, however many tasks failed.
TEST(DecideJob, AWholeJobRestartWaitsOutTheJobsBackoff) {
  json doc = testing::MinimalJob(1, 2);
  doc["spec"]["runPolicy"]["restartScope"] = "Job";
  FieldErrors errors;
  TrainingJob job = DecodeAndValidate(doc, &errors);
  ASSERT_TRUE(errors.empty());
  const RestartBackoff& b = kOperatorRestartBackoff;
  JobDecision d =
      DecideJob(job, Observe(job, "ps-0=R worker-0=F137 worker-1=F137"), JobLedger{}, kStart, b);
  EXPECT_EQ(d.ledger.backoff.size(), 1u);
  EXPECT_EQ(d.ledger.backoff[kJobBackoffKey].failures, 1);
  d = DecideJob(job, Observe(job, ""), d.ledger, kStart + absl::Seconds(5), b);
  EXPECT_EQ(Names(d.start), "");
  EXPECT_EQ(d.waiting.size(), 3u);
  d = DecideJob(job, Observe(job, ""), d.ledger, kStart + absl::Seconds(10), b);
  EXPECT_EQ(Names(d.start), "ps-0 worker-0 worker-1");
}

}  // namespace
}  // namespace kubetrain::api
