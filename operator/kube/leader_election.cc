#include "operator/kube/leader_election.h"

#include <algorithm>
#include <thread>

#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status.h"

namespace kubetrain::kube {

using nlohmann::json;

LeaderElector::LeaderElector(ClusterConfig cluster, LeaderElectionOptions options,
                             LeaderCallbacks callbacks)
    : cluster_(std::move(cluster)),
      options_(std::move(options)),
      callbacks_(std::move(callbacks)) {}

absl::Duration LeaderElector::RequestTimeout(const LeaderElectionOptions& options) {
  return std::max(absl::Milliseconds(50), (options.lease_duration - options.renew_deadline) / 4);
}

void LeaderElector::NoteFailure(const absl::Status& s) {
  // A 409 is the normal outcome of losing a race for the lease.
  if (s.ok() || s.code() == absl::StatusCode::kAborted ||
      s.code() == absl::StatusCode::kAlreadyExists) {
    return;
  }
  if (IsTlsVerificationError(s)) fatal_ = s;
  if (std::string(s.message()) == last_failure_) return;
  last_failure_ = std::string(s.message());
  log::Warn("Cannot acquire or renew the leader lease; retrying",
            {{"lease", options_.namespace_ + "/" + options_.name}, {"error", s}});
}

void LeaderElector::Observe(const json& lease) {
  std::string record = lease["spec"].dump();
  if (record != observed_record_) {
    observed_record_ = record;
    observed_time_ = absl::Now();
    std::string holder = lease["spec"].value("holderIdentity", "");
    if (holder != observed_holder_) {
      observed_holder_ = holder;
      if (!holder.empty() && callbacks_.on_new_leader) callbacks_.on_new_leader(holder);
    }
  }
  last_lease_ = lease;
}

bool LeaderElector::TryAcquireOrRenew() {
  const Resource leases = Resource::Leases();
  absl::Time now = absl::Now();
  json spec = {{"holderIdentity", options_.identity},
               {"leaseDurationSeconds", absl::ToInt64Seconds(options_.lease_duration)},
               {"renewTime", FormatMicroTime(now)}};
  absl::StatusOr<json> current = client_->Get(leases, options_.namespace_, options_.name);
  if (current.status().code() == absl::StatusCode::kNotFound) {
    spec["acquireTime"] = FormatMicroTime(now);
    spec["leaseTransitions"] = 0;
    json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", options_.name}, {"namespace", options_.namespace_}}},
                  {"spec", spec}};
    absl::StatusOr<json> created = client_->Create(leases, options_.namespace_, lease);
    if (!created.ok()) {  // usually: another candidate created it first
      NoteFailure(created.status());
      return false;
    }
    Observe(*created);
    return true;
  }
  if (!current.ok()) {
    NoteFailure(current.status());
    return false;
  }
  last_failure_.clear();
  Observe(*current);
  const json& held = (*current)["spec"];
  std::string holder = held.value("holderIdentity", "");
  bool mine = holder == options_.identity;
  absl::Duration their_duration = absl::Seconds(held.value("leaseDurationSeconds", 15));
  if (!holder.empty() && !mine && observed_time_ + their_duration > now) return false;
  spec["acquireTime"] =
      mine ? held.value("acquireTime", FormatMicroTime(now)) : FormatMicroTime(now);
  int transitions = held.value("leaseTransitions", 0);
  spec["leaseTransitions"] = mine ? transitions : transitions + 1;
  json updated = *current;
  updated["spec"] = spec;
  // The resourceVersion read above makes this PUT conditional: of two candidates, one gets 409.
  absl::StatusOr<json> written = client_->Update(leases, options_.namespace_, updated);
  if (!written.ok()) {
    NoteFailure(written.status());
    return false;
  }
  Observe(*written);
  return true;
}

void LeaderElector::Release() {
  if (!last_lease_) return;
  json lease = *last_lease_;
  lease["spec"]["holderIdentity"] = "";
  lease["spec"]["leaseDurationSeconds"] = 1;
  lease["spec"]["renewTime"] = FormatMicroTime(absl::Now());
  absl::StatusOr<json> written = client_->Update(Resource::Leases(), options_.namespace_, lease);
  if (!written.ok()) log::Warn("Could not release the leader lease", {{"error", written.status()}});
}

absl::Status LeaderElector::Run(const std::atomic<bool>& stop) {
  if (options_.renew_deadline >= options_.lease_duration) {
    return absl::InvalidArgumentError(
        "leader election: the renew deadline must be shorter than the lease duration");
  }
  ClientOptions lease_client;
  lease_client.qps = 0;  // never queued behind the controller's requests
  lease_client.timeout = RequestTimeout(options_);
  lease_client.max_retries = 0;  // a Retry-After wait would outlast the renew deadline
  lease_client.user_agent = "kubetrain-operator/leader-election";
  ASSIGN_OR_RETURN(client_, Client::Create(cluster_, lease_client), "leader election");

  auto sleep = [&](absl::Duration d) {
    absl::Time until = absl::Now() + d;
    while (!stop.load() && absl::Now() < until) absl::SleepFor(absl::Milliseconds(20));
  };
  while (!stop.load() && !TryAcquireOrRenew()) {
    if (!fatal_.ok()) return fatal_;
    sleep(options_.retry_period);
  }
  if (stop.load()) return absl::OkStatus();
  leader_ = true;
  log::Info("Became the leader", {{"lease", options_.namespace_ + "/" + options_.name},
                                  {"identity", options_.identity}});
  std::atomic<bool> stop_leading{false};
  std::thread started;
  if (callbacks_.on_started_leading) {
    started = std::thread([&] { callbacks_.on_started_leading(stop_leading); });
  }
  absl::Time last_renew = absl::Now();
  absl::Status result = absl::OkStatus();
  while (!stop.load()) {
    sleep(options_.retry_period);
    if (stop.load()) break;
    if (TryAcquireOrRenew()) {
      last_renew = absl::Now();
    } else if (absl::Now() - last_renew > options_.renew_deadline) {
      result = absl::UnavailableError("lost the leader lease: could not renew it within " +
                                      absl::FormatDuration(options_.renew_deadline));
      break;
    }
  }
  leader_ = false;
  if (!result.ok()) {
    log::Error("Lost the leader lease; stopping at once",
               {{"lease", options_.namespace_ + "/" + options_.name}, {"error", result}});
    if (callbacks_.on_lost_leadership) callbacks_.on_lost_leadership();
  }
  stop_leading = true;
  if (started.joinable()) started.join();
  if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading();
  // Released only once the workers have stopped: a successor must never overlap with them.
  if (result.ok() && options_.release_on_stop) Release();
  log::Info("Stopped leading", {{"reason", result.ok() ? "stopping" : result.message()}});
  return result;
}

}  // namespace kubetrain::kube
