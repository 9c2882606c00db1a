// The TensorBoard side of the chief's and the evaluator's log (worker/summary/event_file_writer.h):
// beside each `progress` line, loss, examples/s, the learning rate and the exchange's seconds per
// step; beside each `evaluation` line, accuracy and the test loss. A write that fails (a full
// disk) is logged once as a warning and ends the summaries, never the training.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "worker/core/model.h"
#include "worker/runtime/metrics.h"
#include "worker/summary/event_file_writer.h"

namespace kubetrain::worker {

// One per process start (the Trainer's), so one new event file: made at the first value, and
// named then in an info line (where TensorBoard should look); when it cannot be made, a warning
// names the error and the flag, and nothing more is written.
class SummaryLog {
 public:
  // `metrics` (may be null) gives the exchange's time per step; `learning_rate` (may be empty)
  // the rate at the current step.
  SummaryLog(std::string directory, WorkerMetrics* metrics,
             std::function<std::optional<double>()> learning_rate);

  // Loss, examples/s, learning rate and exchange seconds per step since the last call.
  void Progress(int64_t step, float loss, double examples_per_second);
  // Accuracy and test loss of an evaluation at `step` (from any thread).
  void Evaluation(int64_t step, const EvalResult& eval);

 private:
  void Add(int64_t step, const std::vector<summary::Scalar>& values);

  const std::string directory_;
  std::mutex open_mu_;
  std::unique_ptr<summary::EventFileWriter> writer_;  // made by the first Add
  WorkerMetrics* metrics_;
  std::function<std::optional<double>()> learning_rate_;
  double exchange_seconds_ = 0;       // the exchange histograms' sum at the last Progress
  double steps_ = 0;                  // and the steps timed then
  std::atomic<bool> failed_ = false;  // Evaluation may run on an evaluation thread
};

}  // namespace kubetrain::worker
