#include "worker/core/models.h"

#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "worker/core/layers/conv2d.h"
#include "worker/core/layers/dense.h"
#include "worker/core/layers/max_pool.h"

namespace kubetrain::worker {
namespace {

using Layers = std::vector<std::unique_ptr<Layer>>;

absl::StatusOr<std::unique_ptr<Model>> Finish(Device& device, std::string name, int classes,
                                              Layers layers, uint64_t seed) {
  auto model = std::make_unique<Model>(device, std::move(name), classes, std::move(layers));
  RETURN_IF_ERROR(model->Initialize(seed));
  return model;
}

// Appends a conv → ReLU → pool block (the ReLU fused into the conv) and returns the pooled
// (height, width).
std::pair<int, int> AddConvBlock(Device& device, Layers& layers, int index,
                                 const Conv2DShape& shape) {
  const std::string suffix = std::to_string(index);
  layers.push_back(std::make_unique<Conv2D>(device, "conv" + suffix, shape, Activation::kRelu));
  layers.push_back(std::make_unique<MaxPool2x2>(device, "pool" + suffix, shape.height, shape.width,
                                                shape.filters));
  return {shape.height / 2, shape.width / 2};
}

constexpr int kMaxHiddenWidth = 65536;
constexpr size_t kMaxHiddenLayers = 16;
// 1 GiB of float32 values: a worker holds the values, the gradients and up to two optimizer
// slots, so a larger model would not fit a node's memory before it failed to allocate.
constexpr int64_t kMaxMlpParameters = int64_t{1} << 28;

// The model a --model value names: a CNN, or an MLP with `mlp.hidden`.
struct ModelChoice {
  bool cnn = false;
  MlpOptions mlp;
};

absl::StatusOr<ModelChoice> ParseModelName(absl::string_view name) {
  if (name == "cnn") return ModelChoice{.cnn = true};
  if (name == "mlp") return ModelChoice{};
  absl::string_view widths = name;
  if (absl::ConsumePrefix(&widths, "mlp:")) {
    ModelChoice choice;
    choice.mlp.hidden.clear();
    for (absl::string_view w : absl::StrSplit(widths, ',')) {
      int width = 0;
      if (!absl::SimpleAtoi(w, &width) || width < 1 || width > kMaxHiddenWidth) {
        return absl::InvalidArgumentError(absl::StrCat("--model: \"", name, "\": hidden width \"",
                                                       w, "\" is not a whole number from 1 to ",
                                                       kMaxHiddenWidth, " (e.g. mlp:4096,4096)"));
      }
      choice.mlp.hidden.push_back(width);
    }
    if (choice.mlp.hidden.size() > kMaxHiddenLayers) {
      return absl::InvalidArgumentError(
          absl::StrCat("--model: \"", name, "\": at most ", kMaxHiddenLayers, " hidden layers"));
    }
    int64_t parameters = 0, fan_in = choice.mlp.inputs;
    for (int width : choice.mlp.hidden) {
      parameters += (fan_in + 1) * width;
      fan_in = width;
    }
    parameters += (fan_in + 1) * choice.mlp.classes;
    if (parameters > kMaxMlpParameters) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model: \"", name, "\" has ", parameters, " parameters, more than the ",
          kMaxMlpParameters, " (1 GiB of float32) a model may have; use narrower layers"));
    }
    return choice;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--model: unsupported value \"", name,
                   "\"; allowed: mlp, cnn, or mlp:W1,W2,... for an MLP with those hidden widths"));
}

}  // namespace

absl::Status CheckModelName(absl::string_view name) { return ParseModelName(name).status(); }

absl::StatusOr<std::unique_ptr<Model>> MakeMlp(Device& device, const MlpOptions& options) {
  if (options.inputs < 1 || options.classes < 2) {
    return absl::InvalidArgumentError("mlp needs at least 1 input and 2 classes");
  }
  Layers layers;
  int width = options.inputs;
  for (size_t i = 0; i < options.hidden.size(); ++i) {
    if (options.hidden[i] < 1) return absl::InvalidArgumentError("mlp hidden width must be > 0");
    const std::string suffix = std::to_string(i + 1);
    layers.push_back(std::make_unique<Dense>(device, "dense" + suffix, width, options.hidden[i],
                                             WeightInit::kHeNormal, Activation::kRelu));
    width = options.hidden[i];
  }
  layers.push_back(std::make_unique<Dense>(device, "logits", width, options.classes,
                                           WeightInit::kGlorotUniform));
  return Finish(device, "mlp", options.classes, std::move(layers), options.seed);
}

absl::StatusOr<std::unique_ptr<Model>> MakeCnn(Device& device, const CnnOptions& o) {
  if (o.height < 4 || o.width < 4 || o.kernel % 2 == 0 || o.classes < 2 || o.channels < 1 ||
      o.conv1_filters < 1 || o.conv2_filters < 1 || o.hidden < 1) {
    return absl::InvalidArgumentError(
        "cnn needs images of at least 4x4, an odd kernel, 2+ classes and positive widths");
  }
  Layers layers;
  auto [h1, w1] =
      AddConvBlock(device, layers, 1, {o.height, o.width, o.channels, o.conv1_filters, o.kernel});
  auto [h2, w2] =
      AddConvBlock(device, layers, 2, {h1, w1, o.conv1_filters, o.conv2_filters, o.kernel});
  const int flat = h2 * w2 * o.conv2_filters;  // NHWC flattening needs no reshape kernel
  layers.push_back(std::make_unique<Dense>(device, "dense1", flat, o.hidden, WeightInit::kHeNormal,
                                           Activation::kRelu));
  layers.push_back(
      std::make_unique<Dense>(device, "logits", o.hidden, o.classes, WeightInit::kGlorotUniform));
  return Finish(device, "cnn", o.classes, std::move(layers), o.seed);
}

absl::StatusOr<std::unique_ptr<Model>> MakeModel(absl::string_view name, Device& device,
                                                 uint64_t seed) {
  ASSIGN_OR_RETURN(ModelChoice choice, ParseModelName(name));
  if (choice.cnn) return MakeCnn(device, {.seed = seed});
  choice.mlp.seed = seed;
  return MakeMlp(device, choice.mlp);
}

}  // namespace kubetrain::worker
