// ChiefDuties over a scripted GradientExchange (no ps, no peers): when the chief evaluates,
// checkpoints and shuts down, and what its summary says; and, end to end against a real ps, that
// a chief resuming from a checkpoint writes no checkpoint at its first step.
#include "worker/runtime/chief_duties.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/testing/status_matchers.h"
#include "common/testing/temp_dir.h"
#include "ps/server.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/models.h"
#include "worker/runtime/trainer.h"
#include "worker/tests/fashion_mnist_fixture.h"
#include "worker/tests/file_size_limit.h"
#include "worker/tests/random_images.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::FreshTempDir;
using ::kubetrain::testing::IsOk;
using ::kubetrain::testing::StatusIs;
using ::kubetrain::worker::testing::FileSizeLimit;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A strategy whose step and answers the test sets, recording what ChiefDuties asks of it.
class ScriptedExchange : public GradientExchange {
 public:
  ScriptedExchange(Model& model, int64_t total_steps) : model_(model), total_(total_steps) {}

  absl::Status Setup() override { return absl::OkStatus(); }
  absl::StatusOr<int64_t> Start(ChiefDuties*) override { return step; }
  absl::Status LoadParameters() override {
    calls.push_back("load");
    return absl::OkStatus();
  }
  absl::StatusOr<ExchangedStep> Exchange(int64_t pos, float loss) override {
    return ExchangedStep{pos + 1, loss};
  }
  absl::StatusOr<Recovery> Recover(const absl::Status& failure, int64_t) override {
    return failure;
  }
  bool Done(int64_t pos) const override { return pos >= total_; }
  bool RunIsOver(const ps::ModelState& checkpoint) const override {
    return Done(checkpoint.global_step);
  }
  absl::Status EndTraining() override { return absl::OkStatus(); }
  void ShutDown() override { calls.push_back("shutdown"); }
  absl::StatusOr<ps::ModelState> Export() override {
    calls.push_back("export");
    ps::ModelState state;
    state.global_step = step + late_pushes;
    state.run_id = "scripted";
    std::vector<float> flat(model_.num_parameters());
    RETURN_IF_ERROR(model_.ReadValues(absl::MakeSpan(flat)));
    for (float& x : flat) x += 0.01f * late_pushes;  // what those pushes changed
    size_t offset = 0;
    for (Variable* v : model_.variables()) {
      state.variables.push_back(
          {v->name, {flat.begin() + offset, flat.begin() + offset + v->size()}, {}});
      offset += v->size();
    }
    return state;
  }
  int64_t global_step() const override { return step; }
  int examples_per_step() const override { return 32; }
  int64_t last_global_step() const override { return total_; }
  std::optional<uint64_t> parameter_checksum() const override { return checksum; }
  std::optional<EvalResult> shared_evaluation() const override { return together; }
  absl::Status AwaitParameters(bool) override { return absl::OkStatus(); }

  int64_t step = 0;
  // ps-async: other workers' pushes the ps applied since this worker's last exchange, which
  // Export sees and the model does not.
  int late_pushes = 0;
  std::optional<uint64_t> checksum;
  std::optional<EvalResult> together;  // all-reduce: the ranks' evaluation at EndTraining
  std::vector<std::string> calls;

 private:
  Model& model_;
  const int64_t total_;
};

