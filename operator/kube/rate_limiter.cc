#include "operator/kube/rate_limiter.h"

#include <algorithm>

#include "absl/time/clock.h"

namespace kubetrain::kube {

TokenBucket::TokenBucket(double qps, int burst, std::function<absl::Time()> now)
    : qps_(qps), burst_(std::max(burst, 1)), tokens_(burst_), now_(std::move(now)), last_(now_()) {}

absl::Duration TokenBucket::Reserve() {
  if (qps_ <= 0) return absl::ZeroDuration();
  std::lock_guard<std::mutex> lock(mu_);
  absl::Time now = now_();
  tokens_ = std::min(burst_, tokens_ + absl::ToDoubleSeconds(now - last_) * qps_);
  last_ = now;
  tokens_ -= 1;  // may go negative: the debt is the queue of callers waiting for tokens
  if (tokens_ >= 0) return absl::ZeroDuration();
  return absl::Seconds(-tokens_ / qps_);
}

absl::Duration TokenBucket::Wait() {
  absl::Duration wait = Reserve();
  if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
  return wait;
}

}  // namespace kubetrain::kube
