// ShardStore's sync rounds (see store.h): admitting a step's pushes, summing their gradients,
// completing the step once its quota is in, and the elastic membership that sets the quota
// (docs/architecture.md §5.3, §5.10).
#include <algorithm>
#include <cstring>
#include <utility>

#include "ps/store.h"

namespace kubetrain::ps {
namespace {

void AddInto(std::vector<float>& sum, std::span<const float> grad) {
  float* __restrict out = sum.data();
  const float* __restrict in = grad.data();
  for (size_t i = 0; i < sum.size(); ++i) out[i] += in[i];
}

}  // namespace

absl::StatusOr<PushOutcome> ShardStore::PushSync(const PushArgs& args) {
  uint64_t generation;
  bool completes_round;
  Targets completing;  // this push's gradients, when it completes the round without adding them
  {
    absl::ReaderMutexLock lock(&mu_);
    if (absl::Status s = CheckServing(); !s.ok()) return s;
    if (config_.mode != UpdateMode::kSync) return absl::AbortedError("update mode changed; retry");
    auto targets = Resolve(args);
    if (!targets.ok()) return targets.status();
    {
      absl::MutexLock round(&round_mu_);
      if (config_.elastic) Touch(args.worker, absl::Now());
      if (args.step < global_step_ || closing_ || admitted_ >= Quota()) {
        CountStale();
        return PushOutcome{global_step_, true};
      }
      ++admitted_;
      // The push that completes the round on admission (every other admitted push has added its
      // sum, and the step needs no more) adds nothing: the update reads the sums and its
      // gradients in one pass, a pass over the sums fewer while every worker of the step waits.
      ++arrived_;
      completes_round = TakeRound();
      if (completes_round) {
        generation = generation_;
        completing = *std::move(targets);
      } else {
        --arrived_;
      }
    }
    if (!completes_round) {
      // Admitted: this round cannot complete before our sum is in, so the accumulators we add to
      // belong to the current step even though mu_ is only held shared.
      std::vector<float> scratch;
      for (auto& [p, bytes] : *targets) {
        std::span<const float> grad = AsFloats(bytes, scratch);
        absl::MutexLock accum(&p->accum_mu);
        if (p->accum_count++ == 0) {
          std::memcpy(p->accum.data(), grad.data(), grad.size_bytes());
        } else {
          AddInto(p->accum, grad);
        }
      }
      absl::MutexLock round(&round_mu_);
      ++arrived_;
      completes_round = TakeRound();
      generation = generation_;
      if (!completes_round) return PushOutcome{global_step_, false};
    }
  }
  const int64_t step = ApplySyncRound(generation, completing);
  NotifyChange();
  return PushOutcome{step, false};
}

int64_t ShardStore::ApplySyncRound(uint64_t generation, const Targets& completing) {
  absl::WriterMutexLock lock(&mu_);
  // Between releasing the shared lock and getting this one, only an Init can have changed the
  // round (new pushes are refused while closing_).
  if (generation != generation_ || closed_) return global_step_;
  const auto start = std::chrono::steady_clock::now();
  int applied;
  {
    absl::MutexLock round(&round_mu_);
    applied = arrived_;
  }
  // A fixed-size step averages its quota. An elastic one divides the sum by the nominal count
  // the learning rate was scaled for: the linear scaling rule, so a step of twice the gradients
  // (a global batch twice as large) moves twice as far, as a job started at that size would.
  const float replicas =
      static_cast<float>(config_.elastic ? config_.replicas_to_aggregate : applied);
  // The average is taken in the update's own pass over the sum: one pass fewer while every
  // worker of the step waits for it.
  if (completing.empty()) {
    for (auto& p : partitions_) {
      absl::MutexLock accum(&p->accum_mu);
      ApplyOne(*p, p->accum, replicas);
      p->accum_count = 0;
    }
  } else {
    std::vector<float> scratch;
    for (auto& [p, bytes] : completing) {  // every partition (a sync push holds them all)
      absl::MutexLock accum(&p->accum_mu);
      std::span<const float> sum;
      if (p->accum_count > 0) sum = p->accum;
      ApplyOne(*p, sum, replicas, AsFloats(bytes, scratch));
      p->accum_count = 0;
    }
  }
  ++global_step_;
  gradients_applied_ += applied;
  {
    absl::MutexLock round(&round_mu_);
    admitted_ = arrived_ = 0;
    closing_ = false;
  }
  RecordUpdate(start);
  return global_step_;
}

int ShardStore::Quota() const {
  if (!config_.elastic) return config_.replicas_to_aggregate;
  const int size = std::max(static_cast<int>(members_.size()), config_.min_members);
  return std::max(1, size - config_.backup_workers);
}

bool ShardStore::TakeRound() {
  if (closing_ || arrived_ == 0 || arrived_ != admitted_ || arrived_ < Quota()) return false;
  closing_ = true;
  return true;
}

bool ShardStore::ExpireMembers(absl::Time now) {
  bool changed = false;
  for (auto it = members_.begin(); it != members_.end();) {
    if (now - it->second > config_.member_timeout) {
      it = members_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  return changed;
}

bool ShardStore::Touch(uint32_t worker, absl::Time now) {
  bool changed = ExpireMembers(now);
  auto [it, added] = members_.try_emplace(worker, now);
  it->second = std::max(it->second, now);
  if (changed || added) ++membership_version_;
  return changed || added;
}

absl::StatusOr<Membership> ShardStore::Join(uint32_t worker, bool leave, absl::Time now) {
  Membership view;
  uint64_t generation;
  bool completes_round = false;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("ps shutting down");
    absl::MutexLock round(&round_mu_);
    const uint64_t before = membership_version_;
    if (leave) {
      const bool expired = ExpireMembers(now);
      if (members_.erase(worker) > 0 || expired) ++membership_version_;
    } else {
      Touch(worker, now);
    }
    view.changed = membership_version_ != before;
    // A smaller membership may complete a step that waited for the member that left.
    if (initialized_ && config_.mode == UpdateMode::kSync) completes_round = TakeRound();
    generation = generation_;
    for (const auto& [member, heard] : members_) view.members.push_back(member);
    view.version = membership_version_;
    view.quota = Quota();
    view.global_step = global_step_;
    view.gradients_applied = gradients_applied_;
  }
  if (completes_round) {
    view.global_step = ApplySyncRound(generation, {});
    NotifyChange();
  }
  return view;
}

}  // namespace kubetrain::ps
