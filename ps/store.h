// The partitions, optimizer slots and global step held by one ps task, and the rules that update
// them (docs/architecture.md §5.3).
//
// Sync mode follows TF's SyncReplicasOptimizer, with a round per partition, as BytePS keeps one
// per key (docs/architecture.md §5.3): a push computed at a step older than a partition's step is
// stale there and dropped (counted); pushes for a partition's current step are summed until
// replicas_to_aggregate have arrived, then their average is applied once and that partition's step
// bumps. Later pushes for a step that already has its quota are dropped as stale too (TF's backup
// workers). A push that claims a step newer than the partition's counts for the current one, as
// TF's ConditionalAccumulator does; this only happens after a ps was restored to an older
// checkpoint. A sync push may carry any of the shard's partitions, so a worker can push and pull a
// shard in pieces and the first piece's values travel back while the next piece's gradients are
// still on their way. The shard's global step is the smallest of its partitions' steps; a pull
// waits for the partitions it names.
// Async mode applies every push on arrival and bumps the step each time.
//
// Elastic sync mode (docs/architecture.md §5.10): the workers that joined decide each step's
// quota, max(1, max(members, min_members) − backup_workers), not a fixed count. A worker joins when
// it starts, repeats Join as its heartbeat (a push counts too) and leaves when it stops; one not
// heard from for member_timeout has left. A step completes once every admitted push has arrived and
// they meet the quota, so a member that leaves mid-step no longer holds the others back. A step
// divides the sum of its gradients by replicas_to_aggregate, the size the learning rate was
// scaled for, so the rate follows the global batch (linear scaling, as for a job started at that
// size), and the schedule's step counts gradients applied / replicas_to_aggregate: a job that
// grows or shrinks keeps the schedule of its examples.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "ps/gradient_bytes.h"
#include "ps/metrics.h"
#include "ps/optimizer.h"
#include "ps/partition.h"

namespace kubetrain::ps {

enum class UpdateMode { kSync, kAsync };

struct TrainingConfig {
  UpdateMode mode = UpdateMode::kSync;
  // Sync mode: gradients averaged per step. Must not exceed the number of pushing workers.
  // Elastic: the nominal count, which the learning-rate schedule's step is scaled by.
  int replicas_to_aggregate = 1;
  OptimizerOptions optimizer;
  // Sync mode: the membership decides each step's quota (see above).
  bool elastic = false;
  int backup_workers = 0;  // elastic: gradients of a step the quota leaves out
  absl::Duration member_timeout = absl::Seconds(10);
  // Elastic: the job's minimum size; below it a step waits for members to come back.
  int min_members = 1;
};

// One partition's values and optimizer slots, as moved into and out of a store.
struct PartitionState {
  PartitionKey key;
  uint64_t offset = 0;  // first element of the variable held here (kept for checkpoints)
  std::vector<float> values;
  std::map<std::string, std::vector<float>> slots;  // by Optimizer::SlotNames()
};

// Everything needed to restore a shard: what Export returns and Init takes.
struct ShardState {
  TrainingConfig config;
  int64_t global_step = 0;
  std::string run_id;
  std::vector<PartitionState> partitions;
  int64_t gradients_applied = 0;  // over the whole run: its progress
};

// A gradient for one partition, viewing bytes owned by the caller (the request's receive slices,
// a shared-memory slot), so pushes are accumulated without an intermediate copy.
struct GradientRef {
  PartitionKey key;
  GradientBytes values;
};

struct PushArgs {
  std::string run_id;   // empty: not checked
  uint32_t worker = 0;  // elastic: refreshes (or restores) this worker's membership
  int64_t step = 0;     // the global step the gradients were computed at
  std::vector<GradientRef> gradients;
};

struct PushOutcome {
  int64_t global_step = 0;  // after this push (and any update it completed)
  bool stale = false;       // dropped, not applied
};

struct PullOutcome {
  int64_t global_step = 0;  // the step of the values visited
  std::string run_id;
  int64_t gradients_applied = 0;  // into the values visited
};

// The membership as Join leaves it.
struct Membership {
  std::vector<uint32_t> members;  // ascending
  uint64_t version = 0;           // bumped by every change
  int quota = 0;                  // gradients the current step aggregates
  int64_t global_step = 0;
  int64_t gradients_applied = 0;
  // The membership changed since the last Join reported it: added, removed or timed out by this
  // call, or timed out meanwhile by a push (which answers no membership), so that the ps's log
  // shows every change at the next heartbeat.
  bool changed = false;
};

struct StoreStatus {
  bool initialized = false;
  bool closed = false;
  int64_t global_step = 0;
  uint64_t parameter_bytes = 0;
  size_t partitions = 0;
  std::string run_id;
  int64_t gradients_applied = 0;
  size_t members = 0;  // elastic membership
};

// Called once per pulled partition, under the store's reader lock: copy what you need.
// `revision` names these values: it changes with every update of the partition and is never
// reused by the store, so a caller may keep what it made of them (an encoded answer) under it.
using PullVisitor = absl::FunctionRef<void(const PartitionKey& key, uint64_t offset,
                                           std::span<const float> values, uint64_t revision)>;

// Thread-safe. Locks, always taken in this order:
//   mu_ (reader/writer): the partition table, values, slots, global step, config, run id.
//     Readers: Pull, Export, Status and sync-mode accumulation. Writers: Init, Close, and every
//     optimizer update, so a pull never sees a half-applied step.
//   round_mu_: the partitions' sync round admission counters (admitted, arrived, closing).
//   Partition::accum_mu: one partition's gradient sum, so pushes accumulate different partitions
//     in parallel while holding mu_ only as readers.
class ShardStore {
 public:
  // `metrics` may be null; otherwise it must outlive the store.
  explicit ShardStore(PsMetrics* metrics = nullptr);
  ~ShardStore();
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  // Called after every change that can make a waiting pull ready (Init, a step, Close), outside
  // the store's locks, so a server can wake pulls it parked without a thread each. Set it before
  // the store is shared; null clears it.
  void SetChangeListener(std::function<void()> listener);