// Collects the log lines written while it lives.
class LogCapture {
 public:
  LogCapture() {
    log::SetSink([this](absl::string_view line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { log::SetSink(nullptr); }

  int Count(const std::string& text) const {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const std::string& line : lines_) n += line.find(text) != std::string::npos;
    return n;
  }
  std::string Find(const std::string& text) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& line : lines_) {
      if (line.find(text) != std::string::npos) return line;
    }
    return "";
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

class ChiefDutiesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    test_ = RandomImages(40, 3);
    auto model = MakeModel("mlp", device_, 1);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    options_.epochs = 2;
    options_.checkpoint_dir =
        FreshTempDir(std::string("chief_duties_") +
                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // Runs the chief's after-step work for every step of the run, as the training loop does.
  absl::Status RunSteps(ChiefDuties& duties, ScriptedExchange& exchange) {
    duties.StartTraining();
    for (int64_t pos = exchange.step; !exchange.Done(pos);) {
      const int64_t epoch_before = pos / kStepsPerEpoch;
      exchange.step = ++pos;
      absl::Status s = duties.AfterStep(pos, epoch_before, 0.5f);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // The chief of a 1000-step run that checkpoints every second of `clock` and retries a failed
  // write after a second, doubling up to `max_retry`, until it has failed for `give_up_after`.
  std::unique_ptr<ChiefDuties> CheckpointingEverySecond(ScriptedExchange& exchange,
                                                        const FakeClock& clock,
                                                        absl::Duration max_retry,
                                                        absl::Duration give_up_after) {
    options_.checkpoint_every = absl::Seconds(1);
    auto duties = std::make_unique<ChiefDuties>(options_, *model_, exchange, 1000, nullptr, nullptr,
                                                absl::Now());
    duties->set_checkpoint_retry({.first_retry = absl::Seconds(1),
                                  .max_retry = max_retry,
                                  .give_up_after = give_up_after,
                                  .clock = &clock});
    return duties;
  }

  static constexpr int64_t kStepsPerEpoch = 10;
  CpuDevice device_;
  Dataset test_;
  std::unique_ptr<Model> model_;
  TrainerOptions options_;
};

TEST_F(ChiefDutiesTest, EvaluatesAtEveryEpochEndButTheLastWhichFinishEvaluates) {
  options_.epochs = 3;
  ScriptedExchange exchange(*model_, 3 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  LogCapture logs;
  ASSERT_THAT(RunSteps(duties, exchange), IsOk());
  ASSERT_THAT(duties.AwaitEvaluation(), IsOk());  // epoch 2's runs in the background
  EXPECT_EQ(logs.Count("msg=evaluation"), 2);
  EXPECT_NE(logs.Find("msg=evaluation step=10 epoch=1"), "");
  EXPECT_NE(logs.Find("msg=evaluation step=20 epoch=2"), "");
  auto summary = duties.Finish();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_NE(logs.Find("msg=evaluation step=30 epoch=3"), "");
  EXPECT_EQ(summary->steps, 30);
  EXPECT_EQ(summary->epochs, 3);
  EXPECT_EQ(summary->test_accuracy, duties.last_eval().accuracy);
  EXPECT_EQ(duties.last_eval().examples, 40);
}

// Training goes on while an epoch's evaluation runs (on the CPU): the evaluation describes the
// values at the epoch's end, not whatever the model holds when the evaluation gets to them.
TEST_F(ChiefDutiesTest, AnEpochsEvaluationDescribesTheValuesAtItsEndWhileTrainingGoesOn) {
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  const EvalResult at_epoch_end = *model_->Evaluate(test_);
  duties.StartTraining();
  exchange.step = kStepsPerEpoch;
  ASSERT_THAT(duties.AfterStep(kStepsPerEpoch, 0, 0.5f), IsOk());
  // The next steps change every value at once.
  std::vector<float> next(model_->num_parameters(), 0.0f);
  ASSERT_THAT(model_->WriteValues(next), IsOk());
  ASSERT_THAT(duties.AwaitEvaluation(), IsOk());
  EXPECT_EQ(duties.last_eval().examples, 40);
  EXPECT_EQ(duties.last_eval().loss, at_epoch_end.loss);
  EXPECT_EQ(duties.last_eval().accuracy, at_epoch_end.accuracy);
  EXPECT_NE(model_->Evaluate(test_)->loss, at_epoch_end.loss);  // the values did change
}

// All-reduce ranks leave no CPU idle for it: the chief evaluates before its next step.
TEST_F(ChiefDutiesTest, AnAllReduceChiefEvaluatesOnItsTrainingThread) {
  options_.mode = Mode::kAllReduce;
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  LogCapture logs;
  duties.StartTraining();
  exchange.step = kStepsPerEpoch;
  ASSERT_THAT(duties.AfterStep(kStepsPerEpoch, 0, 0.5f), IsOk());
  EXPECT_NE(logs.Find("msg=evaluation step=10 epoch=1"), "");
}

// A chief stopped (SIGTERM) during an epoch's evaluation does not wait for the whole test set.
TEST_F(ChiefDutiesTest, StoppingTheChiefCancelsTheEpochsEvaluation) {
  const Dataset large = RandomImages(20000, 5);
  options_.eval_batch = 1;  // 20,000 forward passes: far longer than stopping takes
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  LogCapture logs;
  absl::Time stopped;
  {
    ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &large, nullptr, absl::Now());
    duties.StartTraining();
    exchange.step = kStepsPerEpoch;
    ASSERT_THAT(duties.AfterStep(kStepsPerEpoch, 0, 0.5f), IsOk());
    stopped = absl::Now();
  }
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(1));
  EXPECT_EQ(logs.Count("msg=evaluation"), 0);
}

TEST_F(ChiefDutiesTest, NoPeriodicCheckpointIsDueBeforeThePeriodHasPassed) {
  options_.checkpoint_every = absl::Hours(1);
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  ASSERT_THAT(RunSteps(duties, exchange), IsOk());
  // Evaluations load the parameters; nothing was exported for a checkpoint.
  EXPECT_EQ(std::count(exchange.calls.begin(), exchange.calls.end(), "export"), 0);
  EXPECT_FALSE(std::filesystem::exists(options_.checkpoint_dir + "/ckpt-1.pb"));
}

TEST_F(ChiefDutiesTest, ACheckpointIsWrittenWhenThePeriodHasPassed) {
  options_.checkpoint_every = absl::ZeroDuration();
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  ASSERT_THAT(RunSteps(duties, exchange), IsOk());
  EXPECT_EQ(std::count(exchange.calls.begin(), exchange.calls.end(), "export"), 20);
  EXPECT_EQ(duties.Summary().checkpoint, options_.checkpoint_dir + "/ckpt-20.pb");
}

// Checkpoints that fail (over a file-size limit here, as on a full disk or in a folder made
// read-only): one warning, retries after doubling intervals, no partial file left, one line when
// they are written again and one when they fail again.
TEST_F(ChiefDutiesTest, FailingCheckpointsWarnOnceBackOffAndSayWhenTheyAreWrittenAgain) {
  FakeClock clock;
  ScriptedExchange exchange(*model_, 1000);
  auto duties = CheckpointingEverySecond(exchange, clock, absl::Seconds(8), absl::Hours(1));
  ASSERT_THAT(duties->SaveCheckpoint(), IsOk());  // step 0, as a new run writes
  LogCapture logs;
  duties->StartTraining();
  // `n` steps, a second each.
  auto steps = [&](int n) {
    for (int i = 0; i < n; ++i) {
      clock.Advance(absl::Seconds(1));
      ++exchange.step;
      ASSERT_THAT(duties->AfterStep(exchange.step, 0, 0.5f), IsOk());
    }
  };
  auto exports = [&] { return std::count(exchange.calls.begin(), exchange.calls.end(), "export"); };
  const auto exports_before = exports();
  {
    FileSizeLimit limit(4096);  // the manifest fits, a checkpoint does not
    steps(30);
  }
  // Tried at seconds 1, 2, 4, 8, 16 and 24: the interval doubles up to 8 s.
  EXPECT_EQ(exports() - exports_before, 6);
  EXPECT_EQ(logs.Count("level=warn"), 1);
  EXPECT_NE(logs.Find("msg=\"Checkpoint failed; training goes on\""), "");
  EXPECT_NE(logs.Find("File too large"), "");
  for (const auto& e : std::filesystem::directory_iterator(options_.checkpoint_dir)) {
    EXPECT_NE(e.path().extension(), ".tmp") << "partial file left behind: " << e.path();
  }
  EXPECT_EQ(duties->Summary().checkpoint, options_.checkpoint_dir + "/ckpt-0.pb");

  steps(2);  // second 32 retries, with room again
  EXPECT_EQ(logs.Count("msg=\"Checkpoints written again\""), 1);
  EXPECT_EQ(duties->Summary().checkpoint, options_.checkpoint_dir + "/ckpt-32.pb");
  steps(3);  // every second again
  EXPECT_EQ(duties->Summary().checkpoint, options_.checkpoint_dir + "/ckpt-35.pb");
  {
    FileSizeLimit limit(4096);
    steps(5);
  }
  EXPECT_EQ(logs.Count("level=warn"), 2);
  EXPECT_EQ(logs.Count("msg=\"Checkpoint writes are failing again; training goes on\""), 1);
}

// Checkpoints that keep failing stop the chief with an error that says why and from where a
// restart resumes, rather than let it train to the end with nothing to resume from.
TEST_F(ChiefDutiesTest, CheckpointsFailingForTooLongStopTheChiefWithAClearError) {
  FakeClock clock;
  ScriptedExchange exchange(*model_, 1000);
  auto duties = CheckpointingEverySecond(exchange, clock, absl::Seconds(1), absl::Seconds(10));
  ASSERT_THAT(duties->SaveCheckpoint(), IsOk());
  duties->StartTraining();
  absl::Status stopped;
  {
    FileSizeLimit limit(4096);
    while (stopped.ok() && exchange.step < 100) {
      clock.Advance(absl::Seconds(1));
      ++exchange.step;
      stopped = duties->AfterStep(exchange.step, 0, 0.5f);
    }
  }
  EXPECT_EQ(exchange.step, 11);  // failing since second 1, for 10 s
  EXPECT_THAT(
      stopped,
      StatusIs(absl::StatusCode::kUnavailable,
               AllOf(HasSubstr("checkpoints have failed for 10s (11 attempts since global step 1)"),
                     HasSubstr("File too large"),
                     HasSubstr("the last checkpoint written is " + options_.checkpoint_dir +
                               "/ckpt-0.pb (global step 0), where a restarted run resumes"),
                     HasSubstr("Free space in (or make writable) " + options_.checkpoint_dir))));
}

TEST_F(ChiefDutiesTest, FinishCheckpointsEvaluatesThatThenShutsDownAndReportsTheChecksum) {
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  exchange.step = 2 * kStepsPerEpoch;
  exchange.checksum = 0xabcdef0123456789ull;
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  LogCapture logs;
  auto summary = duties.Finish();
  ASSERT_TRUE(summary.ok()) << summary.status();
  // One read of the final state, saved and evaluated; no second read for the evaluation.
  EXPECT_EQ(exchange.calls, (std::vector<std::string>{"export", "shutdown"}));
  EXPECT_EQ(summary->checkpoint, options_.checkpoint_dir + "/ckpt-20.pb");
  EXPECT_NE(logs.Find("msg=\"Training complete\" steps=20"), "");
  EXPECT_NE(logs.Find("parameter_checksum=abcdef0123456789"), "");
  // The summary's JSON line, as the chief prints it.
  EXPECT_EQ(summary->ToJson()["event"], "training_complete");
  EXPECT_EQ(summary->ToJson()["checkpoint"], summary->checkpoint);
}

// All-reduce: the ranks evaluated each epoch's end and the final parameters together, each on
// its share of the test set. The chief reports those evaluations, with or without checkpoints,
// and evaluates nothing itself (the scripted figures are not what the model would score).
TEST_F(ChiefDutiesTest, TheChiefReportsTheEvaluationsTheRanksMadeTogether) {
  const std::string checkpoint_dir = options_.checkpoint_dir;
  for (const std::string& dir : {checkpoint_dir, std::string()}) {
    SCOPED_TRACE(dir.empty() ? "without checkpoints" : "with checkpoints");
    options_.checkpoint_dir = dir;
    ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
    exchange.together = EvalResult{.loss = 0.25, .accuracy = 0.5, .examples = 40};
    options_.mode = Mode::kAllReduce;
    ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
    LogCapture logs;
    ASSERT_THAT(RunSteps(duties, exchange), IsOk());
    EXPECT_EQ(logs.Count("msg=evaluation step=10 epoch=1 loss=0.25 accuracy=0.5"), 1);
    EXPECT_EQ(exchange.calls, std::vector<std::string>{});  // no parameters loaded to evaluate
    exchange.together = EvalResult{.loss = 0.125, .accuracy = 0.75, .examples = 40};
    auto summary = duties.Finish();
    ASSERT_THAT(summary, IsOk());
    EXPECT_EQ(summary->test_accuracy, 0.75);
    EXPECT_EQ(summary->test_loss, 0.125);
    EXPECT_EQ(logs.Count("msg=evaluation step=20 epoch=2 loss=0.125 accuracy=0.75"), 1);
    EXPECT_EQ(logs.Count("msg=evaluation"), 2);
    const std::vector<std::string> calls = dir.empty()
                                               ? std::vector<std::string>{"shutdown"}
                                               : std::vector<std::string>{"export", "shutdown"};
    EXPECT_EQ(exchange.calls, calls);
    EXPECT_EQ(summary->checkpoint.empty(), dir.empty());
  }
}

// ps-async: the other workers push on until the chief shuts the ps down, so the ps is ahead of
// the chief's last exchange when it finishes. The summary describes the final checkpoint (its
// step, its values), not a read of the ps taken a moment before or after it.
TEST_F(ChiefDutiesTest, TheSummaryDescribesTheFinalCheckpointWhenPushesLandMeanwhile) {
  // The run ends at 22 pushes; the chief's last push was answered at 20.
  ScriptedExchange exchange(*model_, 22);
  exchange.step = 20;
  exchange.late_pushes = 2;
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  auto summary = duties.Finish();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 22);
  EXPECT_EQ(summary->checkpoint, options_.checkpoint_dir + "/ckpt-22.pb");

  // The checkpoint, evaluated by a chief started afresh, gives the summary's figures.
  auto fresh = MakeModel("mlp", device_, 7);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ScriptedExchange restarted(**fresh, 22);
  ChiefDuties again(options_, **fresh, restarted, kStepsPerEpoch, &test_, nullptr, absl::Now());
  auto over = again.FinishFromFinalCheckpoint();
  ASSERT_TRUE(over.ok()) << over.status();
  ASSERT_TRUE(over->has_value());
  EXPECT_EQ((*over)->steps, summary->steps);
  EXPECT_EQ((*over)->test_loss, summary->test_loss);
  EXPECT_EQ((*over)->test_accuracy, summary->test_accuracy);
}

// A chief that restarts after the run's final checkpoint evaluates that checkpoint and ends the
// run; before it, it trains.
TEST_F(ChiefDutiesTest, OnlyTheFinalCheckpointEndsTheRunWithoutTraining) {
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  auto none = duties.FinishFromFinalCheckpoint();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());  // no checkpoint yet
  exchange.step = kStepsPerEpoch;
  ASSERT_THAT(duties.SaveCheckpoint(), IsOk());
  auto halfway = duties.FinishFromFinalCheckpoint();
  ASSERT_TRUE(halfway.ok()) << halfway.status();
  EXPECT_FALSE(halfway->has_value());  // step 10 of 20: training is left
  exchange.step = 2 * kStepsPerEpoch;
  auto trained = duties.Finish();
  ASSERT_TRUE(trained.ok()) << trained.status();

  // The restarted chief's model starts from other values: they come from the checkpoint.
  auto fresh = MakeModel("mlp", device_, 7);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ScriptedExchange restarted(**fresh, 2 * kStepsPerEpoch);
  ChiefDuties again(options_, **fresh, restarted, kStepsPerEpoch, &test_, nullptr, absl::Now());
  LogCapture logs;
  auto over = again.FinishFromFinalCheckpoint();
  ASSERT_TRUE(over.ok()) << over.status();
  ASSERT_TRUE(over->has_value());
  const TrainingSummary& s = **over;
  EXPECT_EQ(s.steps, 20);
  EXPECT_EQ(s.checkpoint, options_.checkpoint_dir + "/ckpt-20.pb");
  EXPECT_EQ(s.checkpoint, trained->checkpoint);
  EXPECT_EQ(s.test_loss, trained->test_loss);
  EXPECT_EQ(s.test_accuracy, trained->test_accuracy);
  EXPECT_EQ(s.examples_per_second, 0);
  // Nothing trained, pulled or exported; whatever ps still run are shut down.
  EXPECT_EQ(restarted.calls, (std::vector<std::string>{"shutdown"}));
  EXPECT_NE(logs.Find("The latest checkpoint ends the run"), "");
  EXPECT_NE(logs.Find("msg=\"Training complete\" steps=20"), "");
}

// A chief restarted part-way through reads its latest checkpoint once: to see whether the run
// is over, and then to resume from it. A checkpoint written meanwhile is read afresh.
TEST_F(ChiefDutiesTest, ARestartedChiefReadsTheCheckpointItResumesFromOnce) {
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  exchange.step = kStepsPerEpoch;
  ASSERT_THAT(duties.SaveCheckpoint(), IsOk());
  // An unreadable manifest: each read of the directory says so in the log.
  std::ofstream(options_.checkpoint_dir + "/checkpoint.json", std::ios::trunc) << "{\"latest\"";

  ScriptedExchange restarted(*model_, 2 * kStepsPerEpoch);
  ChiefDuties again(options_, *model_, restarted, kStepsPerEpoch, &test_, nullptr, absl::Now());
  LogCapture logs;
  auto over = again.FinishFromFinalCheckpoint();
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_FALSE(over->has_value());
  auto latest = again.LatestCheckpoint();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->global_step, kStepsPerEpoch);
  EXPECT_EQ(logs.Count("Checkpoint manifest is unreadable"), 1);

