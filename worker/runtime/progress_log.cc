#include "worker/runtime/progress_log.h"

#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace kubetrain::worker {

void ProgressLog::Start(int64_t step) {
  time_ = absl::Now();
  step_ = step;
}

std::optional<double> ProgressLog::MaybeLog(int64_t step, int64_t epoch, float loss,
                                            int examples_per_step) {
  const absl::Time now = absl::Now();
  if (now - time_ < every_) return std::nullopt;
  if (step < step_) step_ = step;  // restored from an older checkpoint: measure afresh
  const double rate =
      static_cast<double>(step - step_) * examples_per_step / absl::ToDoubleSeconds(now - time_);
  time_ = now;
  step_ = step;
  if (metrics_) metrics_->examples_per_second.Set(rate);
  log::Info("progress", {{"step", step},
                         {"epoch", epoch},
                         {"loss", loss},
                         {"examples_per_sec", absl::StrFormat("%.0f", rate)}});
  return rate;
}

void LogEvaluation(const EvalResult& eval, int64_t step, std::optional<int64_t> epoch,
                   WorkerMetrics* metrics) {
  if (metrics) metrics->accuracy.Set(eval.accuracy);
  if (epoch) {
    log::Info(
        "evaluation",
        {{"step", step}, {"epoch", *epoch}, {"loss", eval.loss}, {"accuracy", eval.accuracy}});
  } else {
    log::Info("evaluation", {{"step", step}, {"loss", eval.loss}, {"accuracy", eval.accuracy}});
  }
}

}  // namespace kubetrain::worker
