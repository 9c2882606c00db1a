#include "common/backoff.h"

#include <algorithm>

namespace kubetrain {

Backoff::Backoff(BackoffOptions options, uint64_t seed)
    : options_(options), current_(options.initial), rng_(seed) {}

absl::Duration Backoff::Next() {
  absl::Duration base = std::min(current_, options_.max);
  current_ = std::min(current_ * options_.multiplier, options_.max);
  ++attempts_;
  double jitter = std::clamp(options_.jitter, 0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Keep (1 - jitter) of the delay fixed and randomise the rest, so peers retrying together
  // spread out without ever retrying immediately.
  return base * (1.0 - jitter) + base * (jitter * unit(rng_));
}

void Backoff::Reset() {
  current_ = options_.initial;
  attempts_ = 0;
}

}  // namespace kubetrain
