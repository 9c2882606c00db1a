// Update rules applied by the parameter server to one partition at a time.
//
// An Optimizer holds only its configuration; the slot variables (momentum, Adam's m and v,
// Adagrad's accumulator) belong to the partition and are passed in, so the shard store owns all
// state and can export it by slot name for checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "ps/update_rule.h"

namespace kubetrain::ps {

// Same numbering as UpdateKind (ps/update_rule.h).
enum class OptimizerKind { kSgd = 0, kMomentum = 1, kAdam = 2, kAdagrad = 3 };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kSgd;
  // Peak learning rate, already scaled for the global batch (see ScaledLearningRate).
  double learning_rate = 0.01;
  // Linear warmup from learning_rate / warmup_steps to learning_rate over this many updates.
  int64_t warmup_steps = 0;
  // Cosine decay of the rate over this many updates (0: none), down to min_lr_ratio × the peak.
  // A decayed rate makes the final model the converged one rather than a noisy late sample.
  int64_t decay_steps = 0;
  double min_lr_ratio = 0.0;
  double momentum = 0.9;             // Momentum
  double beta1 = 0.9;                // Adam
  double beta2 = 0.999;              // Adam
  double epsilon = 1e-7;             // Adam, Adagrad
  double initial_accumulator = 0.1;  // Adagrad
};

// Goyal et al.'s linear scaling rule: base_lr × global_batch / reference_batch.
double ScaledLearningRate(double base_lr, int64_t global_batch, int64_t reference_batch);

// The learning rate used for the update made at global step `step` (0 = the first update):
// learning_rate × min(1, (step + 1) / warmup_steps), or learning_rate without warmup; then
// times the cosine decay factor when decay_steps > 0.
double LearningRateAt(const OptimizerOptions& options, int64_t step);

// Stateless and immutable: thread-safe. Callers serialise updates of one partition.
class Optimizer {
 public:
  virtual ~Optimizer() = default;

  const OptimizerOptions& options() const { return options_; }
  // Names of the slots Apply expects, in the order it expects them.
  virtual std::vector<std::string> SlotNames() const = 0;
  // The value every slot element starts from (Adagrad starts from initial_accumulator).
  virtual float SlotInitialValue() const { return 0.0f; }

  // The scalars of the update made at global step `step` (scheduled rate, Adam's correction),
  // for applying it elsewhere (a worker's device in all-reduce training).
  UpdateRule Rule(int64_t step) const;

  // values -= update(grad / grad_divisor) for the update at global step `step`; `slots` are in
  // SlotNames() order, each as long as `values`. Lengths are the caller's invariant (checked in
  // debug). The divisor is how a sync step averages a sum of gradients in the same pass as the
  // update: a division, not a product with 1/R, keeps averages of integer gradients exact.
  void Apply(std::span<float> values, std::span<const float> grad,
             std::span<const std::span<float>> slots, int64_t step,
             float grad_divisor = 1.0f) const;
  // Apply with the gradient sum + last, elementwise, added in the update's own pass: what
  // Apply(values, sum + last, ...) gives, bit for bit, without writing the sum first.
  void ApplySum(std::span<float> values, std::span<const float> sum, std::span<const float> last,
                std::span<const std::span<float>> slots, int64_t step,
                float grad_divisor = 1.0f) const;

 protected:
  explicit Optimizer(const OptimizerOptions& options) : options_(options) {}

 private:
  OptimizerOptions options_;
};

// INVALID_ARGUMENT for a non-positive learning rate or out-of-range hyper-parameters.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerOptions& options);

// Each kind's flag name (sgd, momentum, adam, adagrad), read both ways; OptimizerNames lists
// them ("sgd, momentum, adam, adagrad") for an error.
absl::string_view OptimizerName(OptimizerKind kind);
std::optional<OptimizerKind> OptimizerNamed(std::string_view name);
std::string OptimizerNames();

}  // namespace kubetrain::ps
