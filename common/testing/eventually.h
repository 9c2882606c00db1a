// Test support: a bounded poll for a condition that another thread or process brings about.
//
//   ASSERT_TRUE(Eventually([&] { return informer.size() == 3; }));
//   EXPECT_TRUE(Eventually([&] { return parked() == 0; }, absl::Seconds(5)));
//
// The one polling loop for every test folder; a test that needs another cadence passes `poll`.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kubetrain::testing {

inline constexpr absl::Duration kEventuallyTimeout = absl::Seconds(15);
inline constexpr absl::Duration kEventuallyPoll = absl::Milliseconds(20);

// Calls `pred` until it returns true (then returns true) or until `timeout` has passed since
// Eventually was called (then returns false), sleeping `poll` between calls.
template <typename Pred>
bool Eventually(Pred pred, absl::Duration timeout = kEventuallyTimeout,
                absl::Duration poll = kEventuallyPoll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!pred()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(poll);
  }
  return true;
}

}  // namespace kubetrain::testing
