// Where "now" comes from: the real clock in programs, a FakeClock in unit tests, so time rules
// (deadlines, TTLs, delayed work) are tested in milliseconds without sleeping. Thread-safe.
#pragma once

#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;

  // The process's real clock (absl::Now).
  static const Clock& Real();
};

class RealClock : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

inline const Clock& Clock::Real() {
  static const RealClock kReal;
  return kReal;
}

// Time that moves only when told to.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}

  absl::Time Now() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = t;
  }

 private:
  mutable std::mutex mu_;
  absl::Time now_;
};

}  // namespace kubetrain
