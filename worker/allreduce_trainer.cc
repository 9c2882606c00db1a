#include "worker/allreduce_trainer.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status.h"
#include "ps/optimizer.h"
#include "worker/checkpoint.h"
#include "worker/data/shard.h"
#include "worker/models.h"
#include "worker/progress_log.h"
#include "worker/random.h"

namespace kubetrain::worker {
namespace {

// Collectives move floats only; a 64-bit value travels as four 16-bit chunks, each exact in a
// float.
constexpr int kChunks = 4;

void EncodeU64(uint64_t v, float* out) {
  for (int i = 0; i < kChunks; ++i) out[i] = static_cast<float>((v >> (16 * i)) & 0xffff);
}

uint64_t DecodeU64(const float* in) {
  uint64_t v = 0;
  for (int i = 0; i < kChunks; ++i) v |= static_cast<uint64_t>(in[i]) << (16 * i);
  return v;
}

}  // namespace

uint64_t ParameterChecksum(const float* values, size_t count) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(values);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < count * sizeof(float); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

class AllReduceTrainer::Impl {
 public:
  Impl(TrainerOptions options, TaskIdentity id, Device& device, const Dataset* train,
       const Dataset* test, WorkerMetrics* metrics)
      : options_(std::move(options)),
        id_(std::move(id)),
        device_(device),
        train_(train),
        test_(test),
        metrics_(metrics),
        checkpointer_({options_.checkpoint_dir, options_.keep_checkpoints}) {}

  absl::StatusOr<TrainingSummary> Run(const std::atomic<bool>& stop) {
    start_ = absl::Now();
    RETURN_IF_ERROR(Setup());
    RETURN_IF_ERROR(SyncInitialState());
    return TrainLoop(stop);
  }

 private:
  // A variable's place in a fused gradient buffer.
  struct Member {
    Variable* variable;
    std::vector<Tensor>* slots;
    int64_t offset;
  };
  struct Bucket {
    std::vector<Member> members;
    int64_t elements = 0;
    Tensor buffer;
  };

  bool chief() const { return id_.rank == 0; }
  int size() const { return id_.num_workers; }
  int GlobalBatch() const { return options_.batch_size * size(); }
  int64_t TotalSteps() const { return int64_t{options_.epochs} * steps_per_epoch_; }

  // ---- set-up -------------------------------------------------------------------------------

