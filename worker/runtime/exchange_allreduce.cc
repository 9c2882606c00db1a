// The all-reduce gradient exchange (exchange_allreduce.h): fused buffers, the local update, rank
// 0's starting state (its device side and checkpoint form: replica_state.h), when ranks compare
// checksums and evaluate together (allreduce_agreement.h).
#include "worker/runtime/exchange_allreduce.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/optimizer.h"
#include "worker/core/random.h"
#include "worker/runtime/allreduce_agreement.h"
#include "worker/runtime/chief_duties.h"
#include "worker/runtime/device_update.h"
#include "worker/runtime/fused_buckets.h"
#include "worker/runtime/replica_state.h"

namespace kubetrain::worker {
namespace {

// The largest test set the ranks evaluate together: its counts must be exact as float sums.
constexpr int64_t kMaxExamplesEvaluatedTogether = int64_t{1} << 24;

class AllReduceExchange final : public GradientExchange, private StepTail {
 public:
  explicit AllReduceExchange(const ExchangeContext& context)
      : c_(context), device_(context.device), model_(context.model) {}
  ~AllReduceExchange() override {
    model_.SetGradientsReady(nullptr);
    // Graphs ending with this exchange's tail use its memory and communicator.
    model_.ResetStepGraphs();
  }

  // ---- set-up ---------------------------------------------------------------------------------

  absl::Status Setup() override {
    if (c_.id.role == Role::kEvaluator) {
      return absl::FailedPreconditionError(
          "--mode allreduce: an evaluator reads parameters from the ps, and an all-reduce job "
          "has none; remove the Evaluator replica (the chief evaluates every epoch) or use "
          "--mode ps-sync");
    }
    elastic_ = c_.options.elastic;
    if (c_.options.fusion_bytes < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fusion-threshold-mb: must be > 0, got ", c_.options.fusion_bytes, " B"));
    }
    RETURN_IF_ERROR(ScaleFor(c_.id.num_workers));
    state_.StartSlots(optimizer_->SlotNames(), optimizer_->SlotInitialValue());
    // The loss (and an elastic job's members-changed flag) ride in the last buffer.
    fused_ = FusedBuckets(device_, model_, c_.options.fusion_bytes, c_.options.overlap_allreduce,
                          elastic_ ? 2 : 1);
    loss_slot_ = fused_.extra();
    scratch_ = Tensor(device_, {3 * kU64Chunks});
    flat_.resize(model_.num_parameters());
    return device_.Synchronize();
  }

  // The chief restores the latest checkpoint (if any); then every rank takes rank 0's step,
  // values and optimizer slots, so all start from one state however they were initialised.
  // The rank's communicator (or group) is connected by now; Setup needed none.
  absl::StatusOr<int64_t> Start(ChiefDuties* chief) override {
    comm_ = c_.id.communicator;
    if (elastic_ && c_.id.group == nullptr) {
      return absl::FailedPreconditionError("--elastic --mode allreduce: no group was connected");
    }
    if (!elastic_ && comm_ == nullptr) {
      return absl::FailedPreconditionError("--mode allreduce: no communicator was connected");
    }
    if (!elastic_ && (comm_->size() != size() || comm_->rank() != c_.id.rank)) {
      return absl::FailedPreconditionError(
          absl::StrCat("communicator is rank ", comm_->rank(), " of ", comm_->size(),
                       " but this task is rank ", c_.id.rank, " of ", size()));
    }
    // The graphs of another communicator's run (NCCL captures its collectives) must go, and
    // every rank warms up again: whether a collective is captured must agree over the ranks.
    model_.ResetStepGraphs();
    log::Info("All-reduce training",
              {{"rank", c_.id.rank},
               {"workers", size()},
               {"communicator", comm_ != nullptr ? comm_->name() : "elastic"},
               {"fused_buffers", fused_.buckets().size()},
               {"gradient_compression", comm_ == nullptr || comm_->CompressesOnTheWire()
                                            ? ps::WireFloatName(c_.options.gradient_compression)
                                            : "none (no network link: sums float32)"},
               {"parameters", model_.num_parameters()}});
    RETURN_IF_ERROR(StartOverlap());
    step_ = 0;
    run_id_ = RandomHexId();
    if (chief != nullptr) {
      ASSIGN_OR_RETURN(std::optional<ps::ModelState> state, chief->LatestCheckpoint());
      if (state) RETURN_IF_ERROR(Restore(*state));
    }
    if (elastic_) {
      absl::StatusOr<Communicator*> first = c_.id.group->Reform();
      // A worker that joins as the run ends has nothing left to train.
      if (ElasticGroup::TrainingIsOver(first.status())) return TrainingOverStatus();
      RETURN_IF_ERROR(first.status());
      comm_ = *first;
      c_.id.group->StartHeartbeat(c_.options.heartbeat_every);
    }
    RETURN_IF_ERROR(ShareState());
    if (elastic_ && Position() > 0) {
      log::Info("Joined a running job", {{"global_step", step_},
                                         {"gradients_applied", applied_},
                                         {"epoch", Position() / c_.steps_per_epoch}});
    } else if (step_ > 0) {
      log::Info("Continuing from the checkpoint's step",
                {{"global_step", step_}, {"epoch", Position() / c_.steps_per_epoch}});
    }
    return Position();
  }

