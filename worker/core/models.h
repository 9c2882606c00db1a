// The model zoo: the two architectures of docs/architecture.md §5.7, built from layers on a Device.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/core/device.h"
#include "worker/core/model.h"

namespace kubetrain::worker {

// Dense layers with ReLU between them, then a linear logits layer.
// Defaults: 784-256-128-10. Variables: dense1/kernel, dense1/bias, ..., logits/kernel, logits/bias.
struct MlpOptions {
  int inputs = 784;
  std::vector<int> hidden = {256, 128};
  int classes = 10;
  uint64_t seed = 1;
};

// conv k×k·c1 'same' → ReLU → maxpool2 → conv k×k·c2 'same' → ReLU → maxpool2 → dense → ReLU →
// logits, NHWC. The default dense width is 128 (the TF tutorial uses 1024): 8× fewer dense
// parameters to push through the ps and to multiply on two shared cores, for little accuracy.
// Variables: conv1/{kernel,bias}, conv2/{kernel,bias}, dense1/{kernel,bias}, logits/{kernel,bias}.
struct CnnOptions {
  int height = 28;
  int width = 28;
  int channels = 1;
  int kernel = 5;
  int conv1_filters = 32;
  int conv2_filters = 64;
  int hidden = 128;
  int classes = 10;
  uint64_t seed = 1;
};

// Both return initialised models (from options.seed); INVALID_ARGUMENT on impossible shapes.
absl::StatusOr<std::unique_ptr<Model>> MakeMlp(Device& device, const MlpOptions& options = {});
absl::StatusOr<std::unique_ptr<Model>> MakeCnn(Device& device, const CnnOptions& options = {});

// A --model value: "mlp" or "cnn" with their default shapes, or "mlp:W1,W2,..." for the MLP with
// those hidden widths (each 1..65536, at most 16 layers, at most 2^28 parameters in all):
// "mlp:4096,4096,1024" has 24.2 M parameters, a model whose exchange, not its arithmetic, paces a
// step between nodes (bench/network). INVALID_ARGUMENT naming the value and the accepted forms
// otherwise.
absl::Status CheckModelName(absl::string_view name);

// The model a --model value names (CheckModelName), initialised from `seed`.
absl::StatusOr<std::unique_ptr<Model>> MakeModel(absl::string_view name, Device& device,
                                                 uint64_t seed);

}  // namespace kubetrain::worker
