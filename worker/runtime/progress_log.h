// The chief's log lines that people read with `kubectl logs` (and `kubetrain run` parses):
// periodic `progress` lines with the job's throughput, and `evaluation` lines, each mirrored in
// the worker's metrics. Used by ChiefDuties (worker/runtime/chief_duties.h) in every training mode.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "worker/core/model.h"
#include "worker/runtime/metrics.h"

namespace kubetrain::worker {

class ProgressLog {
 public:
  // `metrics` may be null.
  ProgressLog(absl::Duration every, WorkerMetrics* metrics) : every_(every), metrics_(metrics) {}

  // Starts measuring throughput from global step `step`, now.
  void Start(int64_t step);
  // Logs `progress step= epoch= loss= examples_per_sec=` once `every` has passed since the last
  // line; the rate counts `examples_per_step` examples for each global step since then. Returns
  // the rate when it logged a line.
  std::optional<double> MaybeLog(int64_t step, int64_t epoch, float loss, int examples_per_step);

 private:
  absl::Duration every_;
  WorkerMetrics* metrics_;
  absl::Time time_ = absl::InfinitePast();
  int64_t step_ = 0;
};

// Logs `evaluation step= [epoch=] loss= accuracy=` and sets the accuracy gauge (`metrics` may be
// null). An evaluator task has no epochs to report.
void LogEvaluation(const EvalResult& eval, int64_t step, std::optional<int64_t> epoch,
                   WorkerMetrics* metrics);

}  // namespace kubetrain::worker