  // The optimizer for a job whose learning rate is scaled for `nominal` workers: its starting
  // size. An elastic job keeps it as it grows and shrinks (linear scaling, as the ps do), and its
  // schedule runs over its gradients in steps of that size.
  absl::Status ScaleFor(int nominal) {
    if (nominal < 1) {
      return absl::InternalError(absl::StrCat("the job's starting size is ", nominal));
    }
    if (optimizer_ != nullptr && nominal == nominal_) return absl::OkStatus();
    nominal_ = nominal;
    optimizer_options_ = OptimizerFor(
        c_.options, c_.options.batch_size * nominal_,
        elastic_ ? std::max<int64_t>(1, c_.total_steps() / nominal_) : c_.total_steps());
    ASSIGN_OR_RETURN(optimizer_, ps::MakeOptimizer(optimizer_options_));
    return absl::OkStatus();
  }

  // Every rank takes rank 0's step, gradients applied, the size the learning rate is scaled for
  // (a worker that joins later was started for another size), values and optimizer slots.
  absl::Status ShareState() {
    float encoded[3 * kU64Chunks];
    EncodeU64(static_cast<uint64_t>(step_), encoded);
    EncodeU64(static_cast<uint64_t>(applied_), encoded + kU64Chunks);
    EncodeU64(static_cast<uint64_t>(nominal_), encoded + 2 * kU64Chunks);
    device_.Upload(encoded, scratch_, 3 * kU64Chunks);
    RETURN_IF_ERROR(comm_->Broadcast(scratch_.data(), 3 * kU64Chunks, 0), "broadcasting the step");
    device_.Download(scratch_, encoded, 3 * kU64Chunks);
    RETURN_IF_ERROR(device_.Synchronize());
    step_ = static_cast<int64_t>(DecodeU64(encoded));
    applied_ = static_cast<int64_t>(DecodeU64(encoded + kU64Chunks));
    RETURN_IF_ERROR(ScaleFor(static_cast<int>(DecodeU64(encoded + 2 * kU64Chunks))));
    if (elastic_) {
      shard_ = {
          .epoch = Position() / c_.steps_per_epoch, .index = comm_->rank(), .count = comm_->size()};
      if (c_.metrics) c_.metrics->workers.Set(comm_->size());
    }
    return state_.Broadcast(*comm_);
  }

  // The elastic group changed (a member joined, left or was lost): every rank forms the next
  // generation and takes rank 0's state, since a rank that failed mid-step may not have
  // applied it.
  absl::Status Reform() {
    comm_ = nullptr;  // the group drops it: a reform that fails leaves none
    ASSIGN_OR_RETURN(comm_, c_.id.group->Reform());
    return ShareState();
  }

  // Every rank of the group ends it here, after the same collective: the goodbye keeps a rank
  // that is done from closing its connections under a peer still finishing that collective.
  void CloseTogether() {
    absl::Status closed = comm_->Close();
    if (!closed.ok()) log::Debug("The group's goodbye was cut short", {{"cause", closed}});
  }