  // Creates or replaces every partition, slot and the global step (chief: init or restore).
  // INVALID_ARGUMENT on a bad config, duplicate keys, empty values, mis-sized/unknown slots, or a
  // NaN or infinite value or slot.
  absl::Status Init(ShardState state);

  // FAILED_PRECONDITION before Init; ABORTED on a run id mismatch; INVALID_ARGUMENT on unknown
  // keys, wrong sizes, duplicates, a NaN or infinite gradient (nothing is applied), or (sync) a
  // push of no partition; UNAVAILABLE after Close. A push stale for any of its partitions is OK
  // with outcome.stale set (it still counts for those where it is not).
  absl::StatusOr<PushOutcome> Push(const PushArgs& args);

  // Visits `keys` (all partitions when empty) once each of them has reached min_step (async:
  // once the global step has). The outcome's step is the smallest of theirs. DEADLINE_EXCEEDED if
  // that does not happen by `deadline` (a past deadline only tries); FAILED_PRECONDITION before
  // Init; NOT_FOUND on an unknown key; INVALID_ARGUMENT on a key named twice or when the values
  // and their framing would exceed `max_response_bytes` (checked before anything is visited);
  // UNAVAILABLE after Close.
  absl::StatusOr<PullOutcome> Pull(
      std::span<const PartitionKey> keys, int64_t min_step, absl::Time deadline, PullVisitor visit,
      uint64_t max_response_bytes = std::numeric_limits<uint64_t>::max()) const;

  // Whether a Pull of `keys` for `min_step` would answer now rather than wait.
  bool PullReady(std::span<const PartitionKey> keys, int64_t min_step) const;

  // Adds `worker` to the membership or refreshes it (`leave`: removes it), drops members silent
  // for longer than member_timeout, and completes the current step when the change lets it.
  // Works before Init too (a ps that restarted learns its members back from their heartbeats);
  // UNAVAILABLE after Close.
  absl::StatusOr<Membership> Join(uint32_t worker, bool leave, absl::Time now = absl::Now());

  // FAILED_PRECONDITION before Init. Sync mode: waits, up to `level_wait`, for every partition
  // to reach the same step, so a checkpoint holds one step's values; a partition still a step
  // ahead after that (a backup worker's step in flight) is exported as it is, at the shard's
  // (smallest) step.
  absl::StatusOr<ShardState> Export(absl::Duration level_wait = absl::Seconds(5)) const;
  StoreStatus Status() const;

  // Refuses further pushes and pulls and wakes blocked pulls (shutdown).
  void Close();

