// ShardStore's sync rounds (see store.h): admitting a step's pushes to each partition's round,
// summing their gradients, completing a partition's step once its quota is in, and the elastic
// membership that sets the quota
// (docs/architecture.md §5.3, §5.10).
#include <algorithm>
#include <limits>
#include <utility>

#include "ps/store.h"

namespace kubetrain::ps {
namespace {

// sum += grad, a run of the pushed values at a time where they arrived (ps/gradient_bytes.h).
void AddInto(std::vector<float>& sum, const GradientBytes& grad) {
  grad.ForEachRun([&sum](size_t first, std::span<const float> run) {
    float* __restrict out = sum.data() + first;
    const float* __restrict in = run.data();
    for (size_t i = 0; i < run.size(); ++i) out[i] += in[i];
  });
}

}  // namespace

absl::StatusOr<PushOutcome> ShardStore::PushSync(const PushArgs& args) {
  uint64_t generation;
  bool stale = false;
  Targets adding;     // admitted partitions whose round this push does not complete on admission
  Targets completed;  // rounds this push completes; with its gradients where it did not add them
  {
    absl::ReaderMutexLock lock(&mu_);
    if (absl::Status s = CheckServing(); !s.ok()) return s;
    if (config_.mode != UpdateMode::kSync) return absl::AbortedError("update mode changed; retry");
    auto targets = Resolve(args);
    if (!targets.ok()) return targets.status();
    generation = generation_;
    {
      absl::MutexLock round(&round_mu_);
      if (config_.elastic) Touch(args.worker, absl::Now());
      const int quota = Quota();
      for (auto& [p, grad] : *targets) {
        if (args.step < p->step || p->closing || p->admitted >= quota) {
          stale = true;
          continue;
        }
        ++p->admitted;
        // The push that completes a round on admission (every other admitted push has added its
        // sum, and the step needs no more) adds nothing: the update reads the sum and its
        // gradients in one pass, a pass over the sum fewer while every worker of the step waits.
        ++p->arrived;
        if (TakeRound(*p)) {
          completed.emplace_back(p, grad);
        } else {
          --p->arrived;
          adding.emplace_back(p, grad);
        }
      }
    }
    if (stale) CountStale();
    // Admitted: these rounds cannot complete before our sums are in, so the accumulators we add
    // to belong to their current steps even though mu_ is only held shared.
    for (auto& [p, grad] : adding) {
      if (grad == nullptr) continue;  // the bare round of a ps holding no partition
      absl::MutexLock accum(&p->accum_mu);
      if (p->accum_count++ == 0) {
        grad->CopyTo(p->accum);
      } else {
        AddInto(p->accum, *grad);
      }
    }
    if (!adding.empty()) {
      absl::MutexLock round(&round_mu_);
      for (auto& [p, grad] : adding) {
        ++p->arrived;
        if (TakeRound(*p)) completed.emplace_back(p, nullptr);
      }
    }
    if (completed.empty()) return PushOutcome{global_step_, stale};
  }
  const int64_t step = ApplySyncRounds(generation, completed);
  NotifyChange();
  return PushOutcome{step, stale};
}

int64_t ShardStore::ApplySyncRounds(uint64_t generation, const Targets& completed) {
  absl::WriterMutexLock lock(&mu_);
  // Between releasing the shared lock and getting this one, only an Init can have changed the
  // rounds (new pushes are refused from a partition while it is closing).
  if (generation != generation_ || closed_) return global_step_;
  const auto start = std::chrono::steady_clock::now();
  for (auto& [p, last] : completed) {
    int applied;
    {
      absl::MutexLock round(&round_mu_);
      applied = p->arrived;
    }
    // A fixed-size step averages its quota. An elastic one divides the sum by the nominal count
    // the learning rate was scaled for: the linear scaling rule, so a step of twice the gradients
    // (a global batch twice as large) moves twice as far, as a job started at that size would.
    // The average is taken in the update's own pass over the sum: one pass fewer while every
    // worker of the step waits for it.
    const float replicas =
        static_cast<float>(config_.elastic ? config_.replicas_to_aggregate : applied);
    if (!p->values.empty()) {
      absl::MutexLock accum(&p->accum_mu);
      std::span<const float> sum;
      if (p->accum_count > 0) sum = p->accum;
      ApplyOne(*p, p->step, p->applied, sum, replicas, last);
      p->accum_count = 0;
    }
    ++p->step;
    p->applied += applied;
    absl::MutexLock round(&round_mu_);
    p->admitted = p->arrived = 0;
    p->closing = false;
  }
  int64_t step = std::numeric_limits<int64_t>::max();
  int64_t applied = std::numeric_limits<int64_t>::max();
  for (const auto& p : partitions_) {
    step = std::min(step, p->step);
    applied = std::min(applied, p->applied);
  }
  if (bare_round_ != nullptr) {
    step = bare_round_->step;
    applied = bare_round_->applied;
  }
  global_step_ = step;
  gradients_applied_ = applied;
  RecordUpdate(start);
  return global_step_;
}

int ShardStore::Quota() const {
  if (!config_.elastic) return config_.replicas_to_aggregate;
  const int size = std::max(static_cast<int>(members_.size()), config_.min_members);
  return std::max(1, size - config_.backup_workers);
}

bool ShardStore::TakeRound(Partition& p) {
  if (p.closing || p.arrived == 0 || p.arrived != p.admitted || p.arrived < Quota()) return false;
  p.closing = true;
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
  Targets completed;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (closed_) return absl::UnavailableError("ps shutting down");
    absl::MutexLock round(&round_mu_);
    if (leave) {
      const bool expired = ExpireMembers(now);
      if (members_.erase(worker) > 0 || expired) ++membership_version_;
    } else {
      Touch(worker, now);
    }
    view.changed = membership_version_ != reported_membership_version_;
    reported_membership_version_ = membership_version_;
    // A smaller membership may complete rounds that waited for the member that left.
    if (initialized_ && config_.mode == UpdateMode::kSync) {
      for (auto& p : partitions_) {
        if (TakeRound(*p)) completed.emplace_back(p.get(), nullptr);
      }
      if (bare_round_ != nullptr && TakeRound(*bare_round_)) {
        completed.emplace_back(bare_round_.get(), nullptr);
      }
    }
    generation = generation_;
    for (const auto& [member, heard] : members_) view.members.push_back(member);
    view.version = membership_version_;
    view.quota = Quota();
    view.global_step = global_step_;
    view.gradients_applied = gradients_applied_;
  }
  if (!completed.empty()) {
    view.global_step = ApplySyncRounds(generation, completed);
    NotifyChange();
  }
  return view;
}

}  // namespace kubetrain::ps
