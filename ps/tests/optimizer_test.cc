#include "ps/optimizer.h"
#include <cmath>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kubetrain::ps {
namespace {

// Runs one update on `values` with fresh-or-given slots; the values chosen below are exact in
// float32 wherever the rule allows.
class Harness {
 public:
  explicit Harness(OptimizerOptions options) {
    auto made = MakeOptimizer(options);
    EXPECT_TRUE(made.ok()) << made.status();
    optimizer_ = *std::move(made);
  }
  void Init(std::vector<float> values) {
    values_ = std::move(values);
    slots_.assign(optimizer_->SlotNames().size(),
                  std::vector<float>(values_.size(), optimizer_->SlotInitialValue()));
  }
  void Step(const std::vector<float>& grad, int64_t step, float grad_divisor = 1.0f) {
    std::vector<std::span<float>> slots(slots_.begin(), slots_.end());
    optimizer_->Apply(values_, grad, slots, step, grad_divisor);
  }
  // The same update from `sum` + `last`, added in the update's pass (ApplySum).
  void StepSum(const std::vector<float>& sum, const std::vector<float>& last, int64_t step,
               float grad_divisor = 1.0f) {
    std::vector<std::span<float>> slots(slots_.begin(), slots_.end());
    optimizer_->ApplySum(values_, sum, last, slots, step, grad_divisor);
  }
  const std::vector<float>& values() const { return values_; }
  const std::vector<float>& slot(size_t i) const { return slots_[i]; }
  const Optimizer& optimizer() const { return *optimizer_; }

 private:
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float> values_;
  std::vector<std::vector<float>> slots_;
};

TEST(Sgd, SubtractsLearningRateTimesGradient) {
  Harness h({.kind = OptimizerKind::kSgd, .learning_rate = 0.5});
  h.Init({1.0f, 2.0f});
  h.Step({0.5f, -1.0f}, 0);
  EXPECT_EQ(h.values(), (std::vector<float>{0.75f, 2.5f}));
  EXPECT_TRUE(h.optimizer().SlotNames().empty());
}

TEST(Momentum, AccumulatesVelocityLikeTensorFlow) {
  Harness h({.kind = OptimizerKind::kMomentum, .learning_rate = 0.5, .momentum = 0.5});
  h.Init({1.0f, 1.0f});
  h.Step({1.0f, 2.0f}, 0);  // accum = g = {1, 2}; w = 1 - 0.5 * accum
  EXPECT_EQ(h.values(), (std::vector<float>{0.5f, 0.0f}));
  h.Step({1.0f, 2.0f}, 1);  // accum = 0.5 * {1, 2} + {1, 2} = {1.5, 3}
  EXPECT_EQ(h.slot(0), (std::vector<float>{1.5f, 3.0f}));
  EXPECT_EQ(h.values(), (std::vector<float>{-0.25f, -1.5f}));
  EXPECT_EQ(h.optimizer().SlotNames(), (std::vector<std::string>{"momentum"}));
}

TEST(Adam, AppliesBiasCorrectedSteps) {
  Harness h({.kind = OptimizerKind::kAdam,
             .learning_rate = 0.1,
             .beta1 = 0.9,
             .beta2 = 0.999,
             .epsilon = 1e-8});
  h.Init({1.0f});
  // Hand-computed in double: t=1, g=1: m=0.1, v=0.001, lr_t=0.1*sqrt(0.001)/0.1, w=0.9000000316.
  h.Step({1.0f}, 0);
  EXPECT_NEAR(h.values()[0], 0.9000000316, 1e-6);
  EXPECT_NEAR(h.slot(0)[0], 0.1, 1e-7);
  EXPECT_NEAR(h.slot(1)[0], 0.001, 1e-8);
  // t=2, g=3: m=0.39, v=0.009999, lr_t=0.1*sqrt(1-0.999^2)/(1-0.81), w=0.8082219289.
  h.Step({3.0f}, 1);
  EXPECT_NEAR(h.slot(0)[0], 0.39, 1e-6);
  EXPECT_NEAR(h.slot(1)[0], 0.009999, 1e-8);
  EXPECT_NEAR(h.values()[0], 0.8082219289, 1e-6);
  EXPECT_EQ(h.optimizer().SlotNames(), (std::vector<std::string>{"m", "v"}));
}

TEST(Adagrad, DividesByRootOfSummedSquares) {
  Harness h({.kind = OptimizerKind::kAdagrad,
             .learning_rate = 0.5,
             .epsilon = 0,
             .initial_accumulator = 0});
  h.Init({1.0f});
  h.Step({3.0f}, 0);  // accum = 9; w = 1 - 0.5 * 3 / 3
  EXPECT_EQ(h.values()[0], 0.5f);
  h.Step({4.0f}, 1);  // accum = 25; w = 0.5 - 0.5 * 4 / 5
  EXPECT_EQ(h.slot(0)[0], 25.0f);
  EXPECT_FLOAT_EQ(h.values()[0], 0.1f);
}

TEST(Adagrad, SlotsStartAtTheInitialAccumulator) {
  Harness h({.kind = OptimizerKind::kAdagrad, .learning_rate = 1, .initial_accumulator = 0.25});
  h.Init({0.0f, 0.0f});
  EXPECT_EQ(h.slot(0), (std::vector<float>{0.25f, 0.25f}));
}

TEST(LearningRate, WarmsUpLinearlyThenHolds) {
  OptimizerOptions o{.learning_rate = 1.0, .warmup_steps = 4};
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 0), 0.25);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 1), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 2), 0.75);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 3), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateAt({.learning_rate = 0.3}, 0), 0.3);
}

