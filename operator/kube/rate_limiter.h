// A token bucket: `qps` tokens a second, at most `burst` saved up. Used for client-side API
// request limits and as the global limit of the work queue. Thread-safe.
#pragma once

#include <functional>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain::kube {

class TokenBucket {
 public:
  // qps <= 0 disables limiting. `now` is the clock (tests pass a fake one).
  TokenBucket(double qps, int burst, std::function<absl::Time()> now = absl::Now);

  // Takes a token, returning how long the caller must wait before using it (zero if one was
  // saved up). Reservations queue fairly: each caller gets the next token in line.
  absl::Duration Reserve();
  // Reserve() and sleep; returns the time waited.
  absl::Duration Wait();

 private:
  std::mutex mu_;
  const double qps_;
  const double burst_;
  double tokens_;
  std::function<absl::Time()> now_;
  absl::Time last_;
};

}  // namespace kubetrain::kube
