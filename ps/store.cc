// ShardStore (see store.h): Init, pulls, exports, async pushes and the optimizer updates every
// mode shares. Sync rounds and the elastic membership are in store_sync.cc.
#include "ps/store.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::ps {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian float32; a big-endian build needs byte swaps");

namespace {

constexpr absl::string_view kNotInitialised =
    "ps not initialised; waiting for the chief to restore it";

absl::Status ValidateConfig(const TrainingConfig& config) {
  if (config.mode == UpdateMode::kSync && config.replicas_to_aggregate < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas_to_aggregate must be >= 1: ", config.replicas_to_aggregate));
  }
  if (config.backup_workers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup_workers must be >= 0: ", config.backup_workers));
  }
  if (config.min_members < 1 || config.min_members > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_members must be in [1, 100000]: ", config.min_members));
  }
  if (config.member_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("member_timeout must be > 0");
  }
  return absl::OkStatus();
}

// Moves `state`'s slots into Apply's order, filling missing ones with the optimizer's start value.
absl::StatusOr<std::vector<std::vector<float>>> OrderSlots(PartitionState& state,
                                                           const Optimizer& optimizer) {
  std::vector<std::vector<float>> slots;
  for (const std::string& name : optimizer.SlotNames()) {
    auto it = state.slots.find(name);
    if (it == state.slots.end()) {
      slots.emplace_back(state.values.size(), optimizer.SlotInitialValue());
      continue;
    }
    if (it->second.size() != state.values.size()) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", name, " of ", state.key.variable, "/",
                                                     state.key.index, " has ", it->second.size(),
                                                     " elements, want ", state.values.size()));
    }
    slots.push_back(std::move(it->second));
    state.slots.erase(it);
  }
  if (!state.slots.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("slot ", state.slots.begin()->first, " of ",
                                                   state.key.variable, " is not used by optimizer ",
                                                   OptimizerName(optimizer.options().kind)));
  }
  return slots;
}

}  // namespace

ShardStore::ShardStore(PsMetrics* metrics) : metrics_(metrics) {}
ShardStore::~ShardStore() = default;

void ShardStore::SetChangeListener(std::function<void()> listener) {
  listener_ = std::move(listener);
}

void ShardStore::NotifyChange() const {
  if (listener_) listener_();
}

bool ShardStore::PullReady(std::span<const PartitionKey> keys, int64_t min_step) const {
  absl::ReaderMutexLock lock(&mu_);
  return ReadyForPull(keys, min_step);
}

