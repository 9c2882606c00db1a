// Finite-difference checks of every analytic gradient of the MLP and CNN on tiny inputs.
//
// Differences in float with eps = 1e-3: rounding noise in the loss (~3e-7) divided by eps stays
// around 3e-4, well below the 1e-2 tolerance (measured errors are ~1e-4), while a wrong gradient
// (a missing term, a transposed kernel, an off-by-one in im2col) is off by O(1) relative.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/models.h"
#include "worker/core/random.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;

constexpr float kEps = 1e-3f;
constexpr double kTolerance = 1e-2;

struct Inputs {
  std::vector<float> images;
  std::vector<int32_t> labels;
};

Inputs RandomInputs(int batch, int64_t example_size, int classes, uint64_t seed) {
  Rng rng(seed);
  Inputs in;
  for (int64_t i = 0; i < batch * example_size; ++i) in.images.push_back(rng.Normal());
  for (int i = 0; i < batch; ++i) in.labels.push_back(static_cast<int32_t>(rng.Below(classes)));
  return in;
}

double Loss(Model& model, const Inputs& in) {
  auto result = model.EvaluateBatch(in.images, in.labels);
  EXPECT_TRUE(result.ok()) << result.status();
  return result->loss;
}

struct Slopes {
  double forward;   // (L(w + eps) - L(w)) / eps
  double backward;  // (L(w) - L(w - eps)) / eps
  double central() const { return 0.5 * (forward + backward); }
  // A ReLU or max-pool kink inside [w - eps, w + eps] shows as one-sided slopes that disagree
  // by far more than smooth curvature (eps * L'' ~ 1e-3 here) allows.
  bool kink() const { return std::fabs(forward - backward) > 1e-2 + 0.05 * std::fabs(central()); }
};

Slopes Measure(Model& model, const Inputs& in, std::vector<float>& values, int64_t i, double base) {
  const float saved = values[i];
  values[i] = saved + kEps;
  EXPECT_THAT(model.WriteValues(values), IsOk());
  const double plus = Loss(model, in);
  values[i] = saved - kEps;
  EXPECT_THAT(model.WriteValues(values), IsOk());
  const double minus = Loss(model, in);
  values[i] = saved;
  // Divide by the step actually taken in float, not the nominal eps.
  const double up = static_cast<double>(saved + kEps) - saved;
  const double down = saved - static_cast<double>(saved - kEps);
  return {(plus - base) / up, (base - minus) / down};
}

// For each variable: ||central - analytic|| / max(||central||, ||analytic||) over the entries
// whose perturbation crosses no kink must be small; at a kink the analytic gradient must equal
// one of the one-sided slopes (it is the slope on the side of the current point); and kinks
// must stay rare, so the check cannot pass vacuously.
void CheckGradients(Model& model, const Inputs& in) {
  auto loss = model.ComputeGradients(in.images, in.labels);
  ASSERT_TRUE(loss.ok()) << loss.status();
  const double base = Loss(model, in);
  EXPECT_NEAR(*loss, base, 1e-6);
  std::vector<float> values(model.num_parameters()), analytic(model.num_parameters());
  ASSERT_THAT(model.ReadValues(absl::MakeSpan(values)), IsOk());
  ASSERT_THAT(model.ReadGradients(absl::MakeSpan(analytic)), IsOk());
  int64_t offset = 0;
  for (const Variable* var : model.variables()) {
    double diff_sq = 0.0, num_sq = 0.0, ana_sq = 0.0;
    int64_t kinks = 0;
    for (int64_t i = offset; i < offset + var->size(); ++i) {
      const Slopes s = Measure(model, in, values, i, base);
      const double a = analytic[i];
      if (s.kink()) {
        ++kinks;
        const double gap = std::min(std::fabs(a - s.forward), std::fabs(a - s.backward));
        EXPECT_LT(gap, 5e-3 + 0.05 * std::fabs(a)) << var->name << "[" << i - offset << "]";
        continue;
      }
      diff_sq += (s.central() - a) * (s.central() - a);
      num_sq += s.central() * s.central();
      ana_sq += a * a;
    }
    ASSERT_THAT(model.WriteValues(values), IsOk());
    const double scale = std::sqrt(std::max(num_sq, ana_sq));
    EXPECT_GT(scale, 1e-4) << var->name << " has a vanishing gradient: the check would be vacuous";
    EXPECT_LT(std::sqrt(diff_sq) / scale, kTolerance) << var->name;
    EXPECT_LE(kinks * 10, var->size()) << var->name << ": too many kinks to check";
    offset += var->size();
  }
}

// A tiny model and the seed of its random batch (`batch` examples of the model's input size).
struct GradientCase {
  const char* name;
  std::function<absl::StatusOr<std::unique_ptr<Model>>(Device&)> make;
  int batch;
  uint64_t inputs_seed;
};

class GradientCheck : public ::testing::TestWithParam<GradientCase> {};

TEST_P(GradientCheck, MatchesFiniteDifferences) {
  const GradientCase& c = GetParam();
  CpuDevice device;
  auto model = c.make(device);
  ASSERT_TRUE(model.ok()) << model.status();
  CheckGradients(**model, RandomInputs(c.batch, (*model)->input_size(), (*model)->num_classes(),
                                       c.inputs_seed));
}

INSTANTIATE_TEST_SUITE_P(
    Models, GradientCheck,
    ::testing::Values(
        GradientCase{"Mlp",
                     [](Device& d) {
                       return MakeMlp(d, {.inputs = 6, .hidden = {5, 4}, .classes = 3, .seed = 3});
                     },
                     4, 11},
        GradientCase{"Cnn",
                     [](Device& d) {
                       return MakeCnn(d, {.height = 8,
                                          .width = 8,
                                          .channels = 2,
                                          .kernel = 3,
                                          .conv1_filters = 3,
                                          .conv2_filters = 4,
                                          .hidden = 6,
                                          .classes = 3,
                                          .seed = 5});
                     },
                     3, 12},
        GradientCase{"CnnWithFiveByFiveKernels",
                     [](Device& d) {
                       return MakeCnn(d, {.height = 12,
                                          .width = 12,
                                          .channels = 1,
                                          .kernel = 5,
                                          .conv1_filters = 2,
                                          .conv2_filters = 3,
                                          .hidden = 4,
                                          .classes = 3,
                                          .seed = 6});
                     },
                     2, 13}),
    [](const ::testing::TestParamInfo<GradientCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace kubetrain::worker
