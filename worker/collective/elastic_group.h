// An elastic all-reduce job's group (docs/architecture.md §5.10): the communicator of the
// current generation of members, formed again through the chief's coordinator whenever a member
// joins, leaves or is lost.
//
//   ElasticGroup group(*coordinator, factory);
//   ASSIGN_OR_RETURN(Communicator* comm, group.Reform());   // generation 1: rank = index
//   group.StartHeartbeat(absl::Seconds(1));
//   ... each step: all-reduce a flag that is 1 where group.change_pending(); when the sum is
//   ... non-zero (or a collective failed), every rank calls group.Reform() after that step.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/collective/communicator.h"
#include "worker/collective/coordinator.h"
#include "worker/collective/rendezvous.h"

namespace kubetrain::worker {

// Connects a communicator of `size` ranks as `rank` through `store` (Gloo's peer addresses,
// NCCL's unique id).
using CommunicatorFactory = std::function<absl::StatusOr<std::unique_ptr<Communicator>>(
    KeyValueStore& store, int rank, int size)>;

// The keys of one generation: every key of `base` behind "g<generation>/", so the rendezvous of
// a new generation never reads an old one's.
class PrefixedStore final : public KeyValueStore {
 public:
  PrefixedStore(KeyValueStore& base, std::string prefix)
      : base_(base), prefix_(std::move(prefix)) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    return base_.Set(prefix_ + key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return base_.Get(prefix_ + key, timeout);
  }

 private:
  KeyValueStore& base_;
  const std::string prefix_;
};

class ElasticGroup {
 public:
  // Borrows `coordinator` (a client connected with elastic = true), which must outlive it.
  ElasticGroup(CoordinatorClient& coordinator, CommunicatorFactory factory,
               absl::Duration reform_timeout = absl::Minutes(5));
  // Leaves the membership, unless Leave already did.
  ~ElasticGroup();
  ElasticGroup(const ElasticGroup&) = delete;
  ElasticGroup& operator=(const ElasticGroup&) = delete;

  // Drops the current communicator, waits for the next generation (which this member joins)
  // and connects to it. The communicator is valid until the next Reform or destruction.
  absl::StatusOr<Communicator*> Reform();
  // Asks the coordinator every `every`, on a thread of its own, whether the members changed.
  void StartHeartbeat(absl::Duration every);
  // Whether the last heartbeat saw the members change since the current generation.
  bool change_pending() const { return change_pending_.load(); }
  // Leaves the membership now (a worker that stops), so the others reform without it.
  void Leave();
  // The chief, when training is over: a member still waiting in Reform, or one that asks
  // later, gets ABORTED "training is over" instead of a group of its own.
  absl::Status Finish() { return coordinator_.Finish(); }
  // Whether `s` (from Reform) says the chief has ended training.
  static bool TrainingIsOver(const absl::Status& s) {
    return s.code() == absl::StatusCode::kAborted &&
           s.message().find("training is over") != absl::string_view::npos;
  }

  const Generation& generation() const { return generation_; }
  int rank() const { return rank_; }

 private:
  void StopHeartbeat();

  CoordinatorClient& coordinator_;
  CommunicatorFactory factory_;
  const absl::Duration reform_timeout_;
  Generation generation_;
  int rank_ = -1;
  std::unique_ptr<PrefixedStore> store_;
  std::unique_ptr<Communicator> communicator_;
  std::atomic<bool> change_pending_{false};
  bool left_ = false;

  struct Heartbeat;
  std::unique_ptr<Heartbeat> heartbeat_;
};

}  // namespace kubetrain::worker
