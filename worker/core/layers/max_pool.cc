#include "worker/core/layers/max_pool.h"

namespace kubetrain::worker {

MaxPool2x2::MaxPool2x2(Device& device, std::string name, int height, int width, int channels)
    : Layer(std::move(name), static_cast<int64_t>(height) * width * channels,
            static_cast<int64_t>(height / 2) * (width / 2) * channels),
      device_(device),
      height_(height),
      width_(width),
      channels_(channels) {}

PoolGeometry MaxPool2x2::Geometry(int batch) const {
  return PoolGeometry{batch, height_, width_, channels_};
}

void MaxPool2x2::Reserve(int capacity) {
  output_ = Tensor(device_, {capacity, output_size()});
  argmax_ = IntTensor(device_, {capacity, output_size()});
  input_grad_ = Tensor(device_, {capacity, input_size()});
}

const float* MaxPool2x2::Forward(const float* input, int batch) {
  device_.MaxPool2x2(Geometry(batch), input, output_.data(), argmax_.data());
  return output_.data();
}

const float* MaxPool2x2::Backward(const float* /*input*/, const float* output_grad, int batch,
                                  bool need_input_grad) {
  if (!need_input_grad) return nullptr;
  device_.MaxPool2x2Grad(Geometry(batch), output_grad, argmax_.data(), input_grad_.data());
  return input_grad_.data();
}

}  // namespace kubetrain::worker
