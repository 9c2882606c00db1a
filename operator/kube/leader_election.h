// Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: acquire when the
// lease is free or its holder has not renewed within leaseDuration (judged by this process's
// clock from when it last saw the record change), renew every retryPeriod, give leadership up
// when a renewal has not succeeded for renewDeadline. Mutual exclusion rests on the API server's
// resourceVersion check on PUT (409 for the loser).
//
// What keeps two leaders from acting at once (docs/architecture.md §9):
// - the lease is read and written through the elector's own client, whose requests time out
//   after a quarter of (leaseDuration - renewDeadline) and are never retried after Retry-After,
//   so a stalled API server cannot stretch one renewal past the renew deadline, and a busy
//   controller's rate limit cannot delay it;
// - on_started_leading runs on its own thread: a controller waiting for its caches to sync does
//   not hold up renewals;
// - leadership lost: on_lost_leadership runs at once (it must cut the controller's API calls,
//   not wait for them), then the started callback is awaited, then on_stopped_leading;
// - stopping: the started callback is awaited, on_stopped_leading stops the workers, and only
//   then is the lease released.
//
// Thread-safe: Run blocks in one thread; IsLeader may be read from any.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
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
  // Runs on its own thread once leader; `stop_leading` becomes true when leadership ends (lost
  // or stopped), and the callback should then return promptly.
  std::function<void(const std::atomic<bool>& stop_leading)> on_started_leading;
  // Leadership was lost (not given up): called first, from Run's thread; must not block.
  std::function<void()> on_lost_leadership;
  // After on_started_leading has returned, lost or stopped, before the lease is released.
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& identity)> on_new_leader;
};

class LeaderElector {
 public:
  // `cluster` is where the Lease lives; the elector makes its own client for it.
  LeaderElector(ClusterConfig cluster, LeaderElectionOptions options, LeaderCallbacks callbacks);

  // Campaigns until leader, then renews until leadership is lost (returns UNAVAILABLE) or
  // `stop` is set (returns OK, after releasing the lease if configured). Returns at once the
  // error of an API server whose certificate fails verification, which retrying cannot fix.
  // Failures to read or write the lease are logged, each new cause once.
  absl::Status Run(const std::atomic<bool>& stop);
  // How long one lease request may take: a quarter of (leaseDuration - renewDeadline). A renewal
  // (read + write) that starts before the renew deadline ends at most half that gap after it,
  // leaving the other half for on_lost_leadership to act before another candidate can take the
  // lease.
  static absl::Duration RequestTimeout(const LeaderElectionOptions& options);
  bool IsLeader() const { return leader_.load(); }

 private:
  // One acquire-or-renew attempt; true when this process holds the lease afterwards.
  bool TryAcquireOrRenew();
  // Logs `s` unless it repeats the last failure; remembers a TLS verification failure.
  void NoteFailure(const absl::Status& s);
  void Release();
  void Observe(const nlohmann::json& lease);

  const ClusterConfig cluster_;
  std::unique_ptr<Client> client_;  // made by Run
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
