#include "worker/core/model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "worker/core/cpu/cpu_device.h"
#include "worker/core/models.h"
#include "worker/core/random.h"
#include "worker/core/sgd.h"
#include "worker/tests/model_reads.h"

namespace kubetrain::worker {
namespace {

using ::kubetrain::testing::IsOk;
using testing::Gradients;
using ::testing::HasSubstr;
using testing::Values;

std::vector<std::pair<std::string, Shape>> NamesAndShapes(const Model& model) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const Variable* v : model.variables()) out.emplace_back(v->name, v->shape());
  return out;
}

std::vector<float> RandomImages(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.Normal();
  return v;
}

// A model as MakeModel makes it: its variables' names and shapes in order, and its size.
struct LayoutCase {
  const char* name;
  const char* model;
  std::vector<std::pair<std::string, Shape>> variables;
  int64_t parameters;
};

class ModelLayout : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(ModelLayout, HasNamedVariablesOfTheDesignShape) {
  const LayoutCase& c = GetParam();
  CpuDevice device;
  auto model = MakeModel(c.model, device, 1);
  ASSERT_THAT(model, IsOk());
  EXPECT_EQ(NamesAndShapes(**model), c.variables);
  EXPECT_EQ((*model)->num_parameters(), c.parameters);
  EXPECT_EQ((*model)->input_size(), 784);
}

using P = std::pair<std::string, Shape>;
INSTANTIATE_TEST_SUITE_P(
    Models, ModelLayout,
    ::testing::Values(LayoutCase{"Mlp",
                                 "mlp",
                                 {P{"dense1/kernel", {784, 256}}, P{"dense1/bias", {256}},
                                  P{"dense2/kernel", {256, 128}}, P{"dense2/bias", {128}},
                                  P{"logits/kernel", {128, 10}}, P{"logits/bias", {10}}},
                                 235146},
                      // Convolution kernels in HWIO layout.
                      LayoutCase{"Cnn",
                                 "cnn",
                                 {P{"conv1/kernel", {5, 5, 1, 32}}, P{"conv1/bias", {32}},
                                  P{"conv2/kernel", {5, 5, 32, 64}}, P{"conv2/bias", {64}},
                                  P{"dense1/kernel", {7 * 7 * 64, 128}}, P{"dense1/bias", {128}},
                                  P{"logits/kernel", {128, 10}}, P{"logits/bias", {10}}},
                                 454922},
                      LayoutCase{"MlpWithHiddenWidths",
                                 "mlp:300,20,7",
                                 {P{"dense1/kernel", {784, 300}}, P{"dense1/bias", {300}},
                                  P{"dense2/kernel", {300, 20}}, P{"dense2/bias", {20}},
                                  P{"dense3/kernel", {20, 7}}, P{"dense3/bias", {7}},
                                  P{"logits/kernel", {7, 10}}, P{"logits/bias", {10}}},
                                 784 * 300 + 300 + 300 * 20 + 20 + 20 * 7 + 7 + 70 + 10}),
    [](const ::testing::TestParamInfo<LayoutCase>& info) { return std::string(info.param.name); });

// The benchmarks' communication-bound model (bench/network).
TEST(Models, MlpOfTheNetworkBenchmarkHasItsSize) {
  CpuDevice device;
  auto big = MakeModel("mlp:4096,4096,1024", device, 1);
  ASSERT_THAT(big, IsOk());
  EXPECT_EQ((*big)->num_parameters(), 24202250);
}

TEST(Models, UnknownNameIsInvalidArgument) {
  CpuDevice device;
  auto model = MakeModel("resnet", device, 1);
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.status().message(),
            "--model: unsupported value \"resnet\"; allowed: mlp, cnn, or mlp:W1,W2,... for an "
            "MLP with those hidden widths");
  EXPECT_THAT(MakeModel("cnn", device, 1), IsOk());
}

TEST(Models, BadHiddenWidthsNameTheValueAndTheForm) {
  for (const char* name : {"mlp:", "mlp:0", "mlp:12,x", "mlp:65537", "mlp:-3", "mlp:4096,,4096"}) {
    absl::Status s = CheckModelName(name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat("--model: \"", name, "\"")))
        << name;
    EXPECT_THAT(std::string(s.message()), HasSubstr("mlp:4096,4096")) << name;
  }
  EXPECT_THAT(std::string(CheckModelName("mlp:1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1").message()),
              HasSubstr("at most 16 hidden layers"));
  // Two 65536-wide layers would be 4.3 G parameters: refused before anything is allocated.
  EXPECT_THAT(std::string(CheckModelName("mlp:65536,65536").message()),
              HasSubstr("--model: \"mlp:65536,65536\" has 4347133962 parameters, more than the "
                        "268435456 (1 GiB of float32) a model may have; use narrower layers"));
  EXPECT_THAT(CheckModelName("mlp:12288,12288"), IsOk());  // 161 M parameters
  EXPECT_FALSE(CheckModelName("mlp:16384,16384").ok());    // 281 M parameters
  EXPECT_THAT(CheckModelName("mlp"), IsOk());
  EXPECT_THAT(CheckModelName("cnn"), IsOk());
}

