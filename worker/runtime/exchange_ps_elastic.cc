// The elastic ps exchange (docs/architecture.md §5.10), sync or async, on the shared PsExchange
// (worker/runtime/ps_exchange.h): membership, heartbeat, data shards per epoch.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "worker/runtime/ps_exchange.h"

namespace kubetrain::worker {
namespace {

// Elastic jobs, sync or async (docs/architecture.md §5.10): the job's size is the membership
// the ps keep, not TF_CONFIG's worker count. A worker joins every ps when it starts, repeats
// the call every heartbeat_every, and leaves when it stops or finishes. Positions count the
// gradients applied (an epoch is the training set in batches: ExchangeContext::steps_per_epoch),
// so the run ends after the same examples however many workers made them; each epoch a worker
// trains on its place among the members as that epoch began.
class ElasticPsExchange final : public PsExchange {
 public:
  explicit ElasticPsExchange(const ExchangeContext& context)
      : PsExchange(context),
        sync_(context.options.mode == Mode::kPsSync),
        nominal_(sync_ ? std::max(1, context.id.num_workers - context.options.backup_workers) : 1) {
  }
  ~ElasticPsExchange() override { Leave(); }

  absl::StatusOr<int64_t> Start(ChiefDuties* chief) override {
    ASSIGN_OR_RETURN(int64_t pos, PsExchange::Start(chief));
    if (c_.steps_per_epoch > 0) {  // a training worker, not an evaluator
      RETURN_IF_ERROR(Reshard(pos, /*required=*/true));
      StartHeartbeat();
    }
    return pos;
  }

  absl::StatusOr<ExchangedStep> Exchange(int64_t, float loss) override {
    // Sync: the step completes once every member's gradient (less the backup workers') is in,
    // or a member leaves, so a pull waiting for it never waits on a worker that is gone.
    RETURN_IF_ERROR(PushAndPull(/*next=*/sync_));
    const int64_t next = Position();
    if (!Done(next) && next / c_.steps_per_epoch != shard_.epoch) {
      RETURN_IF_ERROR(Reshard(next, /*required=*/false));
    }
    return ExchangedStep{.next = next, .loss = loss};
  }

  absl::Status EndTraining() override {
    Leave();
    return absl::OkStatus();
  }

  bool Done(int64_t pos) const override { return pos >= c_.total_steps(); }
  bool RunIsOver(const ps::ModelState& checkpoint) const override {
    return Done(checkpoint.gradients_applied);
  }
  // The examples of an average step so far: steps vary with the membership.
  int examples_per_step() const override {
    const int64_t steps = version().step();
    const int64_t applied = version().gradients_applied();
    const int64_t per_step = steps > 0 && applied > 0 ? (applied + steps / 2) / steps : nominal_;
    return c_.options.batch_size * static_cast<int>(std::max<int64_t>(1, per_step));
  }
  // A step applies at least one gradient.
  int64_t last_global_step() const override {
    return c_.steps_per_epoch > 0 ? c_.total_steps() + 1 : -1;
  }
  std::optional<ElasticShard> DataShard() const override { return shard_; }

 protected:
  ps::TrainingConfig Config() const override {
    ps::TrainingConfig config;
    config.mode = sync_ ? ps::UpdateMode::kSync : ps::UpdateMode::kAsync;
    config.elastic = true;
    config.backup_workers = sync_ ? c_.options.backup_workers : 0;
    config.member_timeout = c_.options.member_timeout;
    config.min_members = c_.options.min_workers;
    // The learning rate is scaled for the job's starting size, and the schedule runs over the
    // run's gradients in steps of that size (the ps counts them: ps/store.h).
    config.replicas_to_aggregate = nominal_;
    config.optimizer = OptimizerFor(c_.options, c_.options.batch_size * nominal_,
                                    std::max<int64_t>(1, c_.total_steps() / nominal_));
    return config;
  }
  ps::TrainingConfig RestoredConfig(const ps::TrainingConfig& saved) override {
    // The schedule keeps the size it was scaled for, whatever size the job has now.
    if (saved.elastic && saved.replicas_to_aggregate >= 1) nominal_ = saved.replicas_to_aggregate;
    return Config();
  }
  const char* mode_name() const override { return sync_ ? "sync, elastic" : "async, elastic"; }
  int64_t Position() const override { return version().gradients_applied(); }
  int64_t PositionAfterRecovery(int64_t) const override { return Position(); }

 private:
  // Takes this worker's place among the members for the epoch at `pos`. A failed call keeps the
  // last known membership (`required`: the first one must succeed).
  absl::Status Reshard(int64_t pos, bool required) {
    absl::StatusOr<ps::Membership> view = Client()->Join(/*leave=*/false);
    if (!view.ok()) {
      if (required) return view.status();
      log::Warn("Could not read the membership; keeping the last one",
                {{"error", view.status()}, {"workers", shard_.count}});
      shard_.epoch = pos / c_.steps_per_epoch;
      return absl::OkStatus();
    }
    joined_ = true;
    const auto self = static_cast<uint32_t>(c_.id.rank);
    std::vector<uint32_t> members = view->members;
    if (std::find(members.begin(), members.end(), self) == members.end()) {
      members.insert(std::upper_bound(members.begin(), members.end(), self), self);
    }
    const ElasticShard before = shard_;
    shard_ = {.epoch = pos / c_.steps_per_epoch,
              .index = static_cast<int>(std::find(members.begin(), members.end(), self) -
                                        members.begin()),
              .count = static_cast<int>(members.size())};
    if (shard_.count != before.count || !started_) {
      log::Info(started_ ? "Membership changed" : "Joined the job",
                {{"workers", shard_.count},
                 {"members", absl::StrJoin(members, ",")},
                 {"quota", view->quota},
                 {"epoch", shard_.epoch},
                 {"global_step", view->global_step}});
    }
    started_ = true;
    if (c_.metrics) c_.metrics->workers.Set(shard_.count);
    return absl::OkStatus();
  }

  void StartHeartbeat() {
    heartbeat_.Start(c_.options.heartbeat_every, [this] {
      // A failure is a ps restarting: training notices and recovers; the next beat re-joins.
      absl::StatusOr<ps::Membership> view = Client()->Join(/*leave=*/false);
      if (view.ok() && c_.metrics) {
        c_.metrics->workers.Set(static_cast<double>(view->members.size()));
      }
    });
  }

  // Stops the heartbeat and leaves every ps's membership, so a sync step no longer waits for
  // this worker. Runs once, even after a stop signal (its calls ignore the flag, 1 s each).
  void Leave() {
    heartbeat_.Stop();
    if (!joined_) return;
    joined_ = false;
    absl::StatusOr<std::unique_ptr<ps::PsClient>> client = ClientIgnoringStop(absl::Seconds(1));
    absl::Status left = client.ok() ? (*client)->Join(/*leave=*/true).status() : client.status();
    if (left.ok()) {
      log::Info("Left the job", {{"global_step", global_step()}});
    } else {
      log::Info("Could not tell every ps this worker left; it will time out",
                {{"error", left}, {"timeout", c_.options.member_timeout}});
    }
  }

  const bool sync_;
  int nominal_;  // the job's starting size: gradients per step the schedule is scaled for
  ElasticShard shard_;
  bool joined_ = false;
  bool started_ = false;
  Ticker heartbeat_;
};

}  // namespace

std::unique_ptr<GradientExchange> MakeElasticPsExchange(const ExchangeContext& context) {
  return std::make_unique<ElasticPsExchange>(context);
}

}  // namespace kubetrain::worker
