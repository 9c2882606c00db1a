// A backend's own kernels for one convolution layer (cuDNN's on a GPU), beside the im2col + GEMM
// path every backend has (worker/core/layers/conv2d.h), and how such a backend picks among its
// algorithms for a shape (docs/architecture.md §5.8).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kubetrain::worker {

// A 2-D convolution layer: stride 1, 'same' zero padding, NHWC images, an HWIO kernel.
struct Conv2DShape {
  int height = 0;
  int width = 0;
  int in_channels = 0;
  int filters = 0;
  int kernel = 5;  // odd, so 'same' padding is kernel / 2 on every side
};

// A convolution as 4-d descriptors (cuDNN's) take it, every size in NCHW order whatever the
// memory layout: input (n, c, h, w), filters (k, c, r, s), output (n, k, p, q).
struct ConvolutionDims {
  int n = 0, c = 0, h = 0, w = 0;
  int k = 0, r = 0, s = 0;
  int pad = 0, stride = 1, dilation = 1;
  int p = 0, q = 0;
  int64_t input_elements() const { return int64_t{n} * c * h * w; }
  int64_t filter_elements() const { return int64_t{k} * c * r * s; }
  int64_t output_elements() const { return int64_t{n} * k * p * q; }
};

// The dims of `shape` over `batch` images: padding kernel / 2, stride and dilation 1, so the
// output has the input's height and width. INVALID_ARGUMENT naming the field when a size is not
// positive, the kernel is even, or an element count passes what 32-bit indexing reaches.
absl::StatusOr<ConvolutionDims> DescribeConvolution(const Conv2DShape& shape, int batch);

// Convolution kernels for one Conv2DShape, any batch size: no bias and no activation (the layer
// adds them in its fused bias + ReLU kernels). Pointers are the device's; `w` and `dw` are HWIO
// [kernel, kernel, in_channels, filters], as the layer's variable is. Issued in order on the
// device's queue like its other kernels; errors surface at its next Synchronize.
class ConvolutionKernels {
 public:
  virtual ~ConvolutionKernels() = default;
  // y[batch, H, W, filters] = conv(x[batch, H, W, in_channels], w).
  virtual void Forward(int batch, const float* x, const float* w, float* y) = 0;
  // dw = dLoss/dw summed over the batch (overwrites dw).
  virtual void BackwardFilter(int batch, const float* x, const float* dy, float* dw) = 0;
  // dx = dLoss/dx (overwrites dx).
  virtual void BackwardData(int batch, const float* dy, const float* w, float* dx) = 0;
};

enum class ConvolutionDirection { kForward, kBackwardFilter, kBackwardData };

// Another device's kernels, each call run through `around(direction, call)`: how a decorating
// Device (a profiler, a launch counter) passes a backend's convolutions through.
class ObservedConvolution final : public ConvolutionKernels {
 public:
  using Around = std::function<void(ConvolutionDirection, const std::function<void()>&)>;
  ObservedConvolution(std::unique_ptr<ConvolutionKernels> inner, Around around)
      : inner_(std::move(inner)), around_(std::move(around)) {}

  void Forward(int batch, const float* x, const float* w, float* y) override {
    around_(ConvolutionDirection::kForward, [&] { inner_->Forward(batch, x, w, y); });
  }
  void BackwardFilter(int batch, const float* x, const float* dy, float* dw) override {
    around_(ConvolutionDirection::kBackwardFilter,
            [&] { inner_->BackwardFilter(batch, x, dy, dw); });
  }
  void BackwardData(int batch, const float* dy, const float* w, float* dx) override {
    around_(ConvolutionDirection::kBackwardData, [&] { inner_->BackwardData(batch, dy, w, dx); });
  }

 private:
  std::unique_ptr<ConvolutionKernels> inner_;
  Around around_;
};

// One algorithm as a backend measured or estimated it for one shape (cuDNN's perf results).
struct AlgorithmTrial {
  int algorithm = 0;
  bool ok = false;            // it ran (or would run) for this shape
  float milliseconds = 0.0f;  // its time; a heuristic's rank order where none was measured
  size_t workspace_bytes = 0;
};

// The fastest trial that ran and whose workspace fits `workspace_limit`; of equally fast ones,
// the one that needs less workspace, then the lower algorithm number, so that the choice does
// not depend on the order the backend listed them in. nullopt when none qualifies.
std::optional<AlgorithmTrial> ChooseAlgorithm(absl::Span<const AlgorithmTrial> trials,
                                              size_t workspace_limit);

// The workspace one convolution algorithm may take on a device with `free_bytes` free: an
// eighth of it, at most 256 MiB (PyTorch lets cuDNN take what it can get; a worker also holds
// the ps exchange's and NCCL's buffers, so it keeps most of the memory for them).
size_t ConvolutionWorkspaceLimit(size_t free_bytes);

// The last `capacity` (>= 1) values put, by key: a backend keeps one plan (descriptors and
// algorithms) per batch size it has seen; a run sees two (the batch and the epoch's last,
// shorter one), an evaluator a third. The least recently used plan goes first.
template <typename Key, typename Value>
class BoundedCache {
 public:
  explicit BoundedCache(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  // The value under `key` (now the most recently used), or null.
  Value* Find(const Key& key) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->first == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return &entries_.front().second;
      }
    }
    return nullptr;
  }
  // Puts `value` under `key` (replacing one there), dropping the least recently used entry when
  // full; returns it.
  Value& Put(const Key& key, Value value) {
    if (Value* found = Find(key)) {
      *found = std::move(value);
      return *found;
    }
    if (entries_.size() == capacity_) entries_.pop_back();
    entries_.emplace_front(key, std::move(value));
    return entries_.front().second;
  }
  size_t size() const { return entries_.size(); }

 private:
  size_t capacity_;
  std::list<std::pair<Key, Value>> entries_;  // most recently used first
};

}  // namespace kubetrain::worker
