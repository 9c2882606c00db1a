#include "ps/optimizer.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/enum_names.h"

namespace kubetrain::ps {
namespace {

void CheckLengths(std::span<float> values, std::span<const float> grad,
                  std::span<const std::span<float>> slots, size_t want_slots) {
  assert(values.size() == grad.size());
  assert(slots.size() == want_slots);
  for ([[maybe_unused]] const auto& s : slots) assert(s.size() == values.size());
  (void)values, (void)grad, (void)slots, (void)want_slots;
}

// One class per rule only for its slot names and initial slot value; the arithmetic is the shared
// element math of ps/update_rule.h.
class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerOptions& options) : Optimizer(options) {}
  std::vector<std::string> SlotNames() const override { return {}; }
};

class Momentum final : public Optimizer {
 public:
  explicit Momentum(const OptimizerOptions& options) : Optimizer(options) {}
  std::vector<std::string> SlotNames() const override { return {"momentum"}; }
};

class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerOptions& options) : Optimizer(options) {}
  std::vector<std::string> SlotNames() const override { return {"m", "v"}; }
};

// Epsilon as in Keras, so a zero initial accumulator cannot divide by zero.
class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const OptimizerOptions& options) : Optimizer(options) {}
  std::vector<std::string> SlotNames() const override { return {"accumulator"}; }
  float SlotInitialValue() const override {
    return static_cast<float>(options().initial_accumulator);
  }
};

absl::Status Validate(const OptimizerOptions& o) {
  if (!(o.learning_rate > 0) || !std::isfinite(o.learning_rate)) {
    return absl::InvalidArgumentError(absl::StrCat("learning_rate must be > 0: ", o.learning_rate));
  }
  if (o.warmup_steps < 0) return absl::InvalidArgumentError("warmup_steps must be >= 0");
  if (o.decay_steps < 0) return absl::InvalidArgumentError("decay_steps must be >= 0");
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_lr_ratio must be in [0, 1]: ", o.min_lr_ratio));
  }
  if (o.kind == OptimizerKind::kMomentum && !(o.momentum >= 0 && o.momentum < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("momentum must be in [0, 1): ", o.momentum));
  }
  if (o.kind == OptimizerKind::kAdam &&
      !(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1)) {
    return absl::InvalidArgumentError("Adam betas must be in [0, 1)");
  }
  if ((o.kind == OptimizerKind::kAdam || o.kind == OptimizerKind::kAdagrad) && !(o.epsilon >= 0)) {
    return absl::InvalidArgumentError("epsilon must be >= 0");
  }
  if (o.kind == OptimizerKind::kAdagrad && !(o.initial_accumulator >= 0)) {
    return absl::InvalidArgumentError("initial_accumulator must be >= 0");
  }
  return absl::OkStatus();
}

}  // namespace

double ScaledLearningRate(double base_lr, int64_t global_batch, int64_t reference_batch) {
  if (reference_batch <= 0) return base_lr;
  return base_lr * static_cast<double>(global_batch) / static_cast<double>(reference_batch);
}

double LearningRateAt(const OptimizerOptions& options, int64_t step) {
  double lr = options.learning_rate;
  if (options.warmup_steps > 0 && step + 1 < options.warmup_steps) {
    lr *= static_cast<double>(std::max<int64_t>(step + 1, 1)) /
          static_cast<double>(options.warmup_steps);
  }
  if (options.decay_steps > 0) {
    double progress =
        static_cast<double>(std::min(std::max<int64_t>(step, 0), options.decay_steps)) /
        static_cast<double>(options.decay_steps);
    double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
    lr *= options.min_lr_ratio + (1.0 - options.min_lr_ratio) * cosine;
  }
  return lr;
}

