// Percentiles of benchmark samples: one definition for every bench in bench/.
//
// Nearest rank, no interpolation: the q-th percentile of n samples is the ceil(q * n)-th
// smallest (1-based, at least the first), so it is always a sample that was measured. p100 is
// the maximum, p99 of 500 samples the 495th, and the median of an even count the lower of the two
// middle samples. No samples give T{}.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace kubetrain::bench {

template <typename T>
T Percentile(std::vector<T> samples, double q) {
  if (samples.empty()) return T{};
  const size_t n = samples.size();
  const double wanted = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(n));
  const size_t rank = std::clamp<size_t>(static_cast<size_t>(wanted), 1, n);
  std::nth_element(samples.begin(), samples.begin() + static_cast<std::ptrdiff_t>(rank - 1),
                   samples.end());
  return samples[rank - 1];
}

template <typename T>
T Median(std::vector<T> samples) {
  return Percentile(std::move(samples), 0.5);
}

}  // namespace kubetrain::bench
