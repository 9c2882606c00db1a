// The TensorBoard side of the chief's and the evaluator's log (worker/summary/event_file_writer.h):
// beside each `progress` line, loss, examples/s, the learning rate and the exchange's seconds per
// step; beside each `evaluation` line, accuracy and the test loss. A write that fails (a full
// disk) is logged once as a warning and ends the summaries, never the training.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/core/model.h"
#include "worker/runtime/metrics.h"
#include "worker/summary/event_file_writer.h"

namespace kubetrain::worker {

class SummaryLog {
 public:
  // A new event file in `directory`, named in an info line (where TensorBoard should look);
  // null, with a warning naming the error and the flag, when it cannot be made. `metrics` (may
  // be null) gives the exchange's time per step; `learning_rate` (may be empty) the rate at the
  // current step.
  static std::unique_ptr<SummaryLog> Open(const std::string& directory, WorkerMetrics* metrics,
                                          std::function<std::optional<double>()> learning_rate);

  // Loss, examples/s, learning rate and exchange seconds per step since the last call.
  void Progress(int64_t step, float loss, double examples_per_second);
  // Accuracy and test loss of an evaluation at `step`.
  void Evaluation(int64_t step, const EvalResult& eval);
  // Writes what is buffered (also done by the destructor).
  void Flush();

 private:
  SummaryLog(std::unique_ptr<summary::EventFileWriter> writer, WorkerMetrics* metrics,
             std::function<std::optional<double>()> learning_rate);
  void Add(int64_t step, const std::vector<summary::Scalar>& values);

  std::unique_ptr<summary::EventFileWriter> writer_;
  WorkerMetrics* metrics_;
  std::function<std::optional<double>()> learning_rate_;
  double exchange_seconds_ = 0;       // the exchange histograms' sum at the last Progress
  double steps_ = 0;                  // and the steps timed then
  std::atomic<bool> failed_ = false;  // Evaluation may run on an evaluation thread
};

}  // namespace kubetrain::worker