TEST(Models, SameSeedGivesIdenticalInitialValues) {
  CpuDevice device;
  auto a = MakeModel("mlp", device, 7);
  auto b = MakeModel("mlp", device, 7);
  auto c = MakeModel("mlp", device, 8);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  ASSERT_THAT(c, IsOk());
  EXPECT_EQ(Values(**a), Values(**b));
  EXPECT_NE(Values(**a), Values(**c));
}

TEST(Models, HeInitHasTheExpectedSpreadAndZeroBiases) {
  CpuDevice device;
  auto model = MakeMlp(device);
  ASSERT_THAT(model, IsOk());
  const Variable& kernel = *(*model)->variables()[0];
  std::vector<float> w(kernel.size());
  device.Download(kernel.value, w.data(), kernel.size());
  double sum_sq = 0.0;
  for (float x : w) sum_sq += static_cast<double>(x) * x;
  EXPECT_NEAR(std::sqrt(sum_sq / w.size()), std::sqrt(2.0 / 784), 0.01 * std::sqrt(2.0 / 784));
  const Variable& bias = *(*model)->variables()[1];
  std::vector<float> b(bias.size());
  device.Download(bias.value, b.data(), bias.size());
  EXPECT_EQ(b, std::vector<float>(bias.size(), 0.0f));
}