absl::Status ShardStore::Init(ShardState state) {
  if (absl::Status s = ValidateConfig(state.config); !s.ok()) return s;
  if (state.global_step < 0) return absl::InvalidArgumentError("global_step must be >= 0");
  if (state.gradients_applied < 0) {
    return absl::InvalidArgumentError("gradients_applied must be >= 0");
  }
  auto optimizer = MakeOptimizer(state.config.optimizer);
  if (!optimizer.ok()) return optimizer.status();
  std::vector<std::unique_ptr<Partition>> partitions;
  absl::flat_hash_map<PartitionKey, Partition*> by_key;
  uint64_t bytes = 0;
  const bool sync = state.config.mode == UpdateMode::kSync;
  for (PartitionState& ps : state.partitions) {
    if (ps.values.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("partition ", ps.key.name(), " is empty"));
    }
    if (int64_t bad = FirstNonFinite(ps.values); bad >= 0) {
      if (metrics_ != nullptr) metrics_->CountNonFiniteRejected();
      return absl::InvalidArgumentError(absl::StrCat("partition ", ps.key.name(), " has ",
                                                     ps.values[bad], " at index ", bad,
                                                     "; every value must be finite"));
    }
    for (const auto& [name, slot] : ps.slots) {
      if (int64_t bad = FirstNonFinite(slot); bad >= 0) {
        if (metrics_ != nullptr) metrics_->CountNonFiniteRejected();
        return absl::InvalidArgumentError(
            absl::StrCat("slot ", name, " of partition ", ps.key.name(), " has ", slot[bad],
                         " at index ", bad, "; every value must be finite"));
      }
    }
    auto slots = OrderSlots(ps, **optimizer);
    if (!slots.ok()) return slots.status();
    auto p = std::make_unique<Partition>();
    p->key = std::move(ps.key);
    p->offset = ps.offset;
    p->values = std::move(ps.values);
    p->slots = *std::move(slots);
    p->step = state.global_step;
    p->applied = state.gradients_applied;
    if (sync) {
      absl::MutexLock accum(&p->accum_mu);  // not shared yet; keeps the lock analysis exact
      p->accum.assign(p->values.size(), 0.0f);
    }
    bytes += p->values.size() * sizeof(float);
    if (!by_key.emplace(p->key, p.get()).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate partition ", p->key.name()));
    }
    partitions.push_back(std::move(p));
  }
  absl::ReleasableMutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("ps shutting down");
  initialized_ = true;
  ++generation_;
  global_step_ = state.global_step;
  gradients_applied_ = state.gradients_applied;
  parameter_bytes_ = bytes;
  config_ = state.config;
  run_id_ = std::move(state.run_id);
  optimizer_ = *std::move(optimizer);
  bare_round_.reset();
  if (sync && partitions.empty()) {
    bare_round_ = std::make_unique<Partition>();
    bare_round_->step = state.global_step;
    bare_round_->applied = state.gradients_applied;
  }
  for (auto& p : partitions) p->revision = ++revisions_;
  partitions_ = std::move(partitions);
  by_key_ = std::move(by_key);
  if (metrics_ != nullptr) {
    metrics_->SetGlobalStep(global_step_);
    metrics_->SetParameterBytes(bytes);
  }
  lock.Release();
  NotifyChange();
  return absl::OkStatus();
}

absl::Status ShardStore::CheckServing() const {
  if (closed_) return absl::UnavailableError("ps shutting down");
  if (!initialized_) return absl::FailedPreconditionError(kNotInitialised);
  return absl::OkStatus();
}

absl::StatusOr<ShardStore::Targets> ShardStore::Resolve(const PushArgs& args) const {
  if (!args.run_id.empty() && args.run_id != run_id_) {
    return absl::AbortedError(absl::StrCat("push for run ", args.run_id, " but this ps holds run ",
                                           run_id_, "; pull again"));
  }
  Targets targets;
  targets.reserve(args.gradients.size());
  absl::flat_hash_set<const Partition*> seen;
  for (const GradientRef& g : args.gradients) {
    auto it = by_key_.find(g.key);
    if (it == by_key_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown partition ", g.key.name()));
    }
    Partition* p = it->second;
    if (!g.values.whole() || g.values.size() != p->values.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient for ", g.key.name(), " has ", g.values.wire_bytes(),
                       " bytes, want ", p->values.size() * WireFloatBytes(g.values.encoding())));
    }
    if (!seen.insert(p).second) {
      return absl::InvalidArgumentError(absl::StrCat("partition ", g.key.name(), " pushed twice"));
    }
    targets.emplace_back(p, &g.values);
  }
  if (config_.mode == UpdateMode::kSync && targets.empty()) {
    if (bare_round_ == nullptr) {
      return absl::InvalidArgumentError("sync push names no partition; push at least one");
    }
    targets.emplace_back(bare_round_.get(), nullptr);
  }
  return targets;
}

