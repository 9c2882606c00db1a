// Element-wise max(x, 0).
#pragma once

#include "worker/core/layers/layer.h"

namespace kubetrain::worker {

// Owns its output and input-grad buffers. Not thread-safe.
class Relu final : public Layer {
 public:
  Relu(Device& device, std::string name, int64_t size);

  void Reserve(int capacity) override;
  const float* Forward(const float* input, int batch) override;
  const float* Backward(const float* input, const float* output_grad, int batch,
                        bool need_input_grad) override;

 private:
  Device& device_;
  Tensor output_;
  Tensor input_grad_;
};

}  // namespace kubetrain::worker