  // ---- training -------------------------------------------------------------------------------

  // The parameters live in the model's variables on the device.
  absl::Status LoadParameters() override { return absl::OkStatus(); }

  // The model left its loss in loss_slot_ (DeviceLossSlot): `loss` is not read.
  absl::StatusOr<ExchangedStep> Exchange(int64_t, float) override {
    ASSIGN_OR_RETURN(float mean_loss,
                     std::exchange(tail_given_, false)
                         ? FinishTail(step_)
                         : ReduceAndApply(step_, elastic_ ? applied_ / nominal_ : step_));
    ++step_;
    applied_ += size();
    if (c_.metrics) c_.metrics->global_step.Set(static_cast<double>(step_));
#ifndef NDEBUG
    if (!elastic_ && step_ % c_.steps_per_epoch == 0) RETURN_IF_ERROR(VerifyIdentical(step_));
#endif
    // An epoch before the last ended: its evaluation, which the chief reports (ChiefDuties).
    shared_eval_.reset();
    if (EvaluatesTogether() && step_ % c_.steps_per_epoch == 0 && !Done(step_)) {
      ASSIGN_OR_RETURN(shared_eval_, EvaluateTogether(), "evaluating the epoch ending at step ",
                       step_);
    }
    if (elastic_ && (reform_wanted_ ||
                     (!Done(Position()) && Position() / c_.steps_per_epoch != shard_.epoch))) {
      // A member joined or left (some rank's heartbeat said so, and the flag was summed into
      // this step), or a new epoch starts: reform, or re-cut the data for the epoch.
      if (reform_wanted_ && !Done(Position())) {
        CloseTogether();
        RETURN_IF_ERROR(Reform(), "reforming the group after step ", step_);
      } else {
        shard_.epoch = Position() / c_.steps_per_epoch;
      }
    }
    return ExchangedStep{.next = Position(), .loss = mean_loss};
  }

  // A failed collective has failed every rank. A fixed-size job restarts and resumes from the
  // chief's checkpoint; an elastic one forms its group again without the peer that is gone.
  absl::StatusOr<Recovery> Recover(const absl::Status& failure, int64_t) override {
    if (!elastic_ || c_.stop.load() || failure.code() == absl::StatusCode::kCancelled) {
      return failure;
    }
    log::Warn("A collective failed; forming the group again", {{"cause", failure}});
    if (c_.metrics) c_.metrics->recoveries.Increment();
    absl::Status reformed = Reform();
    if (ElasticGroup::TrainingIsOver(reformed)) return Recovery{.training_over = true};
    RETURN_IF_ERROR(reformed);
    return Recovery{.training_over = false, .pos = Position()};
  }

  float* DeviceLossSlot() override { return loss_slot_; }

  // Over a communicator that queues its collectives on the device (NCCL), the reduction, the
  // update and the loss's download are issued with the step's gradients, and captured and
  // replayed with them (docs/decisions/0010-one-graph-per-step.md): a step is then one graph
  // launch and one host wait. Not for an elastic job (it waits for the sums before applying
  // them), the overlapped reduction (host code between layers) or compression (Gloo's wire).
  StepTail* DeviceTail() override {
    if (elastic_ || overlap_ != nullptr || Compresses() || comm_ == nullptr ||
        !comm_->QueuesOnTheDevice()) {
      return nullptr;
    }
    // Slots restored or shared since the last step: graphs captured with the old ones are stale.
    if (update_.Target(fused_, state_)) model_.ResetStepGraphs();
    StageRule(step_);
    tail_given_ = true;
    return this;
  }
  bool Done(int64_t pos) const override { return pos >= c_.total_steps(); }
  bool RunIsOver(const ps::ModelState& checkpoint) const override {
    return Done(elastic_ ? checkpoint.gradients_applied : checkpoint.global_step);
  }
  absl::Status EndTraining() override {
    shared_eval_.reset();  // set again below only by the ranks' final evaluation
    // An elastic rank told at a reform that training is over has no group left to compare with.
    if (comm_ != nullptr) {
      RETURN_IF_ERROR(VerifyIdentical(step_));
      if (EvaluatesTogether()) {
        ASSIGN_OR_RETURN(shared_eval_, EvaluateTogether(), "evaluating the final parameters");
      }
      CloseTogether();
    }
    if (elastic_) {
      if (c_.id.role == Role::kChief) {
        absl::Status finished = c_.id.group->Finish();
        if (!finished.ok()) log::Warn("Could not end the group's reforms", {{"error", finished}});
      }
      c_.id.group->Leave();
    }
    return absl::OkStatus();
  }
  std::optional<ElasticShard> DataShard() const override {
    if (!elastic_) return std::nullopt;
    return shard_;
  }
  void ShutDown() override {}

