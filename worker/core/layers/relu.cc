#include "worker/core/layers/relu.h"

namespace kubetrain::worker {

Relu::Relu(Device& device, std::string name, int64_t size)
    : Layer(std::move(name), size, size), device_(device) {}

void Relu::Reserve(int capacity) {
  output_ = Tensor(device_, {capacity, output_size()});
  input_grad_ = Tensor(device_, {capacity, input_size()});
}

const float* Relu::Forward(const float* input, int batch) {
  device_.Relu(batch * input_size(), input, output_.data());
  return output_.data();
}

const float* Relu::Backward(const float* /*input*/, const float* output_grad, int batch,
                            bool need_input_grad) {
  if (!need_input_grad) return nullptr;
  device_.ReluGrad(batch * input_size(), output_.data(), output_grad, input_grad_.data());
  return input_grad_.data();
}

}  // namespace kubetrain::worker
