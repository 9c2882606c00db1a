// The ps-sync and ps-async gradient exchanges: how each steps, pulls and counts its position on
// the shared PsExchange (worker/runtime/ps_exchange.h); see worker/runtime/exchange_ps.h.
#include "worker/runtime/exchange_ps.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/runtime/ps_exchange.h"

namespace kubetrain::worker {
namespace {

// Every worker makes total_steps() steps together: one global step per round of
// (num_workers − backup_workers) pushes, averaged; with backup workers the later pushes of a
// round are dropped as stale, and their workers go on from the newest step.
class PsSyncExchange final : public PsExchange {
 public:
  using PsExchange::PsExchange;

  absl::Status Setup() override {
    if (c_.options.backup_workers >= num_workers()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--backup-workers=", c_.options.backup_workers, ": the job has ", num_workers(),
          " training workers, and each step needs at least one gradient (at most ",
          num_workers() - 1, ")"));
    }
    return PsExchange::Setup();
  }

  absl::StatusOr<ExchangedStep> Exchange(int64_t pos, float loss) override {
    // After its last push a worker is done; the chief pulls once more, waiting for the step to
    // complete, so its final evaluation and checkpoint see every update.
    const bool last = pos + 1 >= c_.total_steps();
    if (!last || chief()) {
      RETURN_IF_ERROR(PushAndPull(/*next=*/true));
    } else {
      RETURN_IF_ERROR(PushGradients().status());
    }
    return ExchangedStep{.next = last ? pos + 1 : Position(), .loss = loss};
  }

  bool Done(int64_t pos) const override { return pos >= c_.total_steps(); }
  bool RunIsOver(const ps::ModelState& checkpoint) const override {
    return Done(checkpoint.global_step);
  }
  int examples_per_step() const override { return c_.options.batch_size * aggregated(); }
  int64_t last_global_step() const override {
    return c_.steps_per_epoch > 0 ? c_.total_steps() : -1;
  }

 protected:
  ps::TrainingConfig Config() const override {
    ps::TrainingConfig config;
    config.mode = ps::UpdateMode::kSync;
    config.replicas_to_aggregate = aggregated();
    // One update per global step.
    config.optimizer = OptimizerFor(c_.options, examples_per_step(), c_.total_steps());
    return config;
  }
  const char* mode_name() const override { return "sync"; }
  // Gradients applied per global step.
  int aggregated() const { return num_workers() - c_.options.backup_workers; }
  // The global step, shared by all.
  int64_t Position() const override { return version().step(); }
  int64_t PositionAfterRecovery(int64_t) const override { return Position(); }
};

// Every push is applied on arrival and bumps the step: the job is done once the ps have applied
// num_workers × total_steps() pushes, however they were shared out.
class PsAsyncExchange final : public PsExchange {
 public:
  using PsExchange::PsExchange;

  absl::StatusOr<ExchangedStep> Exchange(int64_t pos, float loss) override {
    // The pull also brings the global step that says whether the job is done; on a worker's
    // last step its values go unused.
    RETURN_IF_ERROR(PushAndPull(/*next=*/false));
    return ExchangedStep{.next = pos + 1, .loss = loss};
  }

  bool Done(int64_t) const override { return version().step() >= c_.total_steps() * num_workers(); }
  bool RunIsOver(const ps::ModelState& checkpoint) const override {
    return checkpoint.global_step >= c_.total_steps() * num_workers();
  }
  int examples_per_step() const override { return c_.options.batch_size; }
  // A push or two of each worker may land after the last counted one.
  int64_t last_global_step() const override {
    return c_.steps_per_epoch > 0 ? (c_.total_steps() + 1) * num_workers() : -1;
  }

 protected:
  ps::TrainingConfig Config() const override {
    ps::TrainingConfig config;
    config.mode = ps::UpdateMode::kAsync;
    config.replicas_to_aggregate = 1;
    // One update per push.
    config.optimizer =
        OptimizerFor(c_.options, examples_per_step(), c_.total_steps() * num_workers());
    return config;
  }
  const char* mode_name() const override { return "async"; }
  // Every push bumps the step, so a worker's share is global_step / num_workers.
  int64_t Position() const override { return version().step() / num_workers(); }
  int64_t PositionAfterRecovery(int64_t pos) const override { return pos; }
};

}  // namespace

std::unique_ptr<GradientExchange> MakePsSyncExchange(const ExchangeContext& context) {
  if (context.options.elastic) return MakeElasticPsExchange(context);
  return std::make_unique<PsSyncExchange>(context);
}

std::unique_ptr<GradientExchange> MakePsAsyncExchange(const ExchangeContext& context) {
  if (context.options.elastic) return MakeElasticPsExchange(context);
  return std::make_unique<PsAsyncExchange>(context);
}

}  // namespace kubetrain::worker
