#include "worker/core/convolution.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::worker {

std::optional<AlgorithmTrial> ChooseAlgorithm(absl::Span<const AlgorithmTrial> trials,
                                              size_t workspace_limit) {
  std::optional<AlgorithmTrial> best;
  for (const AlgorithmTrial& t : trials) {
    if (!t.ok || t.workspace_bytes > workspace_limit || !(t.milliseconds >= 0.0f)) continue;
    if (!best || std::tie(t.milliseconds, t.workspace_bytes, t.algorithm) <
                     std::tie(best->milliseconds, best->workspace_bytes, best->algorithm)) {
      best = t;
    }
  }
  return best;
}

absl::StatusOr<ConvolutionDims> DescribeConvolution(const Conv2DShape& shape, int batch) {
  const std::pair<const char*, int> sizes[] = {
      {"batch", batch},           {"height", shape.height},
      {"width", shape.width},     {"in_channels", shape.in_channels},
      {"filters", shape.filters}, {"kernel", shape.kernel}};
  for (const auto& [field, value] : sizes) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("convolution ", field, ": must be at least 1, got ", value));
    }
  }
  if (shape.kernel % 2 == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("convolution kernel: must be odd for 'same' padding, got ", shape.kernel));
  }
  ConvolutionDims d;
  d.n = batch;
  d.c = shape.in_channels;
  d.h = shape.height;
  d.w = shape.width;
  d.k = shape.filters;
  d.r = d.s = shape.kernel;
  d.pad = shape.kernel / 2;
  d.p = (d.h + 2 * d.pad - d.dilation * (d.r - 1) - 1) / d.stride + 1;
  d.q = (d.w + 2 * d.pad - d.dilation * (d.s - 1) - 1) / d.stride + 1;
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const auto& [what, elements] : {std::pair<const char*, int64_t>{"input", d.input_elements()},
                                       {"filter", d.filter_elements()},
                                       {"output", d.output_elements()}}) {
    if (elements > kMax) {
      return absl::InvalidArgumentError(absl::StrCat("convolution ", what, ": ", elements,
                                                     " elements, more than 2^31 - 1; use a "
                                                     "smaller batch"));
    }
  }
  return d;
}

size_t ConvolutionWorkspaceLimit(size_t free_bytes) {
  return std::min<size_t>(free_bytes / 8, size_t{256} << 20);
}

}  // namespace kubetrain::worker
