// cuDNN descriptors for one convolution layer, as the CUDA backend's convolutions
// (worker/cuda/cudnn_convolution.cc) and train_step's bare cuDNN reference
// (bench/train_step/backends.cc) both make them: NHWC images, the filter in NHWC (OHWI), 'same'
// padding, float32 sums; the images' and filter's type float32, or bf16 under --precision=bf16.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status.h"
#include "worker/core/convolution.h"
#include "worker/cuda/cuda_check.h"
#include "worker/cuda/cudnn_convolution.h"

namespace kubetrain::worker::cuda {

// Owners of cuDNN descriptors, destroyed with their library's call.
template <typename Handle, cudnnStatus_t (*Destroy)(Handle)>
struct DescriptorDeleter {
  void operator()(Handle handle) const {
    LogIfError(KT_CUDNN_STATUS(Destroy(handle)), "Failed to destroy a cuDNN descriptor");
  }
};
template <typename Handle, cudnnStatus_t (*Destroy)(Handle)>
using Descriptor =
    std::unique_ptr<std::remove_pointer_t<Handle>, DescriptorDeleter<Handle, Destroy>>;
using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDescriptor = Descriptor<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;

inline absl::StatusOr<TensorDescriptor> NhwcTensor(cudnnDataType_t type, int n, int c, int h,
                                                   int w) {
  cudnnTensorDescriptor_t raw = nullptr;
  KT_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&raw));
  TensorDescriptor d(raw);
  KT_CUDNN_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(raw, CUDNN_TENSOR_NHWC, type, n, c, h, w));
  return d;
}

// The filter and convolution descriptors of `shape`, which every batch size shares.
struct LayerDescriptors {
  FilterDescriptor filter;
  ConvDescriptor conv;
};

// `tf32`: FP32 convolutions may run on tensor cores in TF32 (CUDNN_DEFAULT_MATH, where the GPU
// has them); false keeps them in FP32 (CUDNN_FMA_MATH). bf16 ones run on tensor cores either way,
// summing in float32 (the convolution descriptor's type: cuDNN's PSEUDO_BFLOAT16_CONFIG).
inline absl::StatusOr<LayerDescriptors> DescribeLayer(const Conv2DShape& shape,
                                                      cudnnDataType_t type, bool tf32) {
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  KT_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&filter));
  LayerDescriptors d;
  d.filter.reset(filter);
  KT_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&conv));
  d.conv.reset(conv);
  const int pad = shape.kernel / 2;
  KT_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(filter, type, CUDNN_TENSOR_NHWC,
                                                      shape.filters, shape.in_channels,
                                                      shape.kernel, shape.kernel));
  KT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      conv, pad, pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  KT_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(
      conv, tf32 || type != CUDNN_DATA_FLOAT ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  return d;
}

// cuDNN's perf results of one direction as trials for ChooseAlgorithm.
template <typename Perf>
std::vector<AlgorithmTrial> Trials(const Perf* perf, int count) {
  std::vector<AlgorithmTrial> trials;
  for (int i = 0; i < count; ++i) {
    trials.push_back({static_cast<int>(perf[i].algo), perf[i].status == CUDNN_STATUS_SUCCESS,
                      perf[i].time, perf[i].memory});
  }
  return trials;
}

// One layer's convolution at one batch size as cuDNN's calls take it: x the images (or their
// gradient), y the output (or its gradient), and the workspace every algorithm must fit in.
struct ConvolutionSetting {
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr;
  cudnnFilterDescriptor_t filter = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The algorithm ChooseAlgorithm takes from cuDNN's timed trials of one direction on these
// operands (cudnnFind*AlgorithmEx, which writes the output); nullopt when none fits the
// workspace. Errors are cuDNN's.
template <typename Algo, typename Perf>
std::optional<Algo> Fastest(const Perf* perf, int found, size_t workspace_bytes) {
  const std::optional<AlgorithmTrial> best = ChooseAlgorithm(Trials(perf, found), workspace_bytes);
  if (!best) return std::nullopt;
  return static_cast<Algo>(best->algorithm);
}
inline absl::StatusOr<std::optional<cudnnConvolutionFwdAlgo_t>> FastestForward(
    const ConvolutionSetting& s, const void* x, const void* w, void* y) {
  std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
  int found = 0;
  KT_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithmEx(
      s.handle, s.x, x, s.filter, w, s.conv, s.y, y, static_cast<int>(perf.size()), &found,
      perf.data(), s.workspace, s.workspace_bytes));
  return Fastest<cudnnConvolutionFwdAlgo_t>(perf.data(), found, s.workspace_bytes);
}
inline absl::StatusOr<std::optional<cudnnConvolutionBwdFilterAlgo_t>> FastestBackwardFilter(
    const ConvolutionSetting& s, const void* x, const void* dy, void* dw) {
  std::array<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT> perf{};
  int found = 0;
  KT_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithmEx(
      s.handle, s.x, x, s.y, dy, s.conv, s.filter, dw, static_cast<int>(perf.size()), &found,
      perf.data(), s.workspace, s.workspace_bytes));
  return Fastest<cudnnConvolutionBwdFilterAlgo_t>(perf.data(), found, s.workspace_bytes);
}
inline absl::StatusOr<std::optional<cudnnConvolutionBwdDataAlgo_t>> FastestBackwardData(
    const ConvolutionSetting& s, const void* w, const void* dy, void* dx) {
  std::array<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT> perf{};
  int found = 0;
  KT_CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithmEx(
      s.handle, s.filter, w, s.y, dy, s.conv, s.x, dx, static_cast<int>(perf.size()), &found,
      perf.data(), s.workspace, s.workspace_bytes));
  return Fastest<cudnnConvolutionBwdDataAlgo_t>(perf.data(), found, s.workspace_bytes);
}

}  // namespace kubetrain::worker::cuda
