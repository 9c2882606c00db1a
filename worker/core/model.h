// A feed-forward classifier trained with softmax cross-entropy, computed through a Device.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "worker/core/data/dataset.h"
#include "worker/core/device.h"
#include "worker/core/layers/layer.h"
#include "worker/core/step_graphs.h"
#include "worker/core/variable.h"

namespace kubetrain::worker {

struct EvalResult {
  double loss = 0.0;      // mean cross-entropy
  double accuracy = 0.0;  // fraction of argmax predictions equal to the label
  int64_t examples = 0;
};

// The `index`-th of `count` contiguous parts of a dataset: examples [n·index/count,
// n·(index+1)/count). The ranks of an all-reduce job evaluate the test set in such parts
// (worker/runtime/exchange_allreduce.h).
struct EvalShare {
  int index = 0;
  int count = 1;
};

// Owns its layers (and through them every variable and activation buffer) and per-batch loss
// buffers; borrows the Device, which must outlive it. Buffers grow to the largest batch seen
// and are reused, so steady-state steps do not allocate. Not thread-safe: one training thread.
//
// Variables come in a fixed order with stable names; "flat" host views concatenate them in that
// order, so a parameter server can shard by (name, offset) and gradients share the layout.
class Model {
 public:
  Model(Device& device, std::string name, int num_classes,
        std::vector<std::unique_ptr<Layer>> layers);

  const std::string& name() const { return name_; }
  Device& device() { return device_; }
  int64_t input_size() const { return layers_.front()->input_size(); }
  int num_classes() const { return num_classes_; }

  const std::vector<Variable*>& variables() const { return variables_; }
  int64_t num_parameters() const;

  // Draws every variable afresh from `seed`; the same seed gives bit-identical values.
  absl::Status Initialize(uint64_t seed);

  // Forward and backward over one batch (`labels.size()` examples of input_size() floats):
  // overwrites every variable's grad with d(mean loss)/d(variable) and returns the mean loss.
  absl::StatusOr<float> ComputeGradients(absl::Span<const float> images,
                                         absl::Span<const int32_t> labels);
  // The same, but leaves the mean loss in `loss` (one float of device memory) and does not wait
  // for the device: the caller's next wait covers the step (backend errors surface there). A
  // `tail`, when given, is issued after backward as part of the step, and captured and replayed
  // with it (StepTail); its error fails the step.
  absl::Status ComputeGradients(absl::Span<const float> images, absl::Span<const int32_t> labels,
                                float* loss, StepTail* tail = nullptr);

  // Forward only over one batch.
  absl::StatusOr<EvalResult> EvaluateBatch(absl::Span<const float> images,
                                           absl::Span<const int32_t> labels);

  // Mean loss and accuracy over every example of `data`'s `share` (all of it by default), in
  // order. CANCELLED, between two batches, once `cancel` (if given) is set. An empty dataset is
  // INVALID_ARGUMENT; an empty part of a larger one gives `examples` 0.
  absl::StatusOr<EvalResult> Evaluate(const Dataset& data, int batch_size = 256,
                                      const std::atomic<bool>* cancel = nullptr,
                                      EvalShare share = {});

  // Called during each backward pass, on the training thread, as soon as a layer's gradients
  // are final (the last layer's first), with `ready`: every variable from variables()[ready] to
  // the end has its gradient for this batch, and backward will not write them again. The
  // all-reduce starts summing them while the earlier layers' backward runs (DDP's and Horovod's
  // overlap). On a device that queues work the gradients may still be in flight: the hook must
  // wait for the device before reading them. Empty: none.
  // While a hook is set, steps are not captured (StepGraphs): the hook runs host code between
  // layers.
  void SetGradientsReady(std::function<void(size_t ready)> hook) {
    gradients_ready_ = std::move(hook);
    if (gradients_ready_) graphs_.Clear();
  }

  // ComputeGradients through one captured graph per batch size where the device supports it
  // (worker/core/step_graphs.h); off by default. The results are bit-identical to those of
  // uncaptured steps.
  void UseStepGraphs(bool on) { graphs_.set_enabled(on); }
  // Drops the step graphs and their warm-ups (StepGraphs::Reset): what a tail captured with them
  // is about to change.
  void ResetStepGraphs() { graphs_.Reset(); }
  const StepGraphs& step_graphs() const { return graphs_; }

  // Host copies in variables() order; `out`/`values` must hold num_parameters() floats.
  absl::Status ReadValues(absl::Span<float> out);
  absl::Status ReadGradients(absl::Span<float> out);
  absl::Status WriteValues(absl::Span<const float> values);

 private:
  absl::Status CheckBatch(absl::Span<const float> images, absl::Span<const int32_t> labels) const;
  absl::Status Load(absl::Span<const float> images, absl::Span<const int32_t> labels);
  void Reserve(int batch);
  const float* Forward(int batch);
  void Backward(int batch);
  // Load, Forward, the loss (per row, in losses_; their mean in `loss` too unless null), Backward
  // and the tail (unless null), captured or replayed by graphs_ where it may be; returns the
  // batch size.
  absl::StatusOr<int> ForwardBackward(absl::Span<const float> images,
                                      absl::Span<const int32_t> labels, float* loss,
                                      StepTail* tail);
  double SumLoss(int batch);
  absl::Status CheckFlatSize(size_t size) const;

  Device& device_;
  std::string name_;
  int num_classes_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Variable*> variables_;
  int capacity_ = 0;
  uint64_t generation_ = 0;  // counts the reallocations of the buffers below (Reserve)
  Tensor input_;
  IntTensor labels_;
  Tensor losses_;
  Tensor ones_;  // `capacity_` ones: the mean loss on the device is a dot product with them
  Tensor logits_grad_;
  IntTensor predictions_;
  std::vector<const float*> layer_inputs_;  // per layer, the input of the last Forward
  std::vector<size_t> first_variable_;      // per layer, the index of its first variable
  std::function<void(size_t)> gradients_ready_;
  std::vector<float> host_losses_;
  std::vector<int32_t> host_predictions_;
  // Declared last: its graphs use the buffers above and are dropped first.
  StepGraphs graphs_;
};

}  // namespace kubetrain::worker
