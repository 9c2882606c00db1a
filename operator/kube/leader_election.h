// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: acquire when the
// lease is free or its holder has not renewed within leaseDuration (judged by this process's
// clock from when it last saw the record change), renew every retryPeriod, give leadership up
// when a renewal has not succeeded for renewDeadline. Mutual exclusion rests on the API server's
// resourceVersion check on PUT (409 for the loser).
//
// Thread-safe: Run blocks in one thread; IsLeader may be read from any.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "operator/kube/client.h"

namespace kubetrain::kube {

struct LeaderElectionOptions {
  std::string namespace_;
  std::string name;      // the Lease
  std::string identity;  // this process, unique (hostname + random suffix)
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  bool release_on_stop = true;  // hand the lease over at once when stopped
};

struct LeaderCallbacks {
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;
};

class LeaderElector {
 public:
  LeaderElector(Client& client, LeaderElectionOptions options, LeaderCallbacks callbacks);

  // Campaigns until leader, then renews until leadership is lost (returns UNAVAILABLE) or
  // `stop` is set (returns OK, after releasing the lease if configured). Returns at once the
  // error of an API server whose certificate fails verification, which retrying cannot fix.
  // Failures to read or write the lease are logged, each new cause once.
  absl::Status Run(const std::atomic<bool>& stop);
  bool IsLeader() const { return leader_.load(); }

 private:
  // One acquire-or-renew attempt; true when this process holds the lease afterwards.
  bool TryAcquireOrRenew();
  // Logs `s` unless it repeats the last failure; remembers a TLS verification failure.
  void NoteFailure(const absl::Status& s);
  void Release();
  void Observe(const nlohmann::json& lease);

  Client& client_;
  const LeaderElectionOptions options_;
  const LeaderCallbacks callbacks_;
  std::atomic<bool> leader_{false};
  std::optional<nlohmann::json> last_lease_;  // as last read or written
  std::string observed_holder_;
  std::string last_failure_;
  absl::Status fatal_;
  std::string observed_record_;
  absl::Time observed_time_ = absl::InfinitePast();
};

}  // namespace kubetrain::kube
