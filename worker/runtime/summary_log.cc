#include "worker/runtime/summary_log.h"

#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/logging.h"

namespace kubetrain::worker {
namespace {

// A histogram's sum and count so far.
std::pair<double, double> SumAndCount(prometheus::Histogram& h) {
  const prometheus::ClientMetric m = h.Collect();
  return {m.histogram.sample_sum, static_cast<double>(m.histogram.sample_count)};
}

// Seconds spent exchanging so far. One step exchanges once: a push and a pull, a push-and-pull,
// or an all-reduce.
double ExchangeSeconds(WorkerMetrics& m) {
  double seconds = 0;
  for (prometheus::Histogram* h :
       {&m.push_duration, &m.pull_duration, &m.push_pull_duration, &m.allreduce_duration}) {
    seconds += SumAndCount(*h).first;
  }
  return seconds;
}

}  // namespace

SummaryLog::SummaryLog(std::string directory, WorkerMetrics* metrics,
                       std::function<std::optional<double>()> learning_rate)
    : directory_(std::move(directory)),
      metrics_(metrics),
      learning_rate_(std::move(learning_rate)) {
  if (metrics_ != nullptr) {
    // Exchanges before training (a restarted chief's) are not this run's steps.
    exchange_seconds_ = ExchangeSeconds(*metrics_);
    steps_ = SumAndCount(metrics_->step_duration).second;
  }
}

void SummaryLog::Progress(int64_t step, float loss, double examples_per_second) {
  std::vector<summary::Scalar> values = {
      {"loss", loss}, {"examples_per_second", static_cast<float>(examples_per_second)}};
  if (learning_rate_) {
    if (const std::optional<double> rate = learning_rate_()) {
      values.push_back({"learning_rate", static_cast<float>(*rate)});
    }
  }
  if (metrics_ != nullptr) {
    const double seconds = ExchangeSeconds(*metrics_);
    const double steps = SumAndCount(metrics_->step_duration).second;
    if (steps > steps_) {
      values.push_back({"exchange_seconds_per_step",
                        static_cast<float>((seconds - exchange_seconds_) / (steps - steps_))});
    }
    exchange_seconds_ = seconds;
    steps_ = steps;
  }
  Add(step, values);
}

void SummaryLog::Evaluation(int64_t step, const EvalResult& eval) {
  Add(step, {{"accuracy", static_cast<float>(eval.accuracy)},
             {"test_loss", static_cast<float>(eval.loss)}});
}

void SummaryLog::Add(int64_t step, const std::vector<summary::Scalar>& values) {
  if (failed_) return;
  {
    std::lock_guard<std::mutex> lock(open_mu_);
    if (writer_ == nullptr) {
      absl::StatusOr<std::unique_ptr<summary::EventFileWriter>> writer =
          summary::EventFileWriter::Create({.directory = directory_});
      if (!writer.ok()) {
        failed_ = true;
        log::Warn("No TensorBoard summaries: set --summary-dir to a folder this task may write",
                  {{"error", writer.status().ToString()}});
        return;
      }
      writer_ = std::move(*writer);
      log::Info("Writing TensorBoard summaries", {{"dir", directory_}, {"file", writer_->path()}});
    }
  }
  const double wall_time = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  if (absl::Status s = writer_->AddScalars(step, wall_time, values);
      !s.ok() && !failed_.exchange(true)) {
    log::Warn("TensorBoard summaries stopped", {{"error", s.ToString()}});
  }
}

}  // namespace kubetrain::worker
