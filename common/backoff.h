// Exponential backoff with full jitter, for retrying calls to peers that are not up yet.
//
//   Backoff backoff({.initial = absl::Seconds(1), .max = absl::Seconds(30)});
//   while (!TryConnect().ok()) absl::SleepFor(backoff.Next());
//
// Not thread-safe: one Backoff per retry loop.
#pragma once

#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace kubetrain {

struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(800);
  absl::Duration max = absl::Seconds(30);
  double multiplier = 2.0;
  // Fraction of each delay that is randomised: 0 gives fixed delays, 1 gives [0, delay].
  double jitter = 0.2;
};

class Backoff {
 public:
  explicit Backoff(BackoffOptions options = {}, uint64_t seed = std::random_device{}());

  // The delay to wait before the next attempt; grows until it reaches options.max.
  absl::Duration Next();
  // Call after a success so the next failure starts from options.initial again.
  void Reset();
  int attempts() const { return attempts_; }

 private:
  BackoffOptions options_;
  absl::Duration current_;
  int attempts_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace kubetrain