  // ---- what the chief reads -------------------------------------------------------------------

  // The checkpoint format the ps modes write (values, slots by name, step), so either mode can
  // resume the other's run.
  absl::StatusOr<ps::ModelState> Export() override {
    ps::ModelState state;
    state.config.mode = ps::UpdateMode::kSync;
    state.config.replicas_to_aggregate = elastic_ ? nominal_ : size();
    state.config.elastic = elastic_;
    state.config.optimizer = optimizer_->options();
    state.global_step = step_;
    state.gradients_applied = applied_;
    state.run_id = run_id_;
    RETURN_IF_ERROR(state_.Export(&state));
    return state;
  }

  int64_t global_step() const override { return step_; }
  std::optional<double> learning_rate() const override {
    if (optimizer_ == nullptr) return std::nullopt;
    return ps::LearningRateAt(optimizer_options_, step_);
  }
  int examples_per_step() const override { return c_.options.batch_size * size(); }
  int64_t last_global_step() const override {
    return elastic_ ? c_.total_steps() + 1 : c_.total_steps();
  }
  std::optional<uint64_t> parameter_checksum() const override { return checksum_; }
  std::optional<EvalResult> shared_evaluation() const override { return shared_eval_; }

  absl::Status AwaitParameters(bool) override {
    return absl::FailedPreconditionError("--mode allreduce: there are no ps to read from");
  }

 private:
  // Whether this step's gradients cross the wire compressed (--gradient-compression, over a
  // communicator with a wire: Gloo's ring).
  bool Compresses() const {
    return c_.options.gradient_compression != ps::WireFloat::kFloat32 &&
           comm_->CompressesOnTheWire();
  }

  int size() const {
    if (elastic_) return comm_ != nullptr ? comm_->size() : c_.id.num_workers;
    return c_.id.num_workers;
  }
  // Where this rank is: the global step, or (elastic) the gradients applied.
  int64_t Position() const { return elastic_ ? applied_ : step_; }

  // --overlap-allreduce: each buffer's sum starts as backward completes its variables, on a
  // thread of its own (worker/runtime/fused_buckets.h). Only a fixed-size job on the CPU over
  // Gloo: an elastic job swaps its communicator between steps, and a device that queues its
  // work would need a wait per layer.
  absl::Status StartOverlap() {
    if (!c_.options.overlap_allreduce) return absl::OkStatus();
    if (elastic_ || device_.name() != "cpu" || comm_->name() != "gloo") {
      log::Info("--overlap-allreduce: not for this job; the buffers are summed after backward",
                {{"why", elastic_ ? "elastic" : "needs the CPU device and Gloo"}});
      return absl::OkStatus();
    }
    overlap_ = std::make_unique<OverlappedReduction>(fused_, [this](size_t i) {
      absl::Span<const absl::Span<float>> one(&fused_.spans()[i], 1);
      return Compresses() ? comm_->AllReduceManyCompressed(one, c_.options.gradient_compression)
                          : comm_->AllReduceMany(one, ReduceOp::kSum);
    });
    model_.SetGradientsReady([this](size_t ready) { overlap_->GradientsReady(ready); });
    return absl::OkStatus();
  }

