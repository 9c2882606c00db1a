// 2-D convolution, stride 1, 'same' zero padding, over NHWC images, as im2col + GEMM.
#pragma once

#include "worker/layers/dense.h"
#include "worker/layers/layer.h"

namespace kubetrain::worker {

struct Conv2DShape {
  int height = 0;
  int width = 0;
  int in_channels = 0;
  int filters = 0;
  int kernel = 5;  // odd, so 'same' padding is kernel / 2 on every side
};

// Owns `<name>/kernel` [k, k, in, filters] (HWIO, TensorFlow's layout) and `<name>/bias`
// [filters], plus the output, input-grad and one column buffer. The column buffer holds a chunk
// of images at a time (about kColumnBudgetBytes), so memory stays bounded for any batch size;
// backward recomputes the chunk's columns instead of keeping every one. Not thread-safe.
class Conv2D final : public Layer {
 public:
  static constexpr int64_t kColumnBudgetBytes = 8 << 20;

  Conv2D(Device& device, std::string name, const Conv2DShape& shape);

  void Reserve(int capacity) override;
  void Initialize(Rng& rng) override;
  const float* Forward(const float* input, int batch) override;
  const float* Backward(const float* input, const float* output_grad, int batch,
                        bool need_input_grad) override;
  std::vector<Variable*> variables() override { return {&kernel_, &bias_}; }

 private:
  ConvGeometry Geometry(int images) const;
  int64_t pixels() const { return static_cast<int64_t>(shape_.height) * shape_.width; }
  int64_t patch() const {
    return static_cast<int64_t>(shape_.kernel) * shape_.kernel * shape_.in_channels;
  }

  Device& device_;
  Conv2DShape shape_;
  int chunk_images_;  // images per im2col chunk
  Variable kernel_;
  Variable bias_;
  Tensor output_;
  Tensor input_grad_;
  Tensor columns_;
};

}  // namespace kubetrain::worker
