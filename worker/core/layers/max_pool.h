// 2x2, stride-2 max pooling over NHWC images.
#pragma once

#include "worker/core/layers/layer.h"

namespace kubetrain::worker {

// Owns its output, the winners' indices (for backward) and the input-grad buffer.
// Not thread-safe.
class MaxPool2x2 final : public Layer {
 public:
  MaxPool2x2(Device& device, std::string name, int height, int width, int channels);

  void Reserve(int capacity) override;
  const float* Forward(const float* input, int batch) override;
  const float* Backward(const float* input, const float* output_grad, int batch,
                        bool need_input_grad) override;

 private:
  PoolGeometry Geometry(int batch) const;

  Device& device_;
  int height_;
  int width_;
  int channels_;
  Tensor output_;
  IntTensor argmax_;
  Tensor input_grad_;
};

}  // namespace kubetrain::worker
