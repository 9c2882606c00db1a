// Fully connected layer y = x W + b with W stored [in, out] (TensorFlow's layout).
#pragma once

#include "worker/core/layers/layer.h"

namespace kubetrain::worker {

// How Dense and Conv2D draw their kernels; biases always start at zero.
enum class WeightInit {
  kHeNormal,       // N(0, 2 / fan_in): keeps activation variance through ReLU layers
  kGlorotUniform,  // U(+-sqrt(6 / (fan_in + fan_out))): for the linear logits layer
};

// An activation fused into Dense and Conv2D: applied to the layer's output in the same pass as the
// bias (and its gradient with the bias gradient), which saves a layer, a buffer and two passes
// over memory compared with a separate Relu layer.
enum class Activation {
  kNone,
  kRelu,
};

// Fills `host` (n values) with draws for a kernel of the given fans.
void DrawWeights(WeightInit init, int64_t fan_in, int64_t fan_out, Rng& rng, float* host,
                 int64_t n);

// y = activation(x W + b). Owns variables `<name>/kernel` [in, out] and `<name>/bias` [out] plus
// its output and input-grad buffers (and, with an activation, the pre-activation gradient).
// Not thread-safe.
class Dense final : public Layer {
 public:
  Dense(Device& device, std::string name, int in, int out, WeightInit init,
        Activation activation = Activation::kNone);

  void Reserve(int capacity) override;
  void Initialize(Rng& rng) override;
  const float* Forward(const float* input, int batch) override;
  const float* Backward(const float* input, const float* output_grad, int batch,
                        bool need_input_grad) override;
  std::vector<Variable*> variables() override { return {&kernel_, &bias_}; }
  int fused_layers() const override { return activation_ == Activation::kNone ? 1 : 2; }

 private:
  Device& device_;
  int in_;
  int out_;
  WeightInit init_;
  Activation activation_;
  Variable kernel_;
  Variable bias_;
  Tensor output_;
  Tensor input_grad_;
  Tensor preactivation_grad_;  // only with an activation
};

}  // namespace kubetrain::worker