TEST(Model, WriteValuesRoundTripsAndChecksSize) {
  CpuDevice device;
  auto model = MakeMlp(device, {.inputs = 3, .hidden = {2}, .classes = 2});
  ASSERT_THAT(model, IsOk());
  std::vector<float> v(static_cast<size_t>((*model)->num_parameters()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  ASSERT_THAT((*model)->WriteValues(v), IsOk());
  EXPECT_EQ(Values(**model), v);
  v.pop_back();
  const absl::Status status = (*model)->WriteValues(v);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(status.message()), "mlp has 14 parameters, flat buffer has 13");
}

TEST(Model, RejectsMismatchedBatch) {
  CpuDevice device;
  auto model = MakeMlp(device, {.inputs = 3, .hidden = {2}, .classes = 2});
  ASSERT_THAT(model, IsOk());
  const std::vector<float> images(5);
  const std::vector<int32_t> labels = {0, 1};
  auto loss = (*model)->ComputeGradients(images, labels);
  EXPECT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(loss.status().message(), "batch of 2 labels needs 6 image floats, got 5");
  const std::vector<float> six(6);
  const std::vector<int32_t> bad = {0, 2};
  EXPECT_EQ((*model)->ComputeGradients(six, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The conv layers work on chunks of the batch (bounded column buffers); the batch gradient must
// still be exactly the mean of per-example gradients, whatever the chunking.
TEST(Model, CnnBatchGradientIsMeanOfPerExampleGradients) {
  CpuDevice device;
  auto model = MakeCnn(device, {.seed = 2});
  ASSERT_THAT(model, IsOk());
  constexpr int kBatch = 20;  // chunks of 13 (conv1) and 1 (conv2) images: several chunks each
  const std::vector<float> images = RandomImages(kBatch * 784, 3);
  std::vector<int32_t> labels(kBatch);
  for (int i = 0; i < kBatch; ++i) labels[i] = i % 10;
  auto batch_loss = (*model)->ComputeGradients(images, labels);
  ASSERT_THAT(batch_loss, IsOk());
  const std::vector<float> batch_grad = Gradients(**model);
  std::vector<double> mean(batch_grad.size(), 0.0);
  double mean_loss = 0.0;
  for (int i = 0; i < kBatch; ++i) {
    auto loss = (*model)->ComputeGradients(absl::MakeConstSpan(images).subspan(i * 784, 784),
                                           absl::MakeConstSpan(labels).subspan(i, 1));
    ASSERT_THAT(loss, IsOk());
    mean_loss += *loss / kBatch;
    const std::vector<float> g = Gradients(**model);
    for (size_t j = 0; j < g.size(); ++j) mean[j] += g[j] / kBatch;
  }
  EXPECT_NEAR(*batch_loss, mean_loss, 1e-5);
  double max_err = 0.0, max_abs = 0.0;
  for (size_t j = 0; j < mean.size(); ++j) {
    max_err = std::max(max_err, std::fabs(mean[j] - batch_grad[j]));
    max_abs = std::max(max_abs, std::fabs(mean[j]));
  }
  EXPECT_LT(max_err, 1e-4 * max_abs);
}

// Seven 2x2 images of two classes, for a 4-input MLP.
Dataset SevenExamples() {
  Dataset data;
  data.height = 2;
  data.width = 2;
  data.num_classes = 2;
  data.images = RandomImages(7 * 4, 4);
  data.labels = {0, 1, 0, 1, 1, 1, 0};
  return data;
}

// A 4-input MLP of two classes and the seven examples it evaluates.
class ModelEvaluation : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = MakeMlp(device_, {.inputs = 4, .hidden = {3}, .classes = 2});
    ASSERT_THAT(model, IsOk());
    model_ = *std::move(model);
  }

  CpuDevice device_;
  std::unique_ptr<Model> model_;
  Dataset data_ = SevenExamples();
};

TEST_F(ModelEvaluation, CountsEveryExample) {
  auto result = model_->Evaluate(data_, 3);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->examples, 7);
  EXPECT_GE(result->accuracy, 0.0);
  EXPECT_LE(result->accuracy, 1.0);
  EXPECT_GT(result->loss, 0.0);
  // Same result as one batch of everything.
  auto whole = model_->EvaluateBatch(data_.images, data_.labels);
  ASSERT_THAT(whole, IsOk());
  EXPECT_NEAR(whole->loss, result->loss, 1e-6);
  EXPECT_DOUBLE_EQ(whole->accuracy, result->accuracy);
}

// The ranks of an all-reduce job each evaluate a share of the test set: the shares cover every
// example once, in contiguous parts, and together score what one evaluation of the whole does.
TEST_F(ModelEvaluation, SharesAddUpToTheWholeSet) {
  auto whole = model_->Evaluate(data_, 2);
  ASSERT_THAT(whole, IsOk());
  double loss_sum = 0, correct = 0;
  std::vector<int64_t> sizes;
  for (int index = 0; index < 3; ++index) {
    auto part = model_->Evaluate(data_, 2, nullptr, {.index = index, .count = 3});
    ASSERT_THAT(part, IsOk());
    sizes.push_back(part->examples);
    loss_sum += part->loss * part->examples;
    correct += part->accuracy * part->examples;
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_NEAR(loss_sum / 7, whole->loss, 1e-6);
  EXPECT_NEAR(correct / 7, whole->accuracy, 1e-12);
  // More ranks than examples: some shares are empty, which is no error.
  data_.images.resize(2 * 4);
  data_.labels.resize(2);
  auto empty = model_->Evaluate(data_, 2, nullptr, {.index = 0, .count = 3});
  ASSERT_THAT(empty, IsOk());
  EXPECT_EQ(empty->examples, 0);
  EXPECT_EQ(model_->Evaluate(data_, 2, nullptr, {.index = 3, .count = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
  data_.images.clear();
  data_.labels.clear();
  EXPECT_EQ(model_->Evaluate(data_, 2, nullptr, {.index = 0, .count = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MomentumSgd, AppliesTensorFlowMomentumRule) {
  CpuDevice device;
  Variable var(device, "w", {2});
  const float w0[] = {1.0f, -2.0f}, g[] = {0.5f, 1.0f};
  device.Upload(w0, var.value, 2);
  device.Upload(g, var.grad, 2);
  MomentumSgd sgd(device, {&var}, {.learning_rate = 0.1f, .momentum = 0.9f});
  sgd.Step();  // v = g; w -= 0.1 v
  sgd.Step();  // v = 0.9 g + g; w -= 0.1 v
  float w[2];
  device.Download(var.value, w, 2);
  EXPECT_NEAR(w[0], 1.0f - 0.1f * 0.5f - 0.1f * 0.95f, 1e-6);
  EXPECT_NEAR(w[1], -2.0f - 0.1f * 1.0f - 0.1f * 1.9f, 1e-6);
}

TEST(MomentumSgd, CnnOverfitsOneBatch) {
  CpuDevice device;
  auto model = MakeCnn(device, {.seed = 4});
  ASSERT_THAT(model, IsOk());
  const std::vector<float> images = RandomImages(16 * 784, 5);
  std::vector<int32_t> labels(16);
  for (int i = 0; i < 16; ++i) labels[i] = (i * 7) % 10;
  MomentumSgd sgd(device, (*model)->variables(), {.learning_rate = 0.01f, .momentum = 0.9f});
  auto first = (*model)->ComputeGradients(images, labels);
  ASSERT_THAT(first, IsOk());
  float loss = *first;
  for (int step = 0; step < 30; ++step) {
    sgd.Step();
    auto next = (*model)->ComputeGradients(images, labels);
    ASSERT_THAT(next, IsOk());
    loss = *next;
  }
  EXPECT_LT(loss, 0.1f * *first);
}

}  // namespace
}  // namespace kubetrain::worker
