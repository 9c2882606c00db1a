#include "worker/core/layers/dense.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kubetrain::worker {

void DrawWeights(WeightInit init, int64_t fan_in, int64_t fan_out, Rng& rng, float* host,
                 int64_t n) {
  if (init == WeightInit::kHeNormal) {
    const float stddev = std::sqrt(2.0f / static_cast<float>(fan_in));
    for (int64_t i = 0; i < n; ++i) host[i] = stddev * rng.Normal();
    return;
  }
  const float limit = std::sqrt(6.0f / static_cast<float>(fan_in + fan_out));
  for (int64_t i = 0; i < n; ++i) host[i] = limit * (2.0f * rng.Uniform() - 1.0f);
}

Dense::Dense(Device& device, std::string name, int in, int out, WeightInit init,
             Activation activation)
    : Layer(name, in, out),
      device_(device),
      in_(in),
      out_(out),
      init_(init),
      activation_(activation),
      kernel_(device, absl::StrCat(name, "/kernel"), {in, out}),
      bias_(device, absl::StrCat(name, "/bias"), {out}) {}

void Dense::Reserve(int capacity) {
  output_ = Tensor(device_, {capacity, out_});
  input_grad_ = Tensor(device_, {capacity, in_});
  if (activation_ != Activation::kNone) preactivation_grad_ = Tensor(device_, {capacity, out_});
}

void Dense::Initialize(Rng& rng) {
  std::vector<float> host(static_cast<size_t>(kernel_.size()));
  DrawWeights(init_, in_, out_, rng, host.data(), kernel_.size());
  device_.Upload(host.data(), kernel_.value, kernel_.size());
  device_.Fill(bias_.size(), 0.0f, bias_.value.data());
}

const float* Dense::Forward(const float* input, int batch) {
  float* y = output_.data();
  device_.Gemm(false, false, batch, out_, in_, 1.0f, input, kernel_.value.data(), 0.0f, y);
  if (activation_ == Activation::kRelu) {
    device_.AddBiasRelu(batch, out_, bias_.value.data(), y);
  } else {
    device_.AddBias(batch, out_, bias_.value.data(), y);
  }
  return y;
}

const float* Dense::Backward(const float* input, const float* output_grad, int batch,
                             bool need_input_grad) {
  // With z = x W + b the pre-activation: dz = dy (through the activation), db = column sums of
  // dz, dW = x^T dz, dx = dz W^T.
  const float* dz = output_grad;
  if (activation_ == Activation::kRelu) {
    device_.ReluBiasGrad(batch, out_, output_.data(), output_grad, preactivation_grad_.data(),
                         bias_.grad.data());
    dz = preactivation_grad_.data();
  } else {
    device_.BiasGrad(batch, out_, output_grad, bias_.grad.data());
  }
  device_.Gemm(true, false, in_, out_, batch, 1.0f, input, dz, 0.0f, kernel_.grad.data());
  if (!need_input_grad) return nullptr;
  device_.Gemm(false, true, batch, in_, out_, 1.0f, dz, kernel_.value.data(), 0.0f,
               input_grad_.data());
  return input_grad_.data();
}

}  // namespace kubetrain::worker