  absl::Status Setup() {
    RETURN_IF_ERROR(ValidateOptions(options_));
    if (id_.role == Role::kEvaluator) {
      return absl::FailedPreconditionError(
          "--mode allreduce: an evaluator reads parameters from the ps, and an all-reduce job "
          "has none; remove the Evaluator replica (the chief evaluates every epoch) or use "
          "--mode ps-sync");
    }
    comm_ = id_.communicator;
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("--mode allreduce: no communicator was connected");
    }
    if (comm_->size() != size() || comm_->rank() != id_.rank) {
      return absl::FailedPreconditionError(
          absl::StrCat("communicator is rank ", comm_->rank(), " of ", comm_->size(),
                       " but this task is rank ", id_.rank, " of ", size()));
    }
    if (train_ == nullptr) return absl::FailedPreconditionError("no training set loaded");
    if (options_.fusion_bytes < 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("--fusion-threshold-mb: must be > 0, got ", options_.fusion_bytes, " B"));
    }
    ASSIGN_OR_RETURN(model_, MakeModel(options_.model, device_, options_.seed));
    batches_ = std::make_unique<ShardBatches>(*train_, ShardSpec{options_.seed, id_.rank, size()},
                                              options_.batch_size);
    steps_per_epoch_ = batches_->steps_per_epoch();
    if (steps_per_epoch_ < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch-size: ", options_.batch_size, " is larger than this worker's shard of ",
          ShardSize(train_->size(), size()), " examples"));
    }
    ASSIGN_OR_RETURN(optimizer_,
                     ps::MakeOptimizer(OptimizerFor(options_, GlobalBatch(), TotalSteps())));
    const int num_slots = ps::UpdateSlots(static_cast<ps::UpdateKind>(optimizer_->options().kind));
    slots_.resize(model_->variables().size());
    for (size_t i = 0; i < slots_.size(); ++i) {
      Variable* v = model_->variables()[i];
      for (int s = 0; s < num_slots; ++s) {
        slots_[i].emplace_back(device_, v->shape());
        device_.Fill(v->size(), optimizer_->SlotInitialValue(), slots_[i].back().data());
      }
    }
    BuildBuckets();
    scratch_ = Tensor(device_, {2 * kChunks});
    flat_.resize(model_->num_parameters());
    return device_.Synchronize();
  }

  // Packs variables in order into buffers of at most fusion_bytes (a larger variable gets one of
  // its own); one more float at the end of the last carries the step's loss.
  void BuildBuckets() {
    const int64_t limit = std::max<int64_t>(1, options_.fusion_bytes / sizeof(float));
    for (size_t i = 0; i < model_->variables().size(); ++i) {
      Variable* v = model_->variables()[i];
      if (buckets_.empty() ||
          (buckets_.back().elements > 0 && buckets_.back().elements + v->size() > limit)) {
        buckets_.emplace_back();
      }
      Bucket& b = buckets_.back();
      b.members.push_back({v, &slots_[i], b.elements});
      b.elements += v->size();
    }
    buckets_.back().elements += 1;  // the loss
    for (Bucket& b : buckets_) b.buffer = Tensor(device_, {b.elements});
    log::Info("All-reduce training", {{"rank", id_.rank},
                                      {"workers", size()},
                                      {"communicator", comm_->name()},
                                      {"fused_buffers", buckets_.size()},
                                      {"parameters", model_->num_parameters()}});
  }

  // The chief restores the latest checkpoint (if any); then every rank takes rank 0's step,
  // values and optimizer slots, so all start from one state however they were initialised.
  absl::Status SyncInitialState() {
    step_ = 0;
    run_id_ = RandomHexId();
    if (chief() && !options_.checkpoint_dir.empty()) {
      CheckpointExpectation expected{options_.model, TotalSteps(), {}};
      for (Variable* v : model_->variables()) {
        expected.variables.push_back({v->name, static_cast<uint64_t>(v->size())});
      }
      ASSIGN_OR_RETURN(std::optional<ps::ModelState> state, checkpointer_.LoadLatest(expected));
      if (state) RETURN_IF_ERROR(Restore(*state));
    }
    float encoded[kChunks];
    EncodeU64(static_cast<uint64_t>(step_), encoded);
    device_.Upload(encoded, scratch_, kChunks);
    RETURN_IF_ERROR(comm_->Broadcast(scratch_.data(), kChunks, 0), "broadcasting the step");
    device_.Download(scratch_, encoded, kChunks);
    RETURN_IF_ERROR(device_.Synchronize());
    step_ = static_cast<int64_t>(DecodeU64(encoded));
    for (size_t i = 0; i < slots_.size(); ++i) {
      Variable* v = model_->variables()[i];
      RETURN_IF_ERROR(comm_->Broadcast(v->value.data(), v->size(), 0), "broadcasting ", v->name);
      for (Tensor& slot : slots_[i]) {
        RETURN_IF_ERROR(comm_->Broadcast(slot.data(), slot.size(), 0), "broadcasting ", v->name);
      }
    }
    if (step_ > 0) {
      log::Info("Continuing from the checkpoint's step",
                {{"global_step", step_}, {"epoch", step_ / steps_per_epoch_}});
    }
    return absl::OkStatus();
  }

  absl::Status Restore(const ps::ModelState& state) {
    const std::vector<std::string> slot_names = optimizer_->SlotNames();
    for (size_t i = 0; i < slots_.size(); ++i) {
      Variable* v = model_->variables()[i];
      const ps::VariableState* saved = nullptr;
      for (const ps::VariableState& s : state.variables) {
        if (s.name == v->name) saved = &s;
      }
      if (saved == nullptr || static_cast<int64_t>(saved->values.size()) != v->size()) {
        return absl::FailedPreconditionError(
            absl::StrCat("checkpoint in ", options_.checkpoint_dir, " has no variable ", v->name,
                         " of ", v->size(), " values; it was written for another model"));
      }
      device_.Upload(saved->values.data(), v->value, v->size());
      for (size_t s = 0; s < slot_names.size(); ++s) {
        auto it = saved->slots.find(slot_names[s]);
        // Another optimizer's slots (the flags changed between runs) start afresh.
        if (it != saved->slots.end() && static_cast<int64_t>(it->second.size()) == v->size()) {
          device_.Upload(it->second.data(), slots_[i][s], v->size());
        }
      }
    }
    step_ = state.global_step;
    if (!state.run_id.empty()) run_id_ = state.run_id;
    RETURN_IF_ERROR(device_.Synchronize());
    log::Info("Restored the latest checkpoint",
              {{"global_step", step_}, {"dir", options_.checkpoint_dir}});
    return absl::OkStatus();
  }

  // ---- training ------------------------------------------------------------------------------

  absl::StatusOr<TrainingSummary> TrainLoop(const std::atomic<bool>& stop) {
    progress_.Start(step_);
    int64_t pos = step_;
    while (pos < TotalSteps()) {
      if (stop.load()) return absl::CancelledError("stopped by signal");
      absl::Time t0 = absl::Now();
      ASSIGN_OR_RETURN(const Batch* batch, batches_->At(pos));
      ASSIGN_OR_RETURN(float loss,
                       model_->ComputeGradients(batch->image_span(), batch->label_span()));
      ASSIGN_OR_RETURN(last_loss_, ReduceGradients(pos, loss));
      ApplyUpdates(pos);
      RETURN_IF_ERROR(device_.Synchronize(), "applying the update of step ", pos);
      ++pos;
      step_ = pos;
      if (metrics_) {
        metrics_->steps.Increment();
        metrics_->examples.Increment(batch->size);
        metrics_->loss.Set(last_loss_);
        metrics_->global_step.Set(static_cast<double>(pos));
        metrics_->epoch.Set(static_cast<double>(pos / steps_per_epoch_));
        metrics_->step_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
      }
      const bool epoch_end = pos % steps_per_epoch_ == 0;
#ifndef NDEBUG
      if (epoch_end) RETURN_IF_ERROR(VerifyIdentical(pos));
#endif
      if (!chief()) continue;
      progress_.MaybeLog(pos, pos / steps_per_epoch_, last_loss_, GlobalBatch());
      if (epoch_end && pos < TotalSteps()) RETURN_IF_ERROR(LogEvaluation(pos));
      if (absl::Now() - last_checkpoint_time_ >= options_.checkpoint_every) {
        absl::Status s = SaveCheckpoint(pos);
        if (!s.ok()) log::Warn("Checkpoint failed; training goes on", {{"error", s}});
      }
    }
    RETURN_IF_ERROR(VerifyIdentical(pos));
    if (chief()) return FinishAsChief(pos);
    log::Info("Training finished", {{"steps", pos}});
    return Summary(pos);
  }

  // Packs every gradient (and the loss) into the fused buffers and sums them over the ranks.
  // Returns the mean loss over every rank's batch.
  absl::StatusOr<float> ReduceGradients(int64_t pos, float loss) {
    for (Bucket& b : buckets_) {
      for (const Member& m : b.members) {
        device_.CopyDeviceToDevice(m.variable->grad.data(), b.buffer.data() + m.offset,
                                   m.variable->grad.bytes());
      }
    }
    Bucket& last = buckets_.back();
    float* loss_slot = last.buffer.data() + last.elements - 1;
    device_.CopyHostToDevice(&loss, loss_slot, sizeof(float));
    RETURN_IF_ERROR(device_.Synchronize(), "packing the gradients of step ", pos);
    absl::Time t0 = absl::Now();
    size_t bytes = 0;
    for (Bucket& b : buckets_) {
      RETURN_IF_ERROR(comm_->AllReduce(b.buffer.data(), b.elements, ReduceOp::kSum),
                      "all-reducing the gradients of step ", pos);
      bytes += b.buffer.bytes();
    }
    float summed_loss = 0;
    device_.CopyDeviceToHost(loss_slot, &summed_loss, sizeof(float));
    RETURN_IF_ERROR(device_.Synchronize());
    if (metrics_) {
      metrics_->allreduce_duration.Observe(absl::ToDoubleSeconds(absl::Now() - t0));
      // What a ring all-reduce sends per rank: 2(n-1)/n of the buffer.
      metrics_->sent_bytes.Increment(2.0 * (size() - 1) / size() * static_cast<double>(bytes));
    }
    return summed_loss / static_cast<float>(size());
  }

  // The optimizer's update for step `pos` from the summed gradients, scaled to their mean.
  void ApplyUpdates(int64_t pos) {
    ps::UpdateRule rule = optimizer_->Rule(pos);
    rule.grad_scale = 1.0f / static_cast<float>(size());
    for (Bucket& b : buckets_) {
      for (const Member& m : b.members) {
        std::vector<Tensor>& slots = *m.slots;
        device_.ApplyUpdate(rule, m.variable->size(), b.buffer.data() + m.offset,
                            m.variable->value.data(), slots.size() > 0 ? slots[0].data() : nullptr,
                            slots.size() > 1 ? slots[1].data() : nullptr);
      }
    }
  }

  // Every rank must hold bit-identical parameters: compares a checksum of them over the ranks
  // (one max all-reduce of the checksum's chunks and their negations gives max and min).
  absl::Status VerifyIdentical(int64_t pos) {
    RETURN_IF_ERROR(model_->ReadValues(absl::MakeSpan(flat_)));
    const uint64_t mine = ParameterChecksum(flat_.data(), flat_.size());
    float chunks[2 * kChunks];
    EncodeU64(mine, chunks);
    for (int i = 0; i < kChunks; ++i) chunks[kChunks + i] = -chunks[i];
    device_.Upload(chunks, scratch_, 2 * kChunks);
    RETURN_IF_ERROR(comm_->AllReduce(scratch_.data(), 2 * kChunks, ReduceOp::kMax),
                    "comparing parameter checksums");
    float reduced[2 * kChunks];
    device_.Download(scratch_, reduced, 2 * kChunks);
    RETURN_IF_ERROR(device_.Synchronize());
    for (int i = 0; i < kChunks; ++i) {
      if (reduced[i] != chunks[i] || -reduced[kChunks + i] != chunks[i]) {
        return absl::InternalError(absl::StrFormat(
            "parameters differ across ranks at step %d (this rank's checksum %016x): the ranks "
            "did not apply the same updates",
            pos, mine));
      }
    }
    log::Debug("Parameters identical on every rank",
               {{"step", pos}, {"checksum", absl::StrFormat("%016x", mine)}});
    checksum_ = mine;
    return absl::OkStatus();
  }

  // ---- the chief's duties --------------------------------------------------------------------

  absl::Status LogEvaluation(int64_t pos) {
    if (test_ == nullptr) return absl::FailedPreconditionError("no test set loaded");
    ASSIGN_OR_RETURN(EvalResult eval, model_->Evaluate(*test_, options_.eval_batch));
    worker::LogEvaluation(eval, pos, pos / steps_per_epoch_, metrics_);
    last_eval_ = eval;
    return absl::OkStatus();
  }

  // The checkpoint format the ps modes write (values, slots by name, step), so either mode can
  // resume the other's run.
  absl::Status SaveCheckpoint(int64_t pos) {
    if (options_.checkpoint_dir.empty()) return absl::OkStatus();
    ps::ModelState state;
    state.config.mode = ps::UpdateMode::kSync;
    state.config.replicas_to_aggregate = size();
    state.config.optimizer = optimizer_->options();
    state.global_step = pos;
    state.run_id = run_id_;
    const std::vector<std::string> slot_names = optimizer_->SlotNames();
    for (size_t i = 0; i < slots_.size(); ++i) {
      Variable* v = model_->variables()[i];
      ps::VariableState& saved = state.variables.emplace_back();
      saved.name = v->name;
      saved.values.resize(v->size());
      device_.Download(v->value, saved.values.data(), v->size());
      for (size_t s = 0; s < slot_names.size(); ++s) {
        std::vector<float>& slot = saved.slots[slot_names[s]];
        slot.resize(v->size());
        device_.Download(slots_[i][s], slot.data(), v->size());
      }
    }
    RETURN_IF_ERROR(device_.Synchronize());
    ASSIGN_OR_RETURN(last_checkpoint_, checkpointer_.Save(state, options_.model));
    last_checkpoint_time_ = absl::Now();
    log::Info("Saved checkpoint", {{"path", last_checkpoint_}, {"global_step", pos}});
    return absl::OkStatus();
  }

  absl::StatusOr<TrainingSummary> FinishAsChief(int64_t pos) {
    RETURN_IF_ERROR(LogEvaluation(pos));
    RETURN_IF_ERROR(SaveCheckpoint(pos), "final checkpoint");
    TrainingSummary summary = Summary(pos);
    log::Info("Training complete", {{"steps", summary.steps},
                                    {"accuracy", summary.test_accuracy},
                                    {"parameter_checksum", absl::StrFormat("%016x", checksum_)},
                                    {"wall_seconds", summary.wall_seconds}});
    return summary;
  }

  TrainingSummary Summary(int64_t pos) const {
    TrainingSummary s;
    s.steps = pos;
    s.epochs = options_.epochs;
    s.test_accuracy = last_eval_.accuracy;
    s.test_loss = last_eval_.loss;
    s.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    s.examples_per_second = s.wall_seconds > 0 ? pos * GlobalBatch() / s.wall_seconds : 0;
    s.checkpoint = last_checkpoint_;
    return s;
  }

  const TrainerOptions options_;
  const TaskIdentity id_;
  Device& device_;
  const Dataset* train_;
  const Dataset* test_;
  WorkerMetrics* metrics_;
  Checkpointer checkpointer_;
  Communicator* comm_ = nullptr;

  std::unique_ptr<Model> model_;
  std::unique_ptr<ps::Optimizer> optimizer_;
  std::vector<std::vector<Tensor>> slots_;  // per variable, the optimizer's slots
  std::vector<Bucket> buckets_;
  Tensor scratch_;           // small collectives (step, checksum)
  std::vector<float> flat_;  // host copy of the parameters for the checksum
  std::unique_ptr<ShardBatches> batches_;
  int64_t steps_per_epoch_ = 0;
  int64_t step_ = 0;
  std::string run_id_;
  uint64_t checksum_ = 0;

  absl::Time start_;
  ProgressLog progress_{options_.log_every, metrics_};
  float last_loss_ = 0;
  EvalResult last_eval_;
  std::string last_checkpoint_;
  absl::Time last_checkpoint_time_ = absl::Now();
};

AllReduceTrainer::AllReduceTrainer(TrainerOptions options, TaskIdentity identity, Device& device,
                                   const Dataset* train, const Dataset* test,
                                   WorkerMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(identity), device, train, test,
                                   metrics)) {}

AllReduceTrainer::~AllReduceTrainer() = default;

absl::StatusOr<TrainingSummary> AllReduceTrainer::Run(const std::atomic<bool>& stop) {
  return impl_->Run(stop);
}

}  // namespace kubetrain::worker