TEST(LearningRate, WarmupAppliesToUpdates) {
  Harness h({.kind = OptimizerKind::kSgd, .learning_rate = 1.0, .warmup_steps = 2});
  h.Init({0.0f});
  h.Step({1.0f}, 0);  // lr 0.5
  h.Step({1.0f}, 1);  // lr 1
  EXPECT_EQ(h.values()[0], -1.5f);
}

TEST(LearningRate, ScalesLinearlyWithGlobalBatch) {
  EXPECT_DOUBLE_EQ(ScaledLearningRate(0.1, 512, 256), 0.2);
  EXPECT_DOUBLE_EQ(ScaledLearningRate(0.1, 64, 256), 0.025);
}

// Two harnesses of `kind` (lr 0.07) from the same values of length `n`, three steps each, one
// by `step_fused(harness, step)` and the other by `step_apart`: both must move their values off
// the start, to the same bits, and their slots too.
template <typename Fused, typename Apart>
void ExpectTheSameUpdates(OptimizerKind kind, size_t n, Fused step_fused, Apart step_apart,
                          absl::string_view what) {
  Harness fused({.kind = kind, .learning_rate = 0.07});
  Harness apart({.kind = kind, .learning_rate = 0.07});
  const std::vector<float> start(n, 0.25f);
  fused.Init(start);
  apart.Init(start);
  for (int64_t step = 0; step < 3; ++step) {
    step_fused(fused, step);
    step_apart(apart, step);
  }
  EXPECT_EQ(fused.values(), apart.values()) << what;
  EXPECT_NE(fused.values(), start) << what;
  for (size_t i = 0; i < fused.optimizer().SlotNames().size(); ++i) {
    EXPECT_EQ(fused.slot(i), apart.slot(i)) << what << " slot " << i;
  }
}

constexpr OptimizerKind kEveryKind[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                        OptimizerKind::kAdam, OptimizerKind::kAdagrad};

// A sync step hands the ps's sum of 3 gradients and 3 as the divisor: every rule must move the
// values exactly as it would for the average divided out first (bit for bit, so a checkpoint
// replayed either way agrees).
TEST(Apply, ADivisorAveragesTheSumAsDividingFirstWould) {
  std::vector<float> sum(37);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = 0.37f * static_cast<float>(i) - 5.1f;
  std::vector<float> average = sum;
  for (float& g : average) g /= 3.0f;
  for (OptimizerKind kind : kEveryKind) {
    ExpectTheSameUpdates(
        kind, sum.size(), [&](Harness& h, int64_t step) { h.Step(sum, step, 3.0f); },
        [&](Harness& h, int64_t step) { h.Step(average, step); }, OptimizerName(kind));
  }
}

// A sync step's completing push is not added into the sum first: the update adds it in its own
// pass. Every rule must then move the values and slots exactly as the sum written out would.
TEST(Apply, TheSumAndTheLastGradientMoveTheValuesAsTheirWrittenSumWould) {
  std::vector<float> sum(37), last(37), written(37);
  for (size_t i = 0; i < sum.size(); ++i) {
    // Magnitudes apart, so that adding rounds: a different order would show.
    sum[i] = 0.37f * static_cast<float>(i) - 5.1f;
    last[i] = 1e-3f / (static_cast<float>(i) + 0.7f);
    written[i] = sum[i] + last[i];
  }
  for (OptimizerKind kind : kEveryKind) {
    for (float divisor : {1.0f, 3.0f}) {
      ExpectTheSameUpdates(
          kind, sum.size(), [&](Harness& h, int64_t step) { h.StepSum(sum, last, step, divisor); },
          [&](Harness& h, int64_t step) { h.Step(written, step, divisor); },
          absl::StrCat(OptimizerName(kind), " / ", divisor));
    }
  }
}

TEST(MakeOptimizer, RejectsBadHyperParameters) {
  EXPECT_EQ(MakeOptimizer({.learning_rate = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeOptimizer({.kind = OptimizerKind::kMomentum, .momentum = 1.5}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeOptimizer({.kind = OptimizerKind::kAdam, .beta1 = 1.0}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::ps

namespace kubetrain::ps {
namespace {

TEST(LearningRate, CosineDecayFromPeakToFloor) {
  OptimizerOptions o;
  o.learning_rate = 0.1;
  o.decay_steps = 100;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRateAt(o, 0), 0.1);
  EXPECT_NEAR(LearningRateAt(o, 50), 0.1 * (0.1 + 0.9 * 0.5), 1e-12);
  EXPECT_NEAR(LearningRateAt(o, 100), 0.01, 1e-12);
  EXPECT_NEAR(LearningRateAt(o, 1000), 0.01, 1e-12);  // stays at the floor
}

TEST(LearningRate, WarmupThenDecayMultiply) {
  OptimizerOptions o;
  o.learning_rate = 1.0;
  o.warmup_steps = 10;
  o.decay_steps = 20;
  EXPECT_NEAR(LearningRateAt(o, 4), 0.5 * 0.5 * (1 + std::cos(M_PI * 4 / 20)), 1e-12);
}

}  // namespace
}  // namespace kubetrain::ps
