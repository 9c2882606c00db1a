#include "worker/core/layers/conv2d.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kubetrain::worker {

Conv2D::Conv2D(Device& device, std::string name, const Conv2DShape& shape, Activation activation)
    : Layer(name, static_cast<int64_t>(shape.height) * shape.width * shape.in_channels,
            static_cast<int64_t>(shape.height) * shape.width * shape.filters),
      device_(device),
      shape_(shape),
      activation_(activation),
      chunk_images_(static_cast<int>(
          std::max<int64_t>(1, device.ColumnBudgetBytes() /
                                   (pixels() * patch() * static_cast<int64_t>(sizeof(float)))))),
      kernel_(device, absl::StrCat(name, "/kernel"),
              {shape.kernel, shape.kernel, shape.in_channels, shape.filters}),
      bias_(device, absl::StrCat(name, "/bias"), {shape.filters}),
      kernels_(device.MakeConvolution(shape)) {
  // The device's kernels take the whole batch: one chunk.
  if (kernels_ != nullptr) chunk_images_ = std::numeric_limits<int>::max();
}

ConvGeometry Conv2D::Geometry(int images) const {
  return ConvGeometry{
      images, shape_.height, shape_.width, shape_.in_channels, shape_.kernel, shape_.kernel / 2, 1};
}

void Conv2D::Reserve(int capacity) {
  output_ = Tensor(device_, {capacity, output_size()});
  input_grad_ = Tensor(device_, {capacity, input_size()});
  const int chunk = std::min(capacity, chunk_images_);
  if (kernels_ == nullptr) columns_ = Tensor(device_, {chunk * pixels(), patch()});
  if (activation_ != Activation::kNone) {
    chunk_grad_ = Tensor(device_, {chunk, output_size()});
    chunk_bias_grad_ = Tensor(device_, {shape_.filters});
  }
}

void Conv2D::Initialize(Rng& rng) {
  std::vector<float> host(static_cast<size_t>(kernel_.size()));
  DrawWeights(WeightInit::kHeNormal, patch(),
              static_cast<int64_t>(shape_.kernel) * shape_.kernel * shape_.filters, rng,
              host.data(), kernel_.size());
  device_.Upload(host.data(), kernel_.value, kernel_.size());
  device_.Fill(bias_.size(), 0.0f, bias_.value.data());
}

const float* Conv2D::Forward(const float* input, int batch) {
  for (int start = 0; start < batch; start += chunk_images_) {
    const int images = std::min(chunk_images_, batch - start);
    const int rows = static_cast<int>(images * pixels());
    float* y = output_.data() + start * output_size();
    if (kernels_ != nullptr) {
      kernels_->Forward(images, input + start * input_size(), kernel_.value.data(), y);
    } else {
      device_.Im2Col(Geometry(images), input + start * input_size(), columns_.data());
      device_.Gemm(false, false, rows, shape_.filters, static_cast<int>(patch()), 1.0f,
                   columns_.data(), kernel_.value.data(), 0.0f, y);
    }
    // While the chunk's output is still in cache.
    if (activation_ == Activation::kRelu) {
      device_.AddBiasRelu(rows, shape_.filters, bias_.value.data(), y);
    } else {
      device_.AddBias(rows, shape_.filters, bias_.value.data(), y);
    }
  }
  return output_.data();
}

const float* Conv2D::ChunkPreactivationGrad(const float* output_grad, int start, int images) {
  const float* dy = output_grad + start * output_size();
  if (activation_ == Activation::kNone) return dy;
  const int rows = static_cast<int>(images * pixels());
  float* db = start == 0 ? bias_.grad.data() : chunk_bias_grad_.data();
  device_.ReluBiasGrad(rows, shape_.filters, output_.data() + start * output_size(), dy,
                       chunk_grad_.data(), db);
  if (start > 0) device_.Axpy(shape_.filters, 1.0f, db, bias_.grad.data());
  return chunk_grad_.data();
}

const float* Conv2D::Backward(const float* input, const float* output_grad, int batch,
                              bool need_input_grad) {
  if (activation_ == Activation::kNone) {
    device_.BiasGrad(static_cast<int>(batch * pixels()), shape_.filters, output_grad,
                     bias_.grad.data());
  }
  for (int start = 0; start < batch; start += chunk_images_) {
    const int images = std::min(chunk_images_, batch - start);
    const int rows = static_cast<int>(images * pixels());
    const float* dz = ChunkPreactivationGrad(output_grad, start, images);
    if (kernels_ != nullptr) {  // the whole batch: start is 0
      kernels_->BackwardFilter(images, input, dz, kernel_.grad.data());
      if (need_input_grad) {
        kernels_->BackwardData(images, dz, kernel_.value.data(), input_grad_.data());
      }
      continue;
    }
    const ConvGeometry g = Geometry(images);
    // dW (+)= columns^T dz; the first chunk overwrites, later ones accumulate.
    device_.Im2Col(g, input + start * input_size(), columns_.data());
    device_.Gemm(true, false, static_cast<int>(patch()), shape_.filters, rows, 1.0f,
                 columns_.data(), dz, start == 0 ? 0.0f : 1.0f, kernel_.grad.data());
    if (!need_input_grad) continue;
    // dColumns = dz W^T reuses the column buffer, then folds back onto the image.
    device_.Gemm(false, true, rows, static_cast<int>(patch()), shape_.filters, 1.0f, dz,
                 kernel_.value.data(), 0.0f, columns_.data());
    device_.Col2Im(g, columns_.data(), input_grad_.data() + start * input_size());
  }
  return need_input_grad ? input_grad_.data() : nullptr;
}

}  // namespace kubetrain::worker
