// 2-D convolution, stride 1, 'same' zero padding, over NHWC images: the device's own kernels
// where it has them (cuDNN), else im2col + GEMM.
#pragma once

#include <memory>

#include "worker/core/convolution.h"
#include "worker/core/layers/dense.h"
#include "worker/core/layers/layer.h"

namespace kubetrain::worker {

// activation(conv(x, W) + b). Owns `<name>/kernel` [k, k, in, filters] (HWIO, TensorFlow's
// layout) and `<name>/bias` [filters], plus the output, input-grad and two scratch buffers sized
// for a chunk of images (about the device's ColumnBudgetBytes of columns): the column matrix
// and, with an
// activation, the chunk's pre-activation gradient. Working chunk by chunk keeps memory bounded
// for any batch size and, on a CPU, each chunk's columns and outputs in cache between the
// im2col, the GEMM and the bias/activation pass (1 MiB chunks: 20% faster CNN steps than 8 MiB,
// bench/train_step); a GPU takes the whole batch at once. Backward recomputes the chunk's
// columns instead of keeping every one. Not thread-safe.
class Conv2D final : public Layer {
 public:
  Conv2D(Device& device, std::string name, const Conv2DShape& shape,
         Activation activation = Activation::kNone);

  void Reserve(int capacity) override;
  void Initialize(Rng& rng) override;
  const float* Forward(const float* input, int batch) override;
  const float* Backward(const float* input, const float* output_grad, int batch,
                        bool need_input_grad) override;
  std::vector<Variable*> variables() override { return {&kernel_, &bias_}; }
  int fused_layers() const override { return activation_ == Activation::kNone ? 1 : 2; }

 private:
  ConvGeometry Geometry(int images) const;
  int64_t pixels() const { return static_cast<int64_t>(shape_.height) * shape_.width; }
  int64_t patch() const {
    return static_cast<int64_t>(shape_.kernel) * shape_.kernel * shape_.in_channels;
  }
  // dLoss/d(pre-activation) of the chunk at image `start`: the chunk's rows of `output_grad`
  // without an activation; else computed into chunk_grad_ together with the chunk's bias
  // gradient, which overwrites the bias grad for the first chunk and is added for later ones.
  const float* ChunkPreactivationGrad(const float* output_grad, int start, int images);

  Device& device_;
  Conv2DShape shape_;
  Activation activation_;
  int chunk_images_;  // images per im2col chunk
  Variable kernel_;
  Variable bias_;
  Tensor output_;
  Tensor input_grad_;
  Tensor columns_;
  Tensor chunk_grad_;       // pre-activation gradient of one chunk (with an activation)
  Tensor chunk_bias_grad_;  // one chunk's bias gradient, before it is added to the total
  std::unique_ptr<ConvolutionKernels> kernels_;  // the device's own, or null: im2col + GEMM
};

}  // namespace kubetrain::worker