  absl::Status Restore(const ps::ModelState& state) {
    RETURN_IF_ERROR(state_.Restore(state, c_.options.checkpoint_dir));
    step_ = state.global_step;
    applied_ = state.gradients_applied;
    if (elastic_ && state.config.elastic && state.config.replicas_to_aggregate >= 1) {
      RETURN_IF_ERROR(ScaleFor(state.config.replicas_to_aggregate));
    }
    if (!state.run_id.empty()) run_id_ = state.run_id;
    log::Info("Restored the latest checkpoint",
              {{"global_step", step_}, {"dir", c_.options.checkpoint_dir}});
    return absl::OkStatus();
  }

  // Sums the fused buffers (every gradient, the loss beside them, and an elastic job's flag)
  // over the ranks and applies the update, with one wait for the device: the gradients are
  // already in the buffers, the loss is on the device (DeviceLossSlot), and the reduction, the
  // update and the download of the summed loss are queued in order on the device's stream. An
  // elastic job waits for the sums before applying them: it goes on from the parameters in
  // memory after a failed collective, which must not have taken a partial sum. Returns the mean
  // loss over every rank's batch.
  absl::StatusOr<float> ReduceAndApply(int64_t pos, int64_t update_step) {
    if (elastic_) {
      const float change = c_.id.group->change_pending() ? 1.0f : 0.0f;
      device_.CopyHostToDevice(&change, loss_slot_ + 1, sizeof(float));
    }
    absl::Time t0 = absl::Now();
    if (overlap_ != nullptr) {
      RETURN_IF_ERROR(overlap_->Finish(), "all-reducing the gradients of step ", pos);
      if (c_.metrics) {
        c_.metrics->overlapped_buffers.Increment(
            static_cast<double>(overlap_->started_during_backward() - overlapped_));
      }
      overlapped_ = overlap_->started_during_backward();
    } else if (Compresses()) {
      RETURN_IF_ERROR(
          comm_->AllReduceManyCompressed(fused_.spans(), c_.options.gradient_compression),
          "all-reducing the gradients of step ", pos);
    } else {
      RETURN_IF_ERROR(comm_->AllReduceMany(fused_.spans(), ReduceOp::kSum),
                      "all-reducing the gradients of step ", pos);
    }
    if (elastic_) {
      RETURN_IF_ERROR(comm_->WaitForQueued(), "all-reducing the gradients of step ", pos);
    }
    update_.Target(fused_, state_);
    StageRule(update_step);
    update_.Issue();
    RETURN_IF_ERROR(comm_->WaitForQueued(), "all-reducing the gradients of step ", pos);
    update_.IssueLossDownload(loss_slot_, elastic_ ? 2 : 1);
    RETURN_IF_ERROR(device_.Synchronize(), "applying the update of step ", pos);
    reform_wanted_ = elastic_ && update_.loss()[1] > 0;
    if (c_.metrics) c_.metrics->allreduce_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
    CountSent();
    return update_.loss()[0] / static_cast<float>(size());
  }

  // The step's tail was issued with its gradients (DeviceTail): waits for it, bounded by the
  // communicator's timeout, and returns the mean loss it brought back. The all-reduce's own
  // duration is not observed: it ran inside the step.
  absl::StatusOr<float> FinishTail(int64_t pos) {
    RETURN_IF_ERROR(comm_->WaitForQueued(), "all-reducing the gradients of step ", pos);
    RETURN_IF_ERROR(device_.Synchronize(), "applying the update of step ", pos);
    CountSent();
    return update_.loss()[0] / static_cast<float>(size());
  }

  // StepTail: the reduction, the update and the download of the summed loss, queued on the
  // device after backward.
  absl::Status Issue() override {
    RETURN_IF_ERROR(comm_->AllReduceMany(fused_.spans(), ReduceOp::kSum),
                    "all-reducing the gradients of step ", step_);
    update_.Issue();
    update_.IssueLossDownload(loss_slot_, 1);
    return absl::OkStatus();
  }

  // Stages the optimizer's rule for step `pos`, to be applied to the summed gradients: scaled to
  // their mean; an elastic job's sum over the size the learning rate was scaled for (linear
  // scaling, as the ps do: ps/store.h).
  void StageRule(int64_t pos) {
    ps::UpdateRule rule = optimizer_->Rule(pos);
    rule.grad_scale = 1.0f / static_cast<float>(elastic_ ? nominal_ : size());
    update_.Stage(rule);
  }