  restarted.step = kStepsPerEpoch + 5;
  ASSERT_THAT(again.SaveCheckpoint(), IsOk());
  auto newer = again.LatestCheckpoint();
  ASSERT_TRUE(newer.ok()) << newer.status();
  ASSERT_TRUE(newer->has_value());
  EXPECT_EQ((*newer)->global_step, kStepsPerEpoch + 5);
}

TEST_F(ChiefDutiesTest, WithoutACheckpointDirNothingIsWrittenOrRestored) {
  options_.checkpoint_dir.clear();
  options_.checkpoint_every = absl::ZeroDuration();
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  ASSERT_THAT(RunSteps(duties, exchange), IsOk());
  auto latest = duties.LatestCheckpoint();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
  auto summary = duties.Finish();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->checkpoint, "");
  EXPECT_EQ(std::count(exchange.calls.begin(), exchange.calls.end(), "export"), 0);
}

TEST_F(ChiefDutiesTest, LatestCheckpointMustFitTheExchangesLastStep) {
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, &test_, nullptr, absl::Now());
  exchange.step = 20;
  ASSERT_THAT(duties.SaveCheckpoint(), IsOk());
  auto latest = duties.LatestCheckpoint();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  EXPECT_EQ((*latest)->global_step, 20);

  exchange.step = 21;  // one beyond the job
  ASSERT_THAT(duties.SaveCheckpoint(), IsOk());
  latest = duties.LatestCheckpoint();
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kFailedPrecondition) << latest.status();
}