 private:
  // One partition's values, slots and (sync mode) its round: the step it is at, and this round's
  // gradient sum.
  struct Partition {
    PartitionKey key;
    uint64_t offset = 0;
    std::vector<float> values;  // guarded by ShardStore::mu_
    uint64_t revision = 0;      // guarded by ShardStore::mu_; see PullVisitor
    // Guarded by ShardStore::mu_; in Optimizer::SlotNames order.
    std::vector<std::vector<float>> slots;
    // Sync mode, guarded by ShardStore::mu_: the step these values are at, and the gradients
    // applied into them over the run.
    int64_t step = 0;
    int64_t applied = 0;
    // Sync mode, guarded by ShardStore::round_mu_: this round's admissions.
    int admitted = 0;      // pushes let into this step's round
    int arrived = 0;       // of those, finished accumulating
    bool closing = false;  // the step is being applied
    absl::Mutex accum_mu;
    std::vector<float> accum ABSL_GUARDED_BY(accum_mu);  // sync mode: this round's gradient sum
    // Gradients summed into `accum` this round. The first is copied rather than added (BytePS's
    // COPY_FIRST), so `accum` needs no zeroing between rounds.
    int accum_count ABSL_GUARDED_BY(accum_mu) = 0;
  };

  absl::Status CheckServing() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A push's gradients by partition.
  // nullptr: no gradient (a round completed by a push that had added its own already).
  using Targets = std::vector<std::pair<Partition*, const GradientBytes*>>;
  absl::StatusOr<Targets> Resolve(const PushArgs& args) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::StatusOr<PushOutcome> PushSync(const PushArgs& args);
  absl::StatusOr<PushOutcome> PushAsync(const PushArgs& args);
  // Applies the averaged sums of the partitions' rounds that completed in `generation`, unless an
  // Init came in between, adding the gradients of the push that completed a round where that push
  // did not add them itself (the bytes; empty otherwise). Returns the global step afterwards.
  int64_t ApplySyncRounds(uint64_t generation, const Targets& completed);
  // The gradients each partition's current step needs.
  int Quota() const ABSL_SHARED_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);
  // Whether `p`'s current step has what it needs and no push is still adding to it; if so, marks
  // it closing (no more admissions) and the caller applies it.
  bool TakeRound(Partition& p) ABSL_SHARED_LOCKS_REQUIRED(mu_)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);
  // Sync mode: the smallest step and gradients-applied count over `keys` (every partition when
  // empty; unknown keys are skipped). Async mode: the global ones.
  std::pair<int64_t, int64_t> StepOf(std::span<const PartitionKey> keys) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Elastic: records `worker` as heard from at `now`, dropping silent members. True when the
  // membership changed.
  bool Touch(uint32_t worker, absl::Time now) ABSL_SHARED_LOCKS_REQUIRED(mu_)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);
  bool ExpireMembers(absl::Time now) ABSL_SHARED_LOCKS_REQUIRED(mu_)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(round_mu_);
  // Updates `p` from `sum` (+ `last`, elementwise, where given) / `grad_divisor`, at the
  // schedule's step for `step` and `applied` (the partition's step and gradients applied so far).
  // Either may be absent (empty, nullptr), not both.
  void ApplyOne(Partition& p, int64_t step, int64_t applied, std::span<const float> sum,
                float grad_divisor, const GradientBytes* last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Metrics of an optimizer update that began at `start` and the step it left.
  void RecordUpdate(std::chrono::steady_clock::time_point start) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void CountStale();
  void NotifyChange() const;
  bool ReadyForPull(std::span<const PartitionKey> keys, int64_t min_step) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  PsMetrics* const metrics_;
  std::function<void()> listener_;

  mutable absl::Mutex mu_;
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by Init
  // Sync mode: the smallest of the partitions' steps and counts, kept up as they move.
  int64_t global_step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t gradients_applied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t parameter_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  TrainingConfig config_ ABSL_GUARDED_BY(mu_);
  std::string run_id_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Optimizer> optimizer_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Partition>> partitions_ ABSL_GUARDED_BY(mu_);
  // Sync mode, a ps holding no partition (more ps tasks than partitions): the round its workers'
  // empty pushes make, so that its step moves with the job's as the workers' pulls expect.
  std::unique_ptr<Partition> bare_round_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<PartitionKey, Partition*> by_key_ ABSL_GUARDED_BY(mu_);
  uint64_t revisions_ ABSL_GUARDED_BY(mu_) = 0;  // the last Partition::revision handed out

  // Guards every partition's admissions (Partition::admitted, arrived, closing).
  mutable absl::Mutex round_mu_ ABSL_ACQUIRED_AFTER(mu_);
  // Elastic membership: worker → when last heard from. Kept across Init.
  std::map<uint32_t, absl::Time> members_ ABSL_GUARDED_BY(round_mu_);
  uint64_t membership_version_ ABSL_GUARDED_BY(round_mu_) = 0;
  uint64_t reported_membership_version_ ABSL_GUARDED_BY(round_mu_) = 0;  // by Join
};

}  // namespace kubetrain::ps