UpdateRule Optimizer::Rule(int64_t step) const {
  const OptimizerOptions& o = options_;
  UpdateRule r;
  r.kind = static_cast<UpdateKind>(o.kind);
  r.lr = static_cast<float>(LearningRateAt(o, step));
  r.momentum = static_cast<float>(o.momentum);
  r.epsilon = static_cast<float>(o.epsilon);
  if (o.kind == OptimizerKind::kAdam) {
    // Kingma & Ba's bias correction folded into the step size: lr_t = lr * sqrt(1 - beta2^t) /
    // (1 - beta1^t), t = step + 1; and 1 - beta in double (in float, 1 - 0.999f is off by 1e-5
    // relative, biasing v).
    const double t = static_cast<double>(step + 1);
    r.lr = static_cast<float>(LearningRateAt(o, step) * std::sqrt(1.0 - std::pow(o.beta2, t)) /
                              (1.0 - std::pow(o.beta1, t)));
    r.beta1 = static_cast<float>(o.beta1);
    r.beta2 = static_cast<float>(o.beta2);
    r.rest1 = static_cast<float>(1.0 - o.beta1);
    r.rest2 = static_cast<float>(1.0 - o.beta2);
  }
  return r;
}

namespace {

// The update of every element, element i's gradient being gradient(i) / grad_divisor (or, with
// no divisor, gradient(i) times the rule's grad_scale).
template <typename Gradient>
void ApplyGradient(const UpdateRule& rule, std::span<float> values,
                   std::span<const std::span<float>> slots, float grad_divisor, Gradient gradient) {
  const int64_t n = static_cast<int64_t>(values.size());
  float* slot0 = slots.size() > 0 ? slots[0].data() : nullptr;
  float* slot1 = slots.size() > 1 ? slots[1].data() : nullptr;
  if (grad_divisor == 1.0f) {
    const float s = rule.grad_scale;
    update::ApplyLoopOf(
        rule, n, [=](int64_t i) { return s * gradient(i); }, values.data(), slot0, slot1);
  } else {
    update::ApplyLoopOf(
        rule, n, [=](int64_t i) { return gradient(i) / grad_divisor; }, values.data(), slot0,
        slot1);
  }
}

}  // namespace

void Optimizer::Apply(std::span<float> values, std::span<const float> grad,
                      std::span<const std::span<float>> slots, int64_t step,
                      float grad_divisor) const {
  const auto want_slots = static_cast<size_t>(UpdateSlots(static_cast<UpdateKind>(options_.kind)));
  CheckLengths(values, grad, slots, want_slots);
  const float* g = grad.data();
  ApplyGradient(Rule(step), values, slots, grad_divisor, [=](int64_t i) { return g[i]; });
}

void Optimizer::ApplySum(std::span<float> values, std::span<const float> sum,
                         std::span<const float> last, std::span<const std::span<float>> slots,
                         int64_t step, float grad_divisor) const {
  const auto want_slots = static_cast<size_t>(UpdateSlots(static_cast<UpdateKind>(options_.kind)));
  CheckLengths(values, sum, slots, want_slots);
  CheckLengths(values, last, slots, want_slots);
  const float* a = sum.data();
  const float* b = last.data();
  ApplyGradient(Rule(step), values, slots, grad_divisor, [=](int64_t i) { return a[i] + b[i]; });
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerOptions& options) {
  if (absl::Status s = Validate(options); !s.ok()) return s;
  switch (options.kind) {
    case OptimizerKind::kSgd:
      return std::unique_ptr<Optimizer>(new Sgd(options));
    case OptimizerKind::kMomentum:
      return std::unique_ptr<Optimizer>(new Momentum(options));
    case OptimizerKind::kAdam:
      return std::unique_ptr<Optimizer>(new Adam(options));
    case OptimizerKind::kAdagrad:
      return std::unique_ptr<Optimizer>(new Adagrad(options));
  }
  return absl::InvalidArgumentError("unknown optimizer kind");
}

namespace {
constexpr EnumName<OptimizerKind> kOptimizerNames[] = {
    {OptimizerKind::kSgd, "sgd"},
    {OptimizerKind::kMomentum, "momentum"},
    {OptimizerKind::kAdam, "adam"},
    {OptimizerKind::kAdagrad, "adagrad"},
};
}  // namespace

absl::string_view OptimizerName(OptimizerKind kind) { return NameOf(kOptimizerNames, kind); }

std::optional<OptimizerKind> OptimizerNamed(std::string_view name) {
  return ValueNamed(kOptimizerNames, name);
}

std::string OptimizerNames() { return NamesOf(kOptimizerNames); }

}  // namespace kubetrain::ps