TEST_F(ChiefDutiesTest, EvaluateWithoutATestSetFails) {
  ScriptedExchange exchange(*model_, 2 * kStepsPerEpoch);
  ChiefDuties duties(options_, *model_, exchange, kStepsPerEpoch, nullptr, nullptr, absl::Now());
  EXPECT_EQ(duties.Evaluate(1).code(), absl::StatusCode::kFailedPrecondition);
}

// A chief that restores a checkpoint has just read the state it writes next: its first periodic
// checkpoint is due --checkpoint-every after training resumes, not at its first step.
using ResumedChiefTest = FashionMnistTest;

TEST_F(ResumedChiefTest, PsSyncChiefWritesNoCheckpointAtItsFirstStepAfterARestore) {
  auto ps = ps::PsServer::Start({.address = "127.0.0.1:0"}, nullptr);
  ASSERT_TRUE(ps.ok()) << ps.status();
  TrainerOptions options;
  options.mode = Mode::kPsSync;
  options.batch_size = 64;
  options.checkpoint_dir = FreshTempDir("chief_duties_resumed_ps_sync");
  options.checkpoint_every = absl::Hours(1);
  std::atomic<bool> stop{false};
  // One worker on the small sets: 200 steps an epoch. The first run's checkpoints: step 0 and
  // its final one.
  options.epochs = 1;
  CpuDevice device;
  auto first = Trainer(options, {Role::kChief, 0, 1, {(*ps)->address()}}, device, &small_train(),
                       &small_test(), nullptr)
                   .Run(stop);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->checkpoint, options.checkpoint_dir + "/ckpt-200.pb");

  auto ps2 = ps::PsServer::Start({.address = "127.0.0.1:0"}, nullptr);
  ASSERT_TRUE(ps2.ok()) << ps2.status();
  options.epochs = 2;
  auto second = Trainer(options, {Role::kChief, 0, 1, {(*ps2)->address()}}, device, &small_train(),
                        &small_test(), nullptr)
                    .Run(stop);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->steps, 400);
  EXPECT_EQ(second->checkpoint, options.checkpoint_dir + "/ckpt-400.pb");
  EXPECT_FALSE(std::filesystem::exists(options.checkpoint_dir + "/ckpt-201.pb"));
}

}  // namespace
}  // namespace kubetrain::worker