absl::StatusOr<PushOutcome> ShardStore::Push(const PushArgs& args) {
  // Checked before any lock and any sum: one NaN would spread to every value it is averaged or
  // applied into, and no later step could undo it.
  for (const GradientRef& g : args.gradients) {
    float value = 0;
    if (int64_t bad = FirstNonFinite(g.values, &value); bad >= 0) {
      if (metrics_ != nullptr) metrics_->CountNonFiniteRejected();
      return absl::InvalidArgumentError(absl::StrCat("gradient for partition ", g.key.name(),
                                                     " has ", value, " at index ", bad,
                                                     "; push refused, nothing applied"));
    }
  }
  UpdateMode mode;
  {
    absl::ReaderMutexLock lock(&mu_);
    if (absl::Status s = CheckServing(); !s.ok()) return s;
    mode = config_.mode;
  }
  // An Init between here and the call below may change the mode; each path re-checks under mu_.
  return mode == UpdateMode::kSync ? PushSync(args) : PushAsync(args);
}

absl::StatusOr<PushOutcome> ShardStore::PushAsync(const PushArgs& args) {
  absl::ReleasableMutexLock lock(&mu_);
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  if (config_.mode != UpdateMode::kAsync) return absl::AbortedError("update mode changed; retry");
  auto targets = Resolve(args);
  if (!targets.ok()) return targets.status();
  const auto start = std::chrono::steady_clock::now();
  for (auto& [p, grad] : *targets) ApplyOne(*p, global_step_, gradients_applied_, {}, 1.0f, grad);
  ++global_step_;
  ++gradients_applied_;
  RecordUpdate(start);
  const PushOutcome outcome{global_step_, false};
  lock.Release();
  NotifyChange();
  return outcome;
}

void ShardStore::ApplyOne(Partition& p, int64_t at_step, int64_t applied,
                          std::span<const float> sum, float grad_divisor,
                          const GradientBytes* last) {
  p.revision = ++revisions_;
  // Elastic: the schedule's step counts nominal steps of replicas_to_aggregate gradients.
  const int64_t step = config_.elastic ? applied / config_.replicas_to_aggregate : at_step;
  if (last == nullptr || last->empty()) {
    std::vector<std::span<float>> slots(p.slots.begin(), p.slots.end());
    optimizer_->Apply(p.values, sum, slots, step, grad_divisor);
    return;
  }
  // The pushed gradient is read where it arrived, a run at a time (ps/gradient_bytes.h); the
  // update is elementwise, so run by run it is the same update, bit for bit.
  absl::InlinedVector<std::span<float>, 4> slots;
  last->ForEachRun([&](size_t first, std::span<const float> run) {
    slots.clear();
    for (std::vector<float>& slot : p.slots)
      slots.push_back(std::span(slot).subspan(first, run.size()));
    std::span<float> values = std::span(p.values).subspan(first, run.size());
    if (sum.empty()) {
      optimizer_->Apply(values, run, slots, step, grad_divisor);
    } else {
      optimizer_->ApplySum(values, sum.subspan(first, run.size()), run, slots, step, grad_divisor);
    }
  });
}

void ShardStore::RecordUpdate(std::chrono::steady_clock::time_point start) const {
  if (metrics_ == nullptr) return;
  metrics_->ObserveUpdateSeconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  metrics_->SetGlobalStep(global_step_);
}

void ShardStore::CountStale() {
  if (metrics_ != nullptr) metrics_->CountStaleGradient();
}

std::pair<int64_t, int64_t> ShardStore::StepOf(std::span<const PartitionKey> keys) const {
  if (config_.mode != UpdateMode::kSync || keys.empty()) return {global_step_, gradients_applied_};
  int64_t step = std::numeric_limits<int64_t>::max();
  int64_t applied = std::numeric_limits<int64_t>::max();
  for (const PartitionKey& key : keys) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) continue;  // Pull answers NOT_FOUND for it
    step = std::min(step, it->second->step);
    applied = std::min(applied, it->second->applied);
  }
  if (applied == std::numeric_limits<int64_t>::max()) return {global_step_, gradients_applied_};
  return {step, applied};
}

bool ShardStore::ReadyForPull(std::span<const PartitionKey> keys, int64_t min_step) const {
  return closed_ || !initialized_ || StepOf(keys).first >= min_step;
}

