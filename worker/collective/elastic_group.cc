#include "worker/collective/elastic_group.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"

namespace kubetrain::worker {

struct ElasticGroup::Heartbeat {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  std::thread thread;
};

ElasticGroup::ElasticGroup(CoordinatorClient& coordinator, CommunicatorFactory factory,
                           absl::Duration reform_timeout)
    : coordinator_(coordinator), factory_(std::move(factory)), reform_timeout_(reform_timeout) {}

ElasticGroup::~ElasticGroup() {
  // A worker that stops or fails leaves, so the others need not wait out its timeout.
  Leave();
}

absl::StatusOr<Communicator*> ElasticGroup::Reform() {
  // The old communicator's sockets go first: peers that still wait in one of its collectives
  // fail at once instead of at their timeout, and come here too.
  communicator_.reset();
  store_.reset();
  ASSIGN_OR_RETURN(Generation next, coordinator_.Reform(/*leave=*/false, reform_timeout_));
  auto self =
      std::find(next.members.begin(), next.members.end(), static_cast<int>(coordinator_.member()));
  if (self == next.members.end()) {
    return absl::InternalError(absl::StrCat(
        "generation ", next.number, " does not list this member (", coordinator_.member(), ")"));
  }
  const int rank = static_cast<int>(self - next.members.begin());
  const int size = static_cast<int>(next.members.size());
  auto store = std::make_unique<PrefixedStore>(coordinator_, absl::StrCat("g", next.number, "/"));
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, factory_(*store, rank, size),
                   "connecting generation ", next.number);
  log::Info("Formed the all-reduce group", {{"generation", next.number},
                                            {"rank", rank},
                                            {"workers", size},
                                            {"members", absl::StrJoin(next.members, ",")}});
  generation_ = std::move(next);
  rank_ = rank;
  store_ = std::move(store);
  communicator_ = std::move(communicator);
  change_pending_ = false;
  return communicator_.get();
}

void ElasticGroup::StartHeartbeat(absl::Duration every) {
  if (heartbeat_) return;
  heartbeat_ = std::make_unique<Heartbeat>();
  heartbeat_->thread = std::thread([this, every] {
    Heartbeat& h = *heartbeat_;
    std::unique_lock<std::mutex> lock(h.mu);
    while (!h.stop) {
      h.cv.wait_for(lock, absl::ToChronoMilliseconds(every));
      if (h.stop) break;
      lock.unlock();
      // A failed beat is a chief that is away: the next collective will say so.
      absl::StatusOr<bool> changed = coordinator_.Heartbeat();
      if (changed.ok() && *changed) change_pending_ = true;
      lock.lock();
    }
  });
}

void ElasticGroup::StopHeartbeat() {
  if (!heartbeat_) return;
  {
    std::lock_guard<std::mutex> lock(heartbeat_->mu);
    heartbeat_->stop = true;
  }
  heartbeat_->cv.notify_all();
  if (heartbeat_->thread.joinable()) heartbeat_->thread.join();
  heartbeat_.reset();
}

void ElasticGroup::Leave() {
  StopHeartbeat();
  if (left_) return;
  left_ = true;
  absl::StatusOr<Generation> left = coordinator_.Reform(/*leave=*/true, absl::Seconds(1));
  // After the chief ended training there is no group left to leave.
  if (left.ok() || TrainingIsOver(left.status())) {
    log::Info("Left the all-reduce group", {{"generation", generation_.number}});
  } else {
    log::Info("Could not tell the coordinator this worker left; it will time out",
              {{"error", left.status()}});
  }
}

}  // namespace kubetrain::worker