  // What a ring all-reduce sends per rank: 2(n-1)/n of the buffers, at the wire's width.
  void CountSent() {
    if (c_.metrics == nullptr) return;
    const double wire_bytes = Compresses() ? static_cast<double>(fused_.bytes()) / sizeof(float) *
                                                 ps::WireFloatBytes(c_.options.gradient_compression)
                                           : static_cast<double>(fused_.bytes());
    c_.metrics->sent_bytes.Increment(2.0 * (size() - 1) / size() * wire_bytes);
  }

  // Every rank must hold bit-identical parameters: compares a checksum of them over the ranks
  // (one max all-reduce of the checksum's chunks and their negations gives max and min).
  absl::Status VerifyIdentical(int64_t pos) {
    RETURN_IF_ERROR(model_.ReadValues(absl::MakeSpan(flat_)));
    const uint64_t mine = ParameterChecksum(flat_.data(), flat_.size());
    RETURN_IF_ERROR(CompareChecksums(device_, *comm_, scratch_, mine, pos));
    log::Debug("Parameters identical on every rank",
               {{"step", pos}, {"checksum", absl::StrFormat("%016x", mine)}});
    checksum_ = mine;
    return absl::OkStatus();
  }

  // Whether the ranks evaluate together: those of a fixed-size job with more than one rank and a
  // test set. An elastic job's ranks may end apart (EndTraining), so its chief evaluates alone.
  bool EvaluatesTogether() const {
    return !elastic_ && comm_ != nullptr && size() > 1 && c_.test != nullptr &&
           c_.test->size() <= kMaxExamplesEvaluatedTogether;
  }

  // Every rank evaluates its share of the test set (EvalShare{rank, size}) and one sum
  // all-reduce of [loss sum, correct, examples] gives every rank the whole set's result, in
  // 1/size of the time the chief alone would take while the other ranks' devices idle. The
  // counts are exact (floats hold integers up to 2^24); the loss is the float sum of the ranks'
  // sums.
  absl::StatusOr<EvalResult> EvaluateTogether() {
    ASSIGN_OR_RETURN(const EvalResult mine,
                     model_.Evaluate(*c_.test, c_.options.eval_batch, &c_.stop,
                                     {.index = comm_->rank(), .count = comm_->size()}),
                     "evaluating this rank's share of the test set");
    return SumEvaluations(device_, *comm_, scratch_, mine);
  }

  const ExchangeContext c_;
  Device& device_;
  Model& model_;
  Communicator* comm_ = nullptr;
  std::unique_ptr<ps::Optimizer> optimizer_;
  ps::OptimizerOptions optimizer_options_;  // optimizer_'s
  ReplicaState state_{device_, model_};     // the parameters and the optimizer's slots
  DeviceUpdate update_{device_};            // the optimizer's update on the device
  bool tail_given_ = false;                 // DeviceTail was given for the step in progress
  FusedBuckets fused_;
  std::unique_ptr<OverlappedReduction> overlap_;  // --overlap-allreduce, where it applies
  int64_t overlapped_ = 0;                        // its buffers started during backward, counted
  Tensor scratch_;                                // small collectives (step, checksum)
  std::vector<float> flat_;                       // host copy of the parameters for the checksum
  int64_t step_ = 0;
  std::string run_id_;
  std::optional<uint64_t> checksum_;       // once the ranks compared the final parameters
  std::optional<EvalResult> shared_eval_;  // the ranks' evaluation at an epoch's end or the end
  float* loss_slot_ = nullptr;             // in the last buffer: the step's mean loss
  // Elastic jobs (docs/architecture.md §5.10).
  bool elastic_ = false;
  int nominal_ = 1;             // the size the learning rate was scaled for
  int64_t applied_ = 0;         // gradients applied over the run: the position
  bool reform_wanted_ = false;  // the last step's summed flag
  ElasticShard shard_;
};

}  // namespace

std::unique_ptr<GradientExchange> MakeAllReduceExchange(const ExchangeContext& context) {
  return std::make_unique<AllReduceExchange>(context);
}

}  // namespace kubetrain::worker