absl::StatusOr<PullOutcome> ShardStore::Pull(std::span<const PartitionKey> keys, int64_t min_step,
                                             absl::Time deadline, PullVisitor visit,
                                             uint64_t max_response_bytes) const {
  absl::ReaderMutexLock lock(&mu_);
  struct Ready {
    const ShardStore* store;
    std::span<const PartitionKey> keys;
    int64_t min_step;
    bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return store->ReadyForPull(keys, min_step);
    }
  } ready{this, keys, min_step};
  if (!mu_.AwaitWithDeadline(absl::Condition(&ready, &Ready::operator()), deadline)) {
    return absl::DeadlineExceededError(absl::StrCat(
        keys.empty() ? "global step " : "the step of the partitions pulled, ", StepOf(keys).first,
        keys.empty() ? "" : ",", " did not reach ", min_step, " in time"));
  }
  if (absl::Status s = CheckServing(); !s.ok()) return s;
  // Sized before anything is copied: a request naming a large partition many times would
  // otherwise build a response of any size.
  absl::flat_hash_set<const Partition*> seen;
  uint64_t response_bytes = run_id_.size() + 32;
  auto add = [&response_bytes](const Partition& p) {
    response_bytes += p.values.size() * sizeof(float) + p.key.variable.size() + 48;
  };
  for (const PartitionKey& key : keys) {
    auto it = by_key_.find(key);
    if (it == by_key_.end()) {
      return absl::NotFoundError(absl::StrCat("no partition ", key.name(), " on this ps"));
    }
    if (!seen.insert(it->second).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("partition ", key.name(), " named twice in one pull"));
    }
    add(*it->second);
  }
  if (keys.empty()) {
    for (const auto& p : partitions_) add(*p);
  }
  if (response_bytes > max_response_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pull would answer ", response_bytes, " bytes, over the ", max_response_bytes,
        "-byte message limit; pull fewer partitions per call or raise --max-message-mb"));
  }
  if (keys.empty()) {
    for (const auto& p : partitions_) visit(p->key, p->offset, p->values, p->revision);
  } else {
    for (const PartitionKey& key : keys) {
      const Partition& p = *by_key_.at(key);
      visit(p.key, p.offset, p.values, p.revision);
    }
  }
  const auto [step, applied] = StepOf(keys);
  return PullOutcome{step, run_id_, applied};
}

absl::StatusOr<ShardState> ShardStore::Export(absl::Duration level_wait) const {
  absl::ReaderMutexLock lock(&mu_);
  if (!initialized_) return absl::FailedPreconditionError(kNotInitialised);
  struct Level {
    const ShardStore* store;
    bool operator()() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (store->closed_ || !store->initialized_) return true;
      for (const auto& p : store->partitions_) {
        if (p->step != store->global_step_) return false;
      }
      return true;
    }
  } level{this};
  if (config_.mode == UpdateMode::kSync) {
    mu_.AwaitWithTimeout(absl::Condition(&level, &Level::operator()), level_wait);
    if (!initialized_) return absl::FailedPreconditionError(kNotInitialised);
  }
  ShardState state{config_, global_step_, run_id_, {}, gradients_applied_};
  const std::vector<std::string> names = optimizer_->SlotNames();
  state.partitions.reserve(partitions_.size());
  for (const auto& p : partitions_) {
    PartitionState& out = state.partitions.emplace_back();
    out.key = p->key;
    out.offset = p->offset;
    out.values = p->values;
    for (size_t s = 0; s < names.size(); ++s) out.slots[names[s]] = p->slots[s];
  }
  return state;
}

StoreStatus ShardStore::Status() const {
  absl::ReaderMutexLock lock(&mu_);
  absl::MutexLock round(&round_mu_);
  return {initialized_,       closed_, global_step_,       parameter_bytes_,
          partitions_.size(), run_id_, gradients_applied_, members_.size()};
}

void ShardStore::Close() {
  {
    absl::WriterMutexLock lock(&mu_);
    closed_ = true;
  }
  NotifyChange();
}

}  // namespace kubetrain::ps
